"""vLLM's executor choice with the workbench's Ray stand-in is the one the real Ray gives.

A vLLM release asks Ray two things while it resolves a command whose world is larger than one GPU
and that names no executor: whether Ray imports, and whether this process has joined a Ray
cluster (``workbench/engines/vllm/ray_standin.py``). 0.11.0 asks both: a world that fits on the node
runs on multiprocessing once Ray says it is not initialized, and a world larger than the node
(tensor parallel 8 by pipeline parallel 2 on an 8-GPU node) runs on Ray because Ray imports. The
release's own resolution is run twice (``ray_probe.py``): with the stand-in, and with the Ray
installed here; every answer must be the same.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from workbench.engines.store import wheels

pytestmark = pytest.mark.engine

PROBE = Path(__file__).parent / "ray_probe.py"
HF_CACHE = Path(__file__).parent / "data" / "hf_cache" / "hub"
RELEASE = "vllm==0.11.0"
COMMANDS = [["Qwen/Qwen3-32B", "--tensor-parallel-size", "8", "--max-model-len", "4096"],
            ["Qwen/Qwen3-32B", "--tensor-parallel-size", "8", "--pipeline-parallel-size", "2", "--max-model-len", "4096"],
            ["Qwen/Qwen3-32B", "--max-model-len", "4096"]]


def _probe(ray: str) -> list[dict[str, Any]]:
    job = {"engine": RELEASE, "ray": ray, "hf_cache": str(HF_CACHE), "commands": COMMANDS}
    done = subprocess.run([sys.executable, str(PROBE)], input=json.dumps(job), capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == len(COMMANDS), done.stderr[-3000:]
    return lines


@pytest.mark.slow  # a real Ray cluster started beside the stand-in: about 5 minutes in CI (make test-slow)
def test_the_stand_in_gives_the_executor_the_real_ray_gives() -> None:
    if wheels.cached(RELEASE) is None:
        pytest.skip(f"{RELEASE} is not in the workbench's engine cache (workbench engines fetch {RELEASE})")
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed here (pip install -e '.[ray]'): nothing to compare the stand-in with")
    stood_in, real = _probe("stand-in"), _probe("real")
    assert {a["ray"] for a in stood_in} == {"stand-in"} and "stand-in" not in {a["ray"] for a in real}
    answers = [{k: v for k, v in a.items() if k != "ray"} for a in stood_in]
    assert answers == [{k: v for k, v in a.items() if k != "ray"} for a in real]
    assert all(a["status"] == "resolved" for a in answers), answers
    assert len({a["backend"] for a in answers}) == len(COMMANDS), answers  # three branches of the release's choice
