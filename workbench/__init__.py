"""workbench: faithful models of graph-captured KV-cache metadata in LLM serving engines.

Data flows one way: geometry -> rule -> buffers -> replay(step) -> outcome.
"""

from __future__ import annotations

__version__ = "0.1.0"

# First, before any module imports torch: turn torch's backend auto-loading off where torch_npu is
# installed, so a torch_npu without the Ascend runtime cannot break `import torch`. The guard
# module imports no torch itself: `workbench --help` parses without it (devices/autoload_guard.py).
from workbench.devices.autoload_guard import guard_backend_autoload as _guard  # noqa: E402

_guard()
