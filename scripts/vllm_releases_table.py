"""Print the docs page of learned vLLM releases (or vllm-ascend's), as ``workbench engines releases NAME --table``
does: ``PYTHONPATH=. python scripts/vllm_releases_table.py [vllm-ascend] > docs/releases-NAME-table.md``."""

from __future__ import annotations

import sys

from workbench.engines.learning.learned_table import page

if __name__ == "__main__":
    print(page(sys.argv[1] if len(sys.argv) > 1 else "vllm"))
