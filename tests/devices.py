"""The accelerators that device tests run on: one parameter per kind, marked ``cuda`` / ``npu`` and
skipped with a message where the device is absent."""

from __future__ import annotations

import pytest
import torch

from workbench.devices.device import find_npu

ACCELERATORS = [pytest.param("cuda", marks=pytest.mark.cuda), pytest.param("npu", marks=pytest.mark.npu)]


def require(kind: str) -> None:
    """Skip the calling test unless a ``kind`` device is here."""
    if kind == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if kind == "npu" and not find_npu().available:
        pytest.skip("no Ascend NPU (torch_npu with its runtime)")
