"""vllm-ascend: what the workbench learns of a vllm-ascend release (its drafter, read from its code).

Holds ``learn`` (``workbench engines learn vllm-ascend==X``). Imported by ``learning.learn`` (by
name); imports the store and ``learning``.
"""
