"""Turn torch's device-backend auto-loading off before the first ``import torch``; no torch here.

torch >= 2.5 imports every registered device backend during ``import torch``. Where torch_npu is
installed without the Ascend runtime that import fails, and ``import torch`` with it, unless
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` is set first. ``workbench/__init__.py`` runs the guard, so it
holds before any workbench module imports torch; ``devices/device.py`` then imports torch_npu
explicitly, under a guard of its own. This module imports nothing heavy on purpose: the command
line imports the package (and so this) before it has parsed anything, and ``workbench --help``
must not pay for torch.
"""

from __future__ import annotations

import importlib.util
import os
import sys

AUTOLOAD_ENV = "TORCH_DEVICE_BACKEND_AUTOLOAD"


def torch_npu_installed() -> bool:
    """Whether torch_npu is on the path; found without importing it, or torch."""
    return importlib.util.find_spec("torch_npu") is not None


def guard_backend_autoload() -> bool:
    """Turn torch's backend auto-loading off before the first ``import torch``; True if it did.

    Nothing happens when torch is already imported (too late), when the user chose a value, or
    when torch_npu is not installed (there is nothing to auto-load that could fail).
    """
    if "torch" in sys.modules or AUTOLOAD_ENV in os.environ or not torch_npu_installed():
        return False
    os.environ[AUTOLOAD_ENV] = "0"
    return True
