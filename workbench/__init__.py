"""workbench: faithful models of graph-captured KV-cache metadata in LLM serving engines.

Data flows one way: geometry -> rule -> buffers -> replay(step) -> outcome.
"""

from __future__ import annotations

__version__ = "0.1.0"

# First, before any module imports torch: device.py turns torch's backend auto-loading off where
# torch_npu is installed, so a torch_npu without the Ascend runtime cannot break `import torch`.
from workbench.devices import device as _device  # noqa: E402, F401
