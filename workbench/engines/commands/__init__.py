"""Reading a launch command with the release's own code: the launch service and what it learns.

Holds the adapter interface and the JSON that crosses between the workbench and an engine process
(``adapters``, ``adapter_common``), the engine process (``launch_zygote``) and the service that
starts and asks it (``launch_service``), the release that reads a command (``release_choice``),
and what is learned through it (``launch_learn``: each release's parser and resolution;
``startup_learn``: which atlas settings a release starts).

Imported by preflight, present, the CLI and the engine rooms' launch adapters (``adapters``,
``adapter_common``); imports the store, the sandbox, ``checking.checks`` (torch settled without
triton in the engine process), ``files``, ``model`` and, in ``startup_learn``, the backend registry,
analysis and repro (the settings it asks about).
"""
