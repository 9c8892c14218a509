"""How long the command line takes to answer before any work: ``workbench --help`` against the floor, a
bare ``python -c "import json"`` start of the same interpreter.

    python scripts/bench_start.py [--repeat 15]

The two commands run in turn (A B A B ...), so a machine whose speed drifts slows both alike; prints
each one's median and spread and the ratio of the medians (issue 41 asks for at most 4x).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {"floor: python -c 'import json'": [sys.executable, "-c", "import json"],
            "workbench --help": [sys.executable, "-m", "workbench", "--help"]}


def _wall(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for command in COMMANDS.values():  # one warm-up each: the file cache, not the command, on the first run
        _wall(command, env)
    for _ in range(args.repeat):
        for name, command in COMMANDS.items():
            times[name].append(_wall(command, env))
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name:<32} median {medians[name] * 1000:7.1f} ms  (min {min(t) * 1000:.1f}, max {max(t) * 1000:.1f}, "
              f"{len(t)} runs)")
    floor, help_median = medians.values()
    print(f"ratio workbench --help / floor: {help_median / floor:.2f}x; cores {os.cpu_count()}, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
