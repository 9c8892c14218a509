"""Which torch device the probes run on: ``auto`` prefers an Ascend NPU, then CUDA, then the CPU.

torch_npu is looked for with ``importlib.util.find_spec``, never imported blindly: on a machine
where it is installed without the Ascend runtime, torch's backend auto-loading makes ``import
torch`` itself fail unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` is set before the first import.
"""

from __future__ import annotations

import importlib.util

import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda", "npu")


def _npu_available() -> bool:
    if importlib.util.find_spec("torch_npu") is None:
        return False
    try:
        import torch_npu  # type: ignore[import-not-found]  # noqa: F401
    except Exception:  # an install without the Ascend runtime: not a usable device
        return False
    npu = getattr(torch, "npu", None)
    return bool(npu is not None and npu.is_available())


def resolve_device(name: str = "auto") -> torch.device:
    """The device for ``name``; raises ValueError naming what is missing."""
    if name not in DEVICE_CHOICES:
        raise ValueError(f"device: {name!r} is not one of {', '.join(DEVICE_CHOICES)}")
    if name == "auto":
        if _npu_available():
            return torch.device("npu")
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: 'cuda' requested but torch sees no CUDA device")
    if name == "npu" and not _npu_available():
        raise ValueError("device: 'npu' requested but torch_npu or an Ascend device is not available")
    return torch.device(name)
