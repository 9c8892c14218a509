"""The release store: which releases exist, their wheels and source archives in the workbench's
cache, and what was learned from each (``data/engines/NAME/VERSION.json``), read back as data.

Holds ``releases`` (the list of releases and their order), ``wheels`` / ``sdists`` / ``cache_root``
(fetching and unpacking a release), ``learned`` (the learned files), ``versions`` and
``launch_defaults`` (engine versions and launch facts as data), ``vllm_releases`` (the vLLM
backends' data per release), ``startup_section`` (a release's learned start-up refusals) and
``gpus`` (the accelerators a check can stand for). Nothing here runs an engine's code.

Imported by everything that needs a release's facts: the backends (``vllm_releases``), analysis,
preflight, repro, present, the CLI and the other rooms of ``engines``. Imports only ``model``,
``files`` and the backend registry (``startup_section``: a row's label to its backend); never
another room of ``engines``.
"""
