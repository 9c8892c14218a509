"""Standalone reproducers: for every failing atlas row and seed, a script that runs the engine's own code.

``findings`` lists what fails (ids, numbers, settings); ``conditions`` says what reaches it (the
launch command, the recipe, the batch and KV pool, the releases affected); ``render`` writes one
self-contained Python file per finding from a template per kind of finding
(``templates/*.py.tmpl``); ``page`` writes ``docs/findings.md``.

Imported by the CLI, present (the report's findings page) and ``engines.commands.startup_learn``
(the launch data of each backend); imports analysis, the backends, ``model``, ``engines.store``
and ``files``, never an engine room that runs an engine's code.
"""
