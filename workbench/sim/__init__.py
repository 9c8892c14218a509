"""Simulated serving: a workload of requests run step by step through the allocator and the tables.

Holds ``workload`` (the requests, the acceptance of drafts), ``simulate`` (the step loop over the
models) and ``simulate_summary``.

Imported by analysis (the atlas's simulated rows), present and the CLI; imports ``model``, the
backends, ``devices`` and analysis (``simulate_summary``'s probes), never ``engines``.
"""
