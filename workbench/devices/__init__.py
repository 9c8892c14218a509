"""The device the probes run on: torch device choice, graph capture, isolation, hardware checks.

Holds ``device`` (which torch device the probes run on; what turns torch's backend auto-loading
off is imported by ``workbench/__init__.py`` before anything imports torch), ``graph`` (graph capture and replay),
``isolation`` (a probe that can poison the device, in a child process), ``measured_memory`` and
``hardware_check`` (``workbench hardware-check``).

Imported by the package ``__init__``, analysis, sim, present and the CLI; ``device`` and ``graph``
import nothing of the workbench but each other, while ``isolation``, ``measured_memory`` and
``hardware_check`` import analysis, the backends and ``model`` (they run the library's probes).
"""
