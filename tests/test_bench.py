"""``workbench bench`` prints every field the performance issue names; numbers are not asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from workbench.analysis.bench import bench_cases, verify_chunk
from workbench.analysis.boundary import find_boundary
from workbench.analysis.cases import TableCase

ROOT = Path(__file__).resolve().parent.parent
FIELDS = {"machine", "executor", "verified_configs", "verified_by_component", "verified_seconds",
          "verified_configs_per_s", "closed_form_configs_per_s", "step_by_step_configs", "step_by_step_over_fast",
          "alloc_decode_us_batch_256", "simulated_requests_per_s", "peak_rss_mb", "atlas_settings", "atlas_seconds",
          "atlas_rows", "atlas_runs_seconds"}


def test_bench_json_has_every_field() -> None:
    done = subprocess.run([sys.executable, "-m", "workbench", "bench", "--json", "--configs", "30",
                           "--step-by-step", "3", "--executor", "serial",
                           "--atlas-engine", "sglang==0.5.23"], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert set(results) == FIELDS
    assert sum(results["verified_by_component"].values()) == 30
    assert set(results["alloc_decode_us_batch_256"]) == {"npu-legacy", "npu-clamped", "cuda-masked", "cuda-checked"}


def test_verified_answers_equal_bisection() -> None:
    cases = bench_cases(24, seed=3)
    assert {type(c).__name__ for c in cases} == {"TableCase", "AllocatorConfig"}
    answers = verify_chunk(cases)
    for case, answer in zip(cases, answers):
        if isinstance(case, TableCase):  # an independent search: executed bisection, no closed form
            assert answer == find_boundary(case).first_failing_seq_len
