"""vLLM's and vllm-ascend's backends: one module per buffer, each bringing its own case.

Each module declares a ``CaseBackend`` for the registry in ``workbench.backends``. Imported by the
registry, preflight (``resolve_vllm``) and the vLLM code of ``engines``; imports only
``case_backend``, ``model`` and the store's ``vllm_releases`` (each release's learned data), never
the registry.
"""
