"""The device kinds a user may name (``--device``, the notebooks' ``device``); no torch here, so the
command line can offer them before it imports anything heavy."""

from __future__ import annotations

DEVICE_CHOICES = ("auto", "cpu", "cuda", "npu")  # auto: an Ascend NPU, then CUDA, then the CPU
