"""workbench: faithful models of graph-captured KV-cache metadata in LLM serving engines.

Data flows one way: geometry -> rule -> buffers -> replay(step) -> outcome.
"""

from __future__ import annotations

__version__ = "0.1.0"
