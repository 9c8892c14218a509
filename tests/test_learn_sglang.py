"""The SGLang learner's parts on small worked cases (fast), and a shipped file learned again from
the release's own code, byte for byte (slow: marked, run by ``make releases``)."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from workbench.engines.learning import rules as lr
from workbench.engines.sandbox import engine_objects as eo
from workbench.engines.sandbox.locate import Wheel
from workbench.engines.sandbox.tolerant_import import import_tolerant
from workbench.engines.store import learned, wheels


def _wheel(tmp_path: Path, files: dict[str, str]) -> Wheel:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return Wheel(tmp_path, "pkg")


def test_a_class_is_found_by_name_wherever_the_release_keeps_it(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {
        "layers/nsa_backend.py": """
            class NativeSparseAttnBackendMixin:
                pass
            class NativeSparseAttnBackend:
                def __init__(self):
                    pass

                def init_cuda_graph_state(self, max_bs, max_num_tokens):
                    pass
        """,
        "runner.py": """
            class ModelRunner:
                def init_memory_pool(self):
                    extra = 4
                    self.pool = ReqToTokenPool(size=1, max_context_len=self.ctx + extra)
        """})
    found = wheel.find_class(("DeepseekSparseAttnBackend", "NativeSparseAttnBackend"), method="init_cuda_graph_state")
    assert found is not None
    assert (found.module, found.name, found.where) == ("pkg.layers.nsa_backend", "NativeSparseAttnBackend",
                                                       "pkg/layers/nsa_backend.py:8-9")
    assert wheel.find_class(("DeepseekSparseAttnBackend",)) is None
    keyword = wheel.find_keyword("ReqToTokenPool", "max_context_len")
    assert keyword is not None and (keyword.owner, keyword.name, keyword.line) == ("ModelRunner", "init_memory_pool", 5)


def test_the_rule_that_agrees_on_every_point_is_named() -> None:
    """The module note's worked example: widths 8 and 9 at D 0 and 16 (ctx 1020, ps 128)."""
    rules = {"context": lambda s: -(-s["ctx"] // s["ps"]),
             "context-plus-draft": lambda s: (s["ctx"] + s["ps"] - 1 + s["d"]) // s["ps"]}
    points = [({"ctx": 1020, "ps": 128, "d": 0}, 8), ({"ctx": 1020, "ps": 128, "d": 16}, 9)]
    fact = lr.name_rule(points, rules, function="f", keys=("ctx", "ps", "d"))
    assert (fact["value"], fact["states"], fact["how"]) == ("context-plus-draft", 2, "measured")
    floor = [({"ctx": 1000, "ps": 16, "d": 0}, 62)]  # ctx // ps, which neither rule gives
    finding = lr.name_rule(floor, rules, function="f", keys=("ctx", "ps", "d"))
    assert finding["value"] is None
    assert finding["finding"].startswith("no rule of the model agrees") and "the engine gives 62" in finding["finding"]
    both = lr.name_rule(points[:1], rules, function="f", keys=("ctx",))
    assert both["value"] is None and "does not tell context and context-plus-draft apart" in both["finding"]


class _Backend:
    def __init__(self, runner: object) -> None:
        self.max_context_len = runner  # not readable from the object's own attributes
        self.max_num_pages = (self.max_context_len + self.page_size - 1) // self.page_size

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int) -> None:
        if self.use_swa:
            raise AssertionError("not this branch")
        self.table = torch.zeros((max_bs, self.max_num_pages), dtype=torch.int32, device="cuda")


def test_sizing_runs_on_the_meta_device_taking_what_it_reads_from_init() -> None:
    """``max_num_pages`` comes from the engine's ``__init__`` statement (its line recorded),
    ``use_swa`` is given None and recorded; ``device="cuda"`` makes a meta tensor."""
    obj = eo.make(_Backend, {"max_context_len": 1000, "page_size": 64})
    _, filled = eo.call_filling(obj, "init_cuda_graph_state", 16, 16)
    assert eo.tensors_of(obj) == {"table": (16, 16)} and obj.table.device.type == "meta"
    assert list(filled.from_init) == ["max_num_pages"] and filled.from_init["max_num_pages"].endswith(
        f"{Path(__file__).name}:{_Backend.__init__.__code__.co_firstlineno + 2}")
    assert filled.as_none == ["use_swa"]


def test_a_module_that_fails_at_import_is_loaded_statement_by_statement(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "needs_device.py").write_text(textwrap.dedent("""
        import os
        FLAG = os.environ["NOT_SET_ON_A_CPU"]
        class Backend:
            width = 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    module, skipped = import_tolerant("needs_device")
    try:
        assert module.Backend.width == 3 and not hasattr(module, "FLAG")
        assert skipped == ["needs_device.py:3: KeyError: 'NOT_SET_ON_A_CPU'"]
    finally:
        sys.modules.pop("needs_device", None)


RELEASE = os.environ.get("WORKBENCH_LEARN_RELEASE", "sglang==0.5.23")


@pytest.mark.engine
@pytest.mark.engine_versions
@pytest.mark.skipif(not os.environ.get("WORKBENCH_ENGINE_VERSIONS"), reason="slow (minutes): set WORKBENCH_ENGINE_VERSIONS=1")
def test_a_shipped_release_learned_again_is_byte_identical(tmp_path: Path) -> None:
    """The shipped file with this learner's section removed, learned again from the release's own
    code (the wheel from the cache, or fetched): the same bytes."""
    from workbench.engines.sglang import learn as learn_sglang

    try:
        wheels.fetch(RELEASE)
    except wheels.FetchError as error:
        pytest.skip(str(error))
    shipped = learned.shipped_path(RELEASE)
    copy = learned.shipped_path(RELEASE, tmp_path)
    copy.parent.mkdir(parents=True)
    shutil.copy(shipped, copy)
    learned.drop_section(RELEASE, learn_sglang.SECTION, root=tmp_path)
    path = learn_sglang.learn_release(RELEASE, progress=lambda line: None, root=tmp_path)
    assert path.read_bytes() == shipped.read_bytes()
