"""workbench: faithful models of graph-captured KV-cache metadata in LLM serving engines.

Data flows one way: geometry -> rule -> buffers -> replay(step) -> outcome.

Imported first by every module of the package; imports only ``devices.device``, on purpose and
before anything imports torch (see below). Its packages, roughly bottom to top: ``model``;
``backends``; ``engines`` (``store`` first); ``analysis``, ``sim``, ``devices``; ``repro``,
``preflight``; ``present`` and the CLI (``cli``). Each package's ``__init__`` says what it holds and
who imports it. Every arrow between modules goes one way (``tests/test_import_graph.py``); between
packages a few go both ways through different modules (analysis and sim, checking and sglang).
"""

from __future__ import annotations

__version__ = "0.1.0"

# First, before any module imports torch: turn torch's backend auto-loading off where torch_npu is
# installed, so a torch_npu without the Ascend runtime cannot break `import torch`. The guard
# module imports no torch itself: `workbench --help` parses without it (devices/autoload_guard.py).
from workbench.devices.autoload_guard import guard_backend_autoload as _guard  # noqa: E402

_guard()
