"""SGLang: what runs inside an SGLang release's process, and the learners that ask it.

Holds SGLang's own functions called on a conformance state (``calls``, ``calls_older``,
``reqtable_calls``, ``scheduler_calls``), its graph buffers' widths measured by its own code
(``widths``, ``pooled_widths``), its learners (``learn``: ``workbench engines learn sglang==X``,
``learn_buffers``, ``learn_pooled``, ``learn_worker``, ``reach_learn``, ``reqtable_verify``) and its
launch adapter (``launch_adapter``, ``launch_runner``: its parser and resolution, run in the
engine process).

Imported by ``learning.learn`` (by name), ``checking`` (the calls), ``commands`` (the adapter, by
``"module:Class"`` name); imports the store, the sandbox, ``learning``, ``checking``,
``commands.adapters``, the backends, ``model`` and analysis (the seeds, the reach model).
"""
