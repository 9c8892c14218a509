"""The library's questions over the models: probes, boundaries, sweeps, the atlas and its history.

Holds the probe of one case (``probe``, ``cases``), boundaries (``boundary``, ``exact_fit``,
``closed_form``), sweeps and the atlas over engine versions and settings (``sweep``, ``atlas``,
``pooled_atlas``, ``reqtable_atlas``, ``history``), reach and memory (``reach``, ``memory``,
``verdict_numbers``), the seeds and records (``seeds``, ``records``, ``findings``) and timing
(``bench``, ``executors``).

Imported by the CLI, preflight, present, repro, sim, devices (hardware checks), and by
``engines`` (conformance's seeds and reach, ``commands.startup_learn``'s settings); imports
``model``, the backends, ``engines.store`` (versions and learned data), ``devices``, ``sim`` and
``files``; never an engine room that runs an engine's code.
"""
