"""Conformance: each release's own functions against the workbench's models, state by state.

Holds ``conformance`` (``workbench conformance``), ``behaviour`` (what conformance runs the models
with for a release), the states it tries (``states``), the form both sides answer in
(``answers``), the workbench's side (``model_calls``), every check with both sides' calls
(``checks``, ``reqtable_checks``, ``scheduler_checks``) and the conformance worker process
(``worker``: ``python -m workbench.engines.checking.worker``).

Imported by the CLI and by SGLang's learners and launch code (``checks``, ``states``, ``answers``);
imports the backends, ``model``, analysis (the seeds, the reach model), the store, the sandbox
and the engines' call modules (``sglang.calls``, ``vllm.conformance``).
"""
