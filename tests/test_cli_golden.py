"""The command line prints, for 1,200 seeded cases, exactly what the pre-redesign ``main`` printed.

``tests/golden/cases.jsonl`` and ``expected.jsonl`` were written by ``tests/golden/make_cases.py``
against commit 675d6b7 (before the backends became modules). The one change allowed: a batch of
several requests without ``max_bs`` was ``invalid`` ("2 requests exceed the captured max_bs (1)")
and now runs, the captured graph taken to hold the batch (issue 11, item 6).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden"
MAX_BS_REASON = "exceed the captured max_bs (1)"


def _run(command: str, cases: list[dict[str, object]]) -> list[str]:
    text = "".join(json.dumps(c) + "\n" for c in cases)
    done = subprocess.run([sys.executable, "-m", "workbench", command, "--cases", "-"], input=text,
                          capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_cli_outputs_are_unchanged_on_1200_seeded_cases() -> None:
    lines = [json.loads(line) for line in (GOLDEN / "cases.jsonl").read_text().splitlines()]
    expected = [json.loads(line) for line in (GOLDEN / "expected.jsonl").read_text().splitlines()]
    assert len(lines) == len(expected) == 1200
    compared = newly_valid = 0
    for command in ("probe", "boundary"):
        cases = [c["case"] for c in lines if c["command"] == command]
        before = [e["output"] for e in expected if e["command"] == command]
        after = _run(command, cases)
        assert len(after) == len(before)
        for case, old, new in zip(cases, before, after):
            if MAX_BS_REASON in old and "max_bs" not in case:
                assert json.loads(new)["outcome"] != "invalid" or MAX_BS_REASON not in new, (case, new)
                newly_valid += 1
                continue
            assert new == old, case
            compared += 1
    assert compared > 1000 and newly_valid > 50  # the file holds both kinds: the test cannot pass empty


def test_the_multi_request_seed_batch_without_max_bs_gives_its_shape_error() -> None:
    qwq = {"component": "npu-block-table", "rule": "context", "context_len": 32768, "page_size": 128,
           "draft_tokens": 16, "spec_topk": 10, "draft_has_kv": False, "seq_lens": [32753, 100],
           "mode": "target-verify"}
    glm = {"component": "dsa-page-table", "rule": "context-plus-draft", "context_len": 90000, "page_size": 64,
           "draft_tokens": 6, "spec_steps": 5, "seq_lens": [90001, 5], "mode": "target-verify"}
    too_small = dict(qwq, max_bs=1)
    out = [json.loads(line) for line in _run("probe", [qwq, glm, too_small])]
    assert (out[0]["outcome"], out[0]["error"]) == (
        "shape-error", "The size of tensor a (256) must match the size of tensor b (257) at non-singleton dimension 1")
    assert (out[1]["outcome"], out[1]["error"]) == (
        "shape-error", "The size of tensor a (90006) must match the size of tensor b (90007) at non-singleton dimension 1")
    assert out[2] == {**out[2], "outcome": "invalid", "error": "seq_lens: 2 requests exceed the captured max_bs (1)"}
