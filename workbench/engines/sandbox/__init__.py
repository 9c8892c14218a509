"""The sandbox: loading a release's modules on a CPU, in a process of their own.

Holds the stand-ins for what a CPU machine lacks (``standins``: accelerator libraries by name;
``platform_standins``: the GPU a check assumes; ``tolerant_import``: a module whose top level
needs a device, statement by statement), finding an engine's classes in an unpacked wheel
(``locate``), a model's config on this machine (``model_lookup``), an engine object's capture-time
sizing without its server (``engine_objects``) and the worker session a learner asks task after
task (``session``).

Imported by the engine rooms (``sglang``, ``vllm``), ``checking`` and ``commands``; imports only the
store (``store.gpus``) and nothing of an engine room.
"""
