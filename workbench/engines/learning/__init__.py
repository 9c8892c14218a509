"""``workbench engines learn``: the engine-neutral frame of learning a release from its own code.

Holds ``learn`` (naming a release or every release, finding the engine's learner:
``workbench.engines.<engine>.learn``, and calling it), ``rules`` (naming the model rule that agrees
with what was measured) and ``learned_table`` (the table of learned releases).

Imported by the CLI and by the engines' learners (``sglang.learn``, ``vllm.learn``,
``vllm_ascend.learn``: ``LearnError``, ``rules``); imports the store, and ``learned_table`` the vLLM
learner's buffer names.
"""
