"""Time the notebooks' explorer redraw (probe + figure) for a few states; prints milliseconds.

    .venv/bin/python scripts/time_explorer.py
"""

from __future__ import annotations

import statistics
import time

import torch

from workbench.present.explorer import ExplorerState, explore

STATES = {
    "npu QwQ seed (ctx 32768)": ExplorerState(),
    "dsa GLM seed (ctx 90000)": ExplorerState(component="dsa-page-table", context_len=90000, page_size=64,
                                              draft_tokens=6, rule="context-plus-draft"),
    "dsa ctx 1M": ExplorerState(component="dsa-page-table", context_len=1 << 20, page_size=64, draft_tokens=6),
    "allocator exact fit": ExplorerState(component="allocator", page_size=4),
}


def main() -> None:
    torch.set_num_threads(1)
    for name, state in STATES.items():
        explore(state)  # warm up imports and caches
        samples = []
        for _ in range(5):
            start = time.perf_counter()
            explore(state)
            samples.append((time.perf_counter() - start) * 1000)
        print(f"{name:<28} median {statistics.median(samples):7.1f} ms   max {max(samples):7.1f} ms")


if __name__ == "__main__":
    main()
