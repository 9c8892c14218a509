"""Bad input everywhere: every entry point answers a bad value with one line naming the field
and what is allowed (exit status 2 on the command line), no traceback, and writes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.analysis.memory import load_presets
from workbench.analysis.records import probe_record
from workbench.analysis.sweep import SweepGrid
from workbench.present.notebook_params import ParameterError, check_bool, check_choice, check_int, check_ints

QWQ = ["--rule", "context", "--context-len", "32768", "--page-size", "128", "--draft-tokens", "16", "--mode",
       "target-verify"]

CLI_CASES = [
    (["probe", "gpu"], "argument component: invalid choice: 'gpu'"),
    (["probe", "npu-block-table", *QWQ], "seq_lens: missing"),
    (["probe", "npu-block-table", *QWQ[:-2], "--mode", "prefill", "--seq-lens", "5"], "mode: 'prefill' is not one of"),
    (["probe", "npu-block-table", *QWQ, "--seq-lens", "5", "--width-gen", "g9"], "width_gen: 'g9' is not one of g0, g1, g2n, g2, g3"),
    (["probe", "npu-block-table", *QWQ, "--seq-lens", "five"], "argument --seq-lens: 'five' is not a list of integers"),
    (["probe", "npu-block-table", *QWQ, "--seq-lens", "5", "--page-size", "-3"], "page_size: -3 is out of range"),
    (["probe", "npu-block-table", *QWQ, "--seq-lens", "5", "--replay", "static"], "replay: applies to dsa-page-table only"),
    (["probe", "dsa-page-table", *QWQ, "--seq-lens", "5", "--hybrid-swa"], "hybrid_swa: applies to npu-block-table only"),
    (["probe", "allocator", "--gather", "npu-magic", "--page-size", "4", "--seq-lens", "5", "--last-loc", "11",
      "--free-pages", "3"], "gather: 'npu-magic' is not one of npu-legacy, npu-clamped, cuda-masked"),
    (["probe", "allocator", "--gather", "npu-legacy", "--page-size", "0", "--seq-lens", "5", "--last-loc", "11",
      "--free-pages", "3"], "page_size: 0 is out of range (allowed: 1 or more)"),
    (["boundary", "npu-block-table", *QWQ, "--max-seq-len", "99999"], "max_seq_len: 99999 is out of range"),
    (["boundary", "npu-block-table", *QWQ[:-2], "--mode", "target-verify", "--draft-tokens", "0"],
     "target-verify needs draft tokens"),
    (["boundary", "allocator"], "component: boundaries are searched for"),
    (["probe", "--cases", "/nonexistent/x.jsonl"], "--cases: cannot read"),
    (["probe", "npu-block-table", "--cases", "-"], "give either a component with flags or --cases FILE, not both"),
    (["--device", "tpu", "probe"], "argument --device: invalid choice: 'tpu'"),
    (["frobnicate"], "argument command: invalid choice: 'frobnicate'"),
    (["sweep", "--rules", "widest"], "rules: 'widest' is not one of context-floor, context, context-plus-draft, req-to-token"),
    (["sweep", "--executor", "dask"], "executor: 'dask' is not one of auto, serial, process, ray"),
    (["sweep", "--out", "result.txt"], "--out: 'result.txt' must end in .parquet or .csv"),
    (["bench", "--configs", "0"], "--configs and --step-by-step"),
]


@pytest.mark.parametrize(("argv", "message"), CLI_CASES, ids=[" ".join(a[:3]) for a, _ in CLI_CASES])
def test_cli_bad_input(argv: list[str], message: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "workbench", *argv], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("workbench: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == [], "a rejected command wrote files"


CASE_LINES = [
    ([1, 2], "case: list is not a JSON object"),
    ({"component": "npu-block-table", "rule": "context", "page_size": 4, "mode": "decode", "seq_lens": [3]},
     "context_len: missing (required)"),
    ({"component": "npu-block-table", "rule": "context", "context_len": True, "page_size": 4, "mode": "decode",
      "seq_lens": [3]}, "context_len: True is not an integer"),
    ({"component": "dsa-page-table", "rule": "context", "context_len": 100, "page_size": 4, "mode": "decode",
      "seq_lens": []}, "seq_lens: 0 entries is out of range"),
    ({"component": "dsa-page-table", "rule": "context", "context_len": 100, "page_size": 4, "mode": "decode",
      "seq_lens": [3], "colour": "red"}, "colour: unknown field"),
    ({"component": "allocator", "gather": "npu-legacy", "page_size": 4, "seq_lens": [5], "last_loc": [12],
      "free_pages": [3]}, "last_loc: 12 is inconsistent with seq_lens 5"),
]


@pytest.mark.parametrize(("line", "message"), CASE_LINES)
def test_cases_line_bad_input_is_invalid(line: object, message: str) -> None:
    record = probe_record(line, "cpu")
    assert record["outcome"] == "invalid"
    assert message in str(record["error"])


GRIDS = [
    (dict(context_lens=()), "context_lens: empty"),
    (dict(context_lens=(1 << 30,)), "context_lens: 1073741824 is out of range"),
    (dict(page_sizes=(0,)), "page_sizes: 0 is out of range"),
    (dict(rules=("widest",)), "rules: 'widest' is not one of context-floor, context, context-plus-draft, req-to-token"),
    (dict(modes=("prefill",)), "modes: 'prefill' is not one of"),
    (dict(overshoot=-1), "overshoot: -1 is out of range"),
    (dict(components=("allocator",)), "components: 'allocator' is not one of"),
    (dict(measure_memory="yes"), "measure_memory: 'yes' is not a boolean"),
]


@pytest.mark.parametrize(("change", "message"), GRIDS)
def test_sweep_grid_bad_input(change: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        SweepGrid(**change)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_notebook_parameter_bad_input() -> None:
    checks = [
        (lambda: check_int("context_len", "32k", 1, 100), "context_len: '32k' is not an integer (allowed: 1 to 100)"),
        (lambda: check_int("overshoot", 500, 0, 64), "overshoot: 500 is out of range (allowed: 0 to 64)"),
        (lambda: check_ints("page_sizes", [], 1, 256), "page_sizes: the list is empty"),
        (lambda: check_choice("device", "tpu", ["cpu", "cuda"]), "device: 'tpu' is not one of cpu, cuda"),
        (lambda: check_bool("measure_memory", "yes"), "measure_memory: 'yes' is not a boolean (allowed: True, False)"),
    ]
    for check, message in checks:
        with pytest.raises(ParameterError) as err:
            check()
        assert message in str(err.value)


PRESET_FILES = [
    ("not json", "not valid JSON"),
    ("[]", "expected a non-empty JSON list"),
    (json.dumps([{"name": "x"}]), "missing (required)"),
    (json.dumps([{"name": "x", "layers": 3}]), "layers: unknown field"),
]


@pytest.mark.parametrize(("text", "message"), PRESET_FILES)
def test_preset_file_bad_input(text: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "presets.json"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        load_presets(path)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_at_least_thirty_distinct_bad_inputs_are_walked() -> None:
    total = len(CLI_CASES) + len(CASE_LINES) + len(GRIDS) + 4 + len(PRESET_FILES)
    assert total >= 30, total
