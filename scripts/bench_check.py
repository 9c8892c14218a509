"""How long ``workbench check`` takes from the command line, the engine process of the release warm.

    PYTHONPATH=. python scripts/bench_check.py [--repeat 5] [--ids ID,ID,...]

Runs ``python -m workbench check --from-file`` (a process of its own, as a user would, importing
the workbench and torch each time) on real commands of ``tests/data/launch_commands.jsonl`` whose
models are in ``tests/data/hf_cache`` and that the default release answers. The first run of each
release starts its engine process (reported apart); every later run finds it warm. Prints each
run's wall time, the median and maximum of the warm runs, and the machine's load.
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
# Commands of the data set that 0.5.23 reads and answers with rows (real models, no placeholders).
DEFAULT_IDS = ("sgl-cookbook-glm5-fp8-eagle-mtp", "sglang-docs-dsv32-tool-parser", "sgl-cookbook-qwen35-397b-speculative-algo-nextn")


def _run(path: Path, env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "workbench", "check", "--from-file", str(path)], env=env,
                          capture_output=True, text=True, timeout=900)
    return time.perf_counter() - start, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ids", default=",".join(DEFAULT_IDS))
    args = parser.parse_args()
    records = {r["id"]: r for r in map(json.loads, (ROOT / "tests" / "data" / "launch_commands.jsonl").read_text().splitlines())}
    env = {**os.environ, "HF_HUB_CACHE": str(ROOT / "tests" / "data" / "hf_cache" / "hub"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    own_run_dir = "WORKBENCH_RUN_DIR" not in env
    env.setdefault("WORKBENCH_RUN_DIR", tempfile.mkdtemp(prefix="workbench-bench-run-"))
    folder = Path(tempfile.mkdtemp(prefix="workbench-bench-"))
    warm: list[float] = []
    for number, name in enumerate(args.ids.split(",")):
        path = folder / f"{name}.sh"
        path.write_text(records[name]["command"])
        first, status = _run(path, env)
        label = "first (starts the engine process)" if number == 0 else "first"
        print(f"{name}: exit {status}; {label} {first:.2f} s", flush=True)
        times = [_run(path, env)[0] for _ in range(args.repeat)]
        warm += times
        print(f"  warm: {' '.join(f'{t:.2f}' for t in times)} s", flush=True)
    print(f"warm checks: {len(warm)}, median {statistics.median(warm):.2f} s, max {max(warm):.2f} s; "
          f"cores {os.cpu_count()}, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if own_run_dir:  # the engine processes this bench started
        subprocess.run([sys.executable, "-m", "workbench", "engines", "stop"], env=env, capture_output=True, timeout=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
