"""Reachability: the scheduler caps as the engines' source has them.

Sources: docs/engine-facts.md#sglang-scheduler-caps and docs/engine-facts.md#vllm-limits-near-max-model-len.
"""

from __future__ import annotations

import pytest

from workbench.analysis.reach import reach, reach_rule
from workbench.model.geometry import Mode, ServingGeometry

QWQ = ServingGeometry(context_len=32768, page_size=128, draft_tokens=16, spec_topk=10, draft_has_kv=False, width_gen="g3")


def test_sglang_reaches_the_cap_plus_the_overshoot() -> None:
    rule = reach_rule("sglang==0.5.23")
    assert (rule.cap_offset, rule.overshoot, rule.clamps_reads) == (1, 2, False)
    assert rule.sources["committed_cap"] == "sglang/srt/managers/tp_worker.py:568-571"
    where = reach(rule, QWQ, Mode.TARGET_VERIFY)
    assert (where.cap, where.largest_committed) == (32767, 32769)
    assert where.margin(32753) == -16 and where.reaches(32753)  # the Ascend seed, before the fix
    assert where.margin(32881) == 112 and not where.reaches(32881)  # docs/engine-facts.md#sglang-ascend-block-tables, 0.5.23
    assert where.margin(None) is None and not where.reaches(None)


def test_without_speculation_the_cap_is_the_bound() -> None:
    plain = ServingGeometry(context_len=8192, page_size=64)
    assert reach(reach_rule("sglang==0.5.23"), plain, Mode.DECODE).largest_committed == 8191


def test_the_overshoot_never_passes_what_the_request_table_holds() -> None:
    rule = reach_rule("sglang==0.5.23").with_overshoot(1000)
    g1 = QWQ.replace(width_gen="g1")  # W = 32768 + 20, verify holds s <= W - D = 32772
    assert reach(rule, g1, Mode.TARGET_VERIFY).largest_committed == 32772


def test_vllm_caps_at_max_model_len_minus_one_without_overshoot() -> None:
    for engine in ("vllm==0.23.0", "vllm==0.33.0"):
        rule = reach_rule(engine)
        assert (rule.cap_offset, rule.overshoot, rule.clamps_reads) == (1, 0, True)
        g = ServingGeometry(context_len=350000, page_size=64, draft_tokens=1)
        assert reach(rule, g, Mode.TARGET_VERIFY).largest_committed == 349999


@pytest.mark.parametrize("bad", [-1, 1025, True, 2.5])
def test_overshoot_out_of_range(bad: object) -> None:
    with pytest.raises(ValueError, match="--overshoot"):
        reach_rule("sglang==0.5.23").with_overshoot(bad)  # type: ignore[arg-type]
