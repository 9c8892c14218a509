from __future__ import annotations

import pytest
from reference import request_table_width

from workbench.model.geometry import Mode, ServingGeometry


@pytest.mark.parametrize(
    ("geometry", "extras"),
    [
        # The worked values of docs/semantics.md#width-generations.
        (dict(draft_tokens=6, spec_steps=5, spec_topk=1, page_size=64), (10, 10, 75)),
        (dict(draft_tokens=16, spec_topk=10, page_size=128, draft_has_kv=False), (20, 32, 159)),
        (dict(draft_tokens=8, spec_steps=5, spec_topk=4, page_size=64), (12, 1024, 1087)),
    ],
)
def test_width_generations_match_the_spec_worked_values(geometry: dict, extras: tuple[int, int, int]) -> None:
    for gen, extra in zip(("g1", "g2", "g3"), extras):
        g = ServingGeometry(context_len=1000, width_gen=gen, **geometry)
        assert g.req_to_token_extra == extra
        assert g.request_table_width == 1000 + extra


def test_request_table_width_agrees_with_the_reference_on_a_grid() -> None:
    for ps in (1, 2, 64, 128, 256):
        for d in (0, 1, 4, 6, 16):
            for steps, topk in ((1, 1), (3, 1), (5, 4), (2, 10)):
                for kv in (True, False):
                    for gen in ("g1", "g2", "g3"):
                        g = ServingGeometry(context_len=4096, page_size=ps, draft_tokens=d, spec_steps=steps,
                                            spec_topk=topk, draft_has_kv=kv, width_gen=gen)
                        assert g.request_table_width == request_table_width(4096, ps, d, steps, topk, kv, gen)


def test_max_committed_len_bounds() -> None:
    g = ServingGeometry(context_len=32768, page_size=128, draft_tokens=16)
    assert g.request_table_width == 32788
    assert g.max_committed_len(Mode.TARGET_VERIFY) == 32772
    assert g.max_committed_len(Mode.DECODE) == 32787
    assert g.max_committed_len(Mode.DRAFT_DECODE, step_id=2) == 32785
    off = ServingGeometry(context_len=32768, page_size=128)
    assert off.max_committed_len(Mode.DECODE) == 32767


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("context_len", 0, "context_len: 0 is out of range (allowed: 1 to 16777216)"),
        ("page_size", 0, "page_size: 0 is out of range (allowed: 1 to 4096)"),
        ("draft_tokens", -1, "draft_tokens: -1 is out of range (allowed: 0 to 1024)"),
        ("width_gen", "g4", "width_gen: 'g4' is not one of g0, g1, g2n, g2, g3"),
        ("spec_topk", 1.5, "spec_topk: 1.5 is not an integer (allowed: 1 to 64)"),
        ("draft_has_kv", "yes", "draft_has_kv: 'yes' is not a boolean (allowed: true, false)"),
    ],
)
def test_invalid_geometry_names_field_value_and_range(field: str, value: object, message: str) -> None:
    kwargs: dict = {"context_len": 100, field: value}
    with pytest.raises(ValueError) as err:
        ServingGeometry(**kwargs)
    assert str(err.value) == message


def test_modes_that_need_speculation_are_rejected_without_it() -> None:
    g = ServingGeometry(context_len=100)
    assert "needs draft tokens" in (g.invalid_mode_reason(Mode.TARGET_VERIFY) or "")
    assert g.invalid_mode_reason(Mode.DECODE) is None
    spec = ServingGeometry(context_len=100, draft_tokens=4, spec_steps=3)
    assert "step_id: 3 is out of range" in (spec.invalid_mode_reason(Mode.DRAFT_DECODE, step_id=3) or "")
