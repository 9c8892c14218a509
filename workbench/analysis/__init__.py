"""The library's questions over the models: probes, boundaries, sweeps, reach and memory.

Holds the probe of one case (``probe``, ``cases``), boundaries (``boundary``, ``exact_fit``,
``closed_form``), sweeps over settings (``sweep``, ``capture_cache``), reach and memory (``reach``,
``memory``, ``verdict_numbers``), the seeds and records (``seeds``, ``records``) and timing
(``bench``, ``executors``). The atlas over releases, its history and findings are ``workbench.atlas``.

Imported by the CLI, preflight, present, repro, sim, atlas, devices (hardware checks), and by
``engines`` (conformance's seeds and reach, ``commands.startup_learn``'s settings); imports
``model``, the backends, ``engines.store`` (versions and learned data), ``devices``, ``sim`` and
``files``; never an engine room that runs an engine's code.
"""
