"""The launch-command benchmark (``scripts/check_launch_commands.py``) reports decided / answered /
refused, offline over the data set's cache and with an empty cache against the stand-in hub."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "launch_commands.jsonl"
IDS = ("sglang-docs-deterministic-qwen3-8b-fa3", "sglang-issue-34260-kimi-k3-hf-snapshot-path-unquoted-json",
       "sgl-cookbook-nvidia-kimi-k25-nvfp4-specv2-eagle3-fp8-kv")


@pytest.mark.engine
@pytest.mark.parametrize("hub", [False, True])
def test_the_benchmark_counts_decided_answered_and_refused(hub: bool, tmp_path: Path) -> None:
    records = [line for line in DATA.read_text().splitlines() if line.strip() and json.loads(line)["id"] in IDS]
    (tmp_path / "three.jsonl").write_text("\n".join(records) + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("HF_HUB_CACHE", None)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_launch_commands.py"), str(tmp_path / "three.jsonl"),
                           "--json", str(tmp_path / "out.json"), *(["--hub"] if hub else [])],
                          capture_output=True, text=True, timeout=1200, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    statuses = Counter(o["status"] for o in json.loads((tmp_path / "out.json").read_text()))
    line = re.search(r"(\d+) commands: (\d+) decided \(exit 0 or 1\), (\d+) answered \(exit 0, 1 or 3\), (\d+) refused",
                     done.stdout)
    assert line is not None, done.stdout
    assert [int(g) for g in line.groups()] == [3, statuses[0] + statuses[1], statuses[0] + statuses[1] + statuses[3],
                                               statuses[2]]
    assert statuses[2] == 1 and statuses[0] + statuses[1] >= 1  # the unquoted JSON is refused; Qwen3-8B is decided
    if hub:
        assert "weights files asked for: 0" in done.stdout and "config.json" in done.stdout
