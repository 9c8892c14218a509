"""How long ``workbench atlas --no-runs`` over every release takes the first time (nothing cached),
the second time (nothing changed: the cached result reused), and after one release's learned file
changed (the whole result computed again, every table state's executed boundary kept), against the
floor of a torch import.

    PYTHONPATH=. python scripts/bench_atlas.py [--repeat 3] [--release sglang==0.5.23]

The runs use a cache folder of their own (``WORKBENCH_CACHE`` pointed at an empty folder: the atlas
needs no wheel, it reads ``data/``), so the first computes and the later ones reuse. The change is
the release's shipped file copied into that folder's learned releases (which take precedence) with
one provenance text changed: every input digest changes, no table state does. Prints each run's
wall time, the floor's median, and each ratio.
"""

from __future__ import annotations

import argparse
import json
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


def _change(release: str, cache: Path) -> None:
    """``release``'s learned file as a user's relearning could leave it: one provenance text changed."""
    name, version = release.split("==")
    data = json.loads((ROOT / "data" / "engines" / name / f"{version}.json").read_text())
    data["wheel"] = {**data.get("wheel", {}), "file": f"{data.get('wheel', {}).get('file', '')} (relearned)"}
    target = cache / "learned" / name / f"{version}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--release", default="sglang==0.5.23", help="the release whose learned file is changed")
    args = parser.parse_args()
    results = Path(tempfile.mkdtemp(prefix="workbench-bench-atlas-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "WORKBENCH_CACHE": str(results)}
    atlas = [sys.executable, "-m", "workbench", "atlas", "--no-runs"]
    floor = [_wall([sys.executable, "-c", "import torch"], env) for _ in range(args.repeat)]
    first = _wall(atlas, env)
    again = [_wall(atlas, env) for _ in range(args.repeat)]
    _change(args.release, results)
    changed = _wall(atlas, env)
    torch_s = statistics.median(floor)
    print(f"floor (python -c 'import torch'): median {torch_s:.2f} s ({args.repeat} runs)")
    print(f"workbench atlas --no-runs, first (computed):   {first:7.2f} s  {first / torch_s:6.1f}x the floor")
    print(f"workbench atlas --no-runs, again (reused):     {statistics.median(again):7.2f} s  "
          f"{statistics.median(again) / torch_s:6.1f}x the floor (median of {args.repeat}: "
          f"{' '.join(f'{t:.2f}' for t in again)})")
    print(f"workbench atlas --no-runs, {args.release} changed: {changed:7.2f} s  {changed / torch_s:6.1f}x the floor")
    print(f"cores {os.cpu_count()}, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
