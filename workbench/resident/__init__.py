"""A resident workbench process: ``workbench check`` answered warm.

A check's own work takes a tenth of a second once the release's engine process is up, but a new
process importing torch and the workbench takes seconds. So the command line (``client``, which
imports nothing heavy) hands ``check`` to one long-lived workbench process (``server``), started on
first use and stopped when idle, the way the engine processes are. Imported by ``workbench.cli``
(the client only); the server imports the command line, never the other way at import time.
"""
