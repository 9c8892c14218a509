"""The models themselves: serving geometry, typed engine steps, the paged allocator and outcomes.

Holds ``geometry`` (every size a graph-captured decode step is built from), ``cases`` (one replay
or one ``alloc_decode`` call), ``allocator`` (the paged KV-cache allocator; a gather is handed in),
``request_table``, ``choice`` and ``outcome``.

The bottom of the package: imported by everything above it (backends, engines, analysis,
preflight, sim, present, repro, devices, the CLI); imports nothing of the workbench outside
``model``, and no backend (what a backend declares sits above, in ``workbench.backends``).
"""
