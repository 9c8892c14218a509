"""Standalone reproducers: for every failing atlas row and seed, a script that runs the engine's own code.

``findings`` lists what fails (ids, numbers, settings); ``conditions`` says what reaches it (the
launch command, the recipe, the batch and KV pool, the releases affected); ``render`` writes one
self-contained Python file per finding from a template per kind of finding
(``templates/*.py.tmpl``); ``page`` writes ``docs/findings.md``.
"""
