"""How long ``workbench check`` takes from the command line, warm, against the floor of a bare
``python -c "import json"`` start of the same interpreter.

    PYTHONPATH=. python scripts/bench_check.py [--repeat 3] [--ids ID,ID,...]

Runs ``python -m workbench check --from-file`` (a process of its own, as a user would) on eight real
commands of ``tests/data/launch_commands.jsonl`` whose models are in ``tests/data/hf_cache`` and
that the default release answers. The first run starts what the later ones reuse (the resident
workbench process, the release's engine process) and is reported apart; every later run is warm.
Prints each run's wall time, the median and maximum of the warm runs, the floor's median, their
ratio and the machine's load. ``WORKBENCH_RESIDENT=0`` measures checks that each import torch.
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
# Commands of the data set that 0.5.23 decides (SAFE or FAILS: every row computed; real models, no placeholders).
DEFAULT_IDS = ("sgl-cookbook-glm5-fp8-eagle-mtp", "sglang-docs-dsv32-tool-parser", "sgl-cookbook-qwen35-397b-speculative-algo-nextn",
               "sgl-cookbook-deepseek-v3-dp-attention-eagle-mtp", "sgl-cookbook-glm51-fp8-specv2-eagle-mtp",
               "sgl-cookbook-llama4-scout-1m-context", "sglang-docs-deterministic-qwen3-8b-fa3",
               "sglang-docs-dp-smg-guide-dsv3-tp8-dp8-ep8-dpa-deepep")


def _run(path: Path, env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "workbench", "check", "--from-file", str(path)], env=env,
                          capture_output=True, text=True, timeout=900)
    return time.perf_counter() - start, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
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
    floor = []
    for _ in range(len(warm)):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import json"], check=True)
        floor.append(time.perf_counter() - start)
    median = statistics.median(warm)
    print(f"warm checks: {len(warm)}, median {median:.3f} s, max {max(warm):.3f} s; floor (python -c 'import json') "
          f"median {statistics.median(floor):.3f} s; ratio {median / statistics.median(floor):.1f}x; "
          f"cores {os.cpu_count()}, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if own_run_dir:  # the engine processes this bench started
        subprocess.run([sys.executable, "-m", "workbench", "engines", "stop"], env=env, capture_output=True, timeout=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
