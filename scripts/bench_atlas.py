"""How long ``workbench atlas --no-runs`` over every release takes the first time (nothing cached) and
the second time (nothing changed: the cached result reused), against the floor of a torch import.

    PYTHONPATH=. python scripts/bench_atlas.py [--repeat 3]

The runs use a cache folder of their own (``WORKBENCH_CACHE`` pointed at an empty folder: the atlas
needs no wheel, it reads ``data/``), so the first computes and the later ones reuse. Prints each
run's wall time, the floor's median, and each ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _wall(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results = Path(tempfile.mkdtemp(prefix="workbench-bench-atlas-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "WORKBENCH_CACHE": str(results)}
    atlas = [sys.executable, "-m", "workbench", "atlas", "--no-runs"]
    floor = [_wall([sys.executable, "-c", "import torch"], env) for _ in range(args.repeat)]
    first = _wall(atlas, env)
    again = [_wall(atlas, env) for _ in range(args.repeat)]
    torch_s = statistics.median(floor)
    print(f"floor (python -c 'import torch'): median {torch_s:.2f} s ({args.repeat} runs)")
    print(f"workbench atlas --no-runs, first (computed):   {first:7.2f} s  {first / torch_s:6.1f}x the floor")
    print(f"workbench atlas --no-runs, again (reused):     {statistics.median(again):7.2f} s  "
          f"{statistics.median(again) / torch_s:6.1f}x the floor (median of {args.repeat}: "
          f"{' '.join(f'{t:.2f}' for t in again)})")
    print(f"cores {os.cpu_count()}, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
