"""Print the README's table of learned vLLM releases: ``PYTHONPATH=. python scripts/vllm_releases_table.py [vllm-ascend]``."""

from __future__ import annotations

import sys

from workbench.engines.store import releases
from workbench.engines.vllm import learn as learn_vllm

if __name__ == "__main__":
    print(learn_vllm.table(list(releases.releases(sys.argv[1] if len(sys.argv) > 1 else "vllm"))))
