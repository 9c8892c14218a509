"""The engines' released code, run by the workbench: fetched, loaded on a CPU, learned from, checked.

Rooms, one concern each (each one's ``__init__`` says what it holds and who imports it):
``store`` (releases, wheels, learned files: data, no engine code run), ``sandbox`` (loading a
release on a CPU: stand-ins, tolerant import, the worker session), ``learning`` (the
engine-neutral learn frame), ``checking`` (conformance), one room per engine for what runs in
that engine's process with its learners and launch adapter (``sglang``, ``vllm``,
``vllm_ascend``), and ``commands`` (reading a launch command: the adapters' interface, the launch
service and what it learns).

This ``__init__`` holds nothing and imports nothing; ``engines.store`` is imported from everywhere
(backends, analysis, preflight, repro, present, the CLI), the other rooms by the CLI, preflight
and present (``commands``) and by each other.
"""
