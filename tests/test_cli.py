"""``workbench`` round trips: the seed cases through --cases, single cases, and bad input."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from workbench.analysis.seeds import SEEDS, boundary_case
from workbench.cli import main


def _run(argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "workbench", *argv], input=stdin, capture_output=True, text=True,
                          timeout=120)
    return done.returncode, done.stdout, done.stderr


def test_probe_cases_reproduces_every_seed_in_order() -> None:
    lines = []
    for seed in SEEDS:
        lines += [json.dumps(seed.before), json.dumps(seed.after)]
    code, out, err = _run(["probe", "--cases", "-"], "\n".join(lines) + "\n")
    assert code == 0, err
    results = [json.loads(line) for line in out.splitlines()]
    assert len(results) == 6
    qwq_before, qwq_after, glm_before, glm_after, alloc_before, alloc_after = results
    assert qwq_before["outcome"] == "shape-error"
    assert qwq_before["error"] == "The size of tensor a (256) must match the size of tensor b (257) at non-singleton dimension 1"
    assert (qwq_before["buffer_width"], qwq_before["request_table_width"]) == (256, 32788)
    assert (qwq_after["outcome"], qwq_after["buffer_width"]) == ("ok", 257)
    assert glm_before["error"] == "The size of tensor a (90006) must match the size of tensor b (90007) at non-singleton dimension 1"
    assert (glm_after["outcome"], glm_after["buffer_width"]) == ("ok", 90010)
    assert alloc_before == {"outcome": "index-error", "error": "index 1 is out of bounds for dimension 0 with size 1",
                            "out_cache_loc": None, "free_pages_after": None, "device": "cpu", "path": "eager"}
    assert (alloc_after["out_cache_loc"], alloc_after["free_pages_after"]) == ([44, 21, 30], [])


def test_boundary_cases_reports_the_seed_boundaries(tmp_path) -> None:
    qwq, glm = SEEDS[0], SEEDS[1]
    cases = [boundary_case(qwq.before), boundary_case(qwq.after) | {"rule": "req-to-token"},
             boundary_case(glm.before), boundary_case(glm.after)]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    out = io.StringIO()
    assert main(["boundary", "--cases", str(path)], out) == 0
    results = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["first_failing_seq_len"] for r in results] == [32753, None, 90001, None]
    assert [r["max_seq_len"] for r in results] == [32772, 32772, 90004, 90004]
    assert results[0]["outcome"] == "shape-error" and results[0]["confirmed"] is True
    assert results[1]["outcome"] == "ok" and results[1]["error"] is None


def test_bad_lines_are_invalid_and_the_rest_still_run() -> None:
    good = json.dumps(SEEDS[2].after)
    stdin = "\n".join([good, "{not json", json.dumps({"component": "gpu"}), json.dumps({**SEEDS[2].after, "page_size": 0}),
                       good]) + "\n"
    code, out, _ = _run(["probe", "--cases", "-"], stdin)
    assert code == 0
    results = [json.loads(line) for line in out.splitlines()]
    assert [r["outcome"] for r in results] == ["ok", "invalid", "invalid", "invalid", "ok"]
    assert results[1]["error"].startswith("line 2: not JSON")
    # The allowed list is the registry's: the two seed tables first, every later backend after them,
    # then the backends that bring their own case (vLLM's buffers).
    assert results[2]["error"] == ("component: 'gpu' is not one of npu-block-table, dsa-page-table, "
                                   "sglang-fa3-page-table, sglang-xpu-page-table, sglang-trtllm-mha-page-table, "
                                   "sglang-flashmla-page-table, sglang-trtllm-mla-page-table, sglang-aiter-page-table, "
                                   "allocator, vllm-indexer-block-table, vllm-v0-graph-block-tables, vllm-v1-block-table, "
                                   "vllm-v1-waiting-pad, vllm-ascend-block-table, vllm-gdn-state-indices")
    assert results[3]["error"] == "page_size: 0 is out of range (allowed: 1 or more)"


def test_single_case_from_flags_readable_and_json() -> None:
    argv = ["probe", "npu-block-table", "--rule", "context", "--context-len", "32768", "--page-size", "128",
            "--draft-tokens", "16", "--seq-lens", "32753", "--mode", "target-verify"]
    out = io.StringIO()
    assert main(argv, out) == 0
    assert out.getvalue().startswith("shape-error: buffer_width=256 request_table_width=32788")
    out = io.StringIO()
    assert main([*argv, "--json"], out) == 0
    assert json.loads(out.getvalue())["buffer_width"] == 256
    out = io.StringIO()
    argv = ["boundary", "dsa-page-table", "--rule", "context-plus-draft", "--context-len", "90000", "--page-size", "64",
            "--draft-tokens", "6", "--spec-steps", "5", "--mode", "target-verify", "--json"]
    assert main(argv, out) == 0
    assert json.loads(out.getvalue())["first_failing_seq_len"] == 90001


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["probe", "gpu"], "argument component: invalid choice: 'gpu'"),
        (["probe", "allocator", "--gather", "npu-legacy", "--page-size", "4", "--last-loc", "11"],
         "seq_lens: missing (required, a list of integers)"),
        (["probe", "npu-block-table", "--rule", "widest", "--context-len", "10", "--page-size", "1", "--mode", "decode",
          "--seq-lens", "3"], "rule: 'widest' is not one of context-floor, context, context-plus-draft, req-to-token"),
        (["probe", "npu-block-table", "--rule", "context", "--context-len", "ten"], "argument --context-len: invalid int value"),
        (["probe", "--cases", "/nonexistent/cases.jsonl"], "--cases: cannot read '/nonexistent/cases.jsonl'"),
        (["boundary", "npu-block-table", "--rule", "context", "--context-len", "100", "--page-size", "4",
          "--draft-tokens", "2", "--mode", "target-verify", "--max-seq-len", "500"], "max_seq_len: 500 is out of range"),
        (["boundary", "allocator", "--gather", "npu-legacy"], "component: boundaries are searched for"),
        (["probe"], "give a component"),
        (["--device", "tpu", "probe"], "argument --device: invalid choice: 'tpu'"),
    ],
)
def test_bad_input_is_one_line_exit_2_no_traceback(argv: list[str], message: str) -> None:
    code, out, err = _run(argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("workbench: error: ")
    assert message in err
    assert "Traceback" not in err
