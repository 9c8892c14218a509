"""vLLM: what runs inside a vLLM release's process, its learners and its conformance.

Holds the release loaded on a CPU (``loader``, ``ray_standin``), its own sizing and fill functions
(``buffers``), the learn worker and its session (``learn_worker``: ``python -m
workbench.engines.vllm.learn_worker``; ``session``; ``reference_models``), the learners (``learn``:
``workbench engines learn vllm==X``, and the sections learned apart: ``learn_apart``,
``learn_kv``, ``learn_pad``, ``learn_async``, ``learn_v0_stop``), the release's conformance
(``conformance``) and its launch adapter (``launch_adapter``, run in the engine process).

Imported by ``learning`` (by name and for the table), ``checking.conformance`` and ``commands``
(the adapter, by ``"module:Class"`` name); imports the store, the sandbox, ``learning``,
``commands.adapters``, the vLLM backends and ``model``.
"""
