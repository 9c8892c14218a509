"""``workbench hardware-check`` on the CPU: the quick suite, its parquet file, and its numbers."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from devices import ACCELERATORS, require

from workbench.analysis.seeds import SEEDS
from workbench.cli import main
from workbench.devices.device import DeviceInfo, device_info
from workbench.devices.hardware_check import (
    COLUMNS,
    load_hardware_results,
    quick_suite,
    results_path,
    run_hardware_check,
)
from workbench.devices.measured_memory import measure_bytes
from workbench.model.geometry import cdiv

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame, str]:
    folder = tmp_path_factory.mktemp("hardware")
    out = io.StringIO()
    assert main(["--device", "cpu", "hardware-check", "--quick", "--repeats", "2", "--out", str(folder)], out) == 0
    path = results_path(device_info("cpu"), folder)
    return path, pd.read_parquet(path), out.getvalue()


def test_the_file_is_named_by_device_and_carries_its_facts(written: tuple[Path, pd.DataFrame, str]) -> None:
    path, frame, text = written
    info = device_info("cpu")
    assert path.name == f"cpu-{info.file_stem.removeprefix('cpu-')}.parquet"
    assert list(frame.columns) == list(COLUMNS)
    assert set(frame.device_kind) == {"cpu"} and set(frame.device_name) == {info.name}
    assert set(frame.torch_version) == {torch.__version__}
    assert f"wrote {path} ({len(frame)} rows" in text
    assert frame.groupby("section").size().to_dict() == {"seed": 6, "memory": 7, "replay-cost": 10}


def test_seed_rows_reproduce_the_spec(written: tuple[Path, pd.DataFrame, str]) -> None:
    seeds = written[1][written[1].section == "seed"]
    assert list(seeds.outcome) == ["shape-error", "ok", "shape-error", "ok", "index-error", "ok"]
    assert list(seeds.error)[::2] == [s.expected_error for s in SEEDS]
    assert set(seeds.path) == {"eager"}


def _expected_bytes(component: str, rule: str) -> tuple[int, int]:
    """(rows, bytes) of the quick preset: ctx 4096, ps 64, D 6, max_bs 4, G1 so W = 4096 + 4 + 6 = 4106."""
    ctx, ps, d, max_bs, w = 4096, 64, 6, 4, 4106
    if component == "npu-block-table":  # pages: ctx // ps, cdiv(ctx, ps), (ctx + ps - 1 + D) // ps, max(that, cdiv(W, ps))
        pages = {"context-floor": ctx // ps, "context": cdiv(ctx, ps), "context-plus-draft": (ctx + ps - 1 + d) // ps,
                 "req-to-token": max((ctx + ps - 1 + d) // ps, cdiv(w, ps))}[rule]
        return max_bs, max_bs * pages * 4
    tokens = {"context": ctx, "context-plus-draft": ctx + d, "req-to-token": w}[rule]
    rows = max_bs * d  # the verify graph: one page_table row per query token
    return rows, rows * (tokens + cdiv(tokens, ps)) * 4  # page_table + real_page_table, int32


def test_memory_rows_measure_what_the_spec_predicts(written: tuple[Path, pd.DataFrame, str]) -> None:
    memory = written[1][written[1].section == "memory"]
    assert set(memory.measure_method) == {"untyped_storage().nbytes()"}
    for row in memory.itertuples():
        rows, size = _expected_bytes(row.component, row.rule)
        assert (row.rows, row.predicted_bytes, row.measured_bytes, row.storage_bytes) == (rows, size, size, size)


def test_replay_cost_rows_time_every_rule(written: tuple[Path, pd.DataFrame, str]) -> None:
    cost = written[1][written[1].section == "replay-cost"]
    assert set(cost.outcome) == {"ok"} and set(cost.path) == {"eager"} and set(cost.repeats) == {2}
    assert (cost.copy_us > 0).all() and (cost.step_us > 0).all()
    dsa = cost[cost.component == "dsa-page-table"]
    assert sorted(zip(dsa.rule, dsa.replay)) == sorted((r, p) for r in ("context", "context-plus-draft", "req-to-token")
                                                       for p in ("dynamic", "static"))
    assert dict(zip(dsa.rule, dsa.width)) == {"context": 4096, "context-plus-draft": 4102, "req-to-token": 4106}
    assert set(dsa.rows) == {2 * 6}


def test_results_load_back_for_the_notebooks(written: tuple[Path, pd.DataFrame, str], tmp_path: Path) -> None:
    assert load_hardware_results(tmp_path) is None
    loaded = load_hardware_results(written[0].parent)
    assert loaded is not None and len(loaded) == len(written[1])


def test_real_file_naming() -> None:
    info = DeviceInfo("cuda", "NVIDIA H200", "570.86.15", "12.8", "2.13.0")
    assert results_path(info, "data/hardware") == Path("data/hardware/cuda-nvidia-h200.parquet")


def test_bad_repeats_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["hardware-check", "--quick", "--repeats", "0", "--out", str(tmp_path)], io.StringIO()) == 2
    assert capsys.readouterr().err == "workbench: error: --repeats: 0 is out of range (allowed: 1 or more)\n"


def _device_memory_check(device: str) -> None:
    got = measure_bytes(lambda: [torch.zeros((96, 90010), dtype=torch.int32, device=device)], device)
    assert got.storage_bytes == 96 * 90010 * 4
    assert got.storage_bytes <= got.measured_bytes <= got.storage_bytes + 2 * 1024 * 1024  # block rounding only
    frame = run_hardware_check(device, quick_suite(repeats=2))
    assert set(frame[frame.section == "replay-cost"].path) == {"graph"}
    assert set(frame[frame.section == "seed"].outcome) == {"shape-error", "ok", "index-error"}


@pytest.mark.parametrize("device", ACCELERATORS)
def test_device_suite(device: str) -> None:
    require(device)
    _device_memory_check(device)


def test_memory_overlay_puts_measured_bytes_next_to_the_prediction(written: tuple[Path, pd.DataFrame, str]) -> None:
    from workbench.analysis.memory import memory_table
    from workbench.devices.hardware_check import memory_overlay

    hardware = written[1]
    overlay = memory_overlay(memory_table(quick_suite().presets), hardware)
    assert len(overlay) == len(hardware[hardware.section == "memory"])
    # on the CPU the storage of a full-size buffer is exactly rows x width x 4 bytes: the prediction
    assert (overlay["measured_over_predicted"] == 1.0).all()


def test_the_prepared_device_script_runs_every_step_on_the_cpu(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "DEVICE": "cpu", "QUICK": "1", "PY": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "device_check.sh")], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, (tmp_path / "steps.txt").read_text()
    steps = (tmp_path / "steps.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in steps] == ["hardware-check", "sweep-measured", "device-tests"]
    assert all(": exit 0 in " in line for line in steps)
    assert len(list((tmp_path / "hardware").glob("cpu-*.parquet"))) == 1
    sweep = pd.read_parquet(tmp_path / "sweep-measured.parquet")
    assert len(sweep) > 0 and (sweep.measured_bytes == sweep.buffer_bytes).all()
