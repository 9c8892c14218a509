"""Learned facts that cannot be wrong quietly (issue 38, item 5).

Fast: the pieces of the learners on small sources and grids written here, their expected values
worked by hand in each test: the AST reading of a drafter's reset (a statement over lines, a mask
moved through names, a position-keyed reset, a reset inherited through ``super()``); a drafter
fact where the classes differ; several forms agreeing on a grid recorded as ``undetermined``; the
indexer buffer's forms told apart by start-up lengths; the rebuild condition read with the AST;
the preallocation reason written from what was read.

With the releases (marked ``engine_versions``; ``WORKBENCH_ENGINE_VERSIONS=1``, each release fetched
into the workbench's cache): every fact the review of issue 38 found wrong, measured again from the
release's own code and compared with the shipped learned file, and with the release's source lines
read here as text (an independent reading of the same statement).
"""

from __future__ import annotations

import ast
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from workbench.backends.vllm import indexer_block_table as ib
from workbench.engines.learning import rules as lr
from workbench.engines.store import learned
from workbench.engines.vllm import learn as learn_vllm
from workbench.engines.vllm import learn_kv
from workbench.engines.vllm_ascend import drafter_reading as dr
from workbench.engines.vllm_ascend import learn as learn_ascend

# ---- the drafter's reset, read with the AST ---------------------------------------------------------

SPLIT = '''
class MtpProposer(EagleProposer):
    def _propose(self, attn_metadata_i, batch_size):
        attn_metadata_i.seq_lens = attn_metadata_i.seq_lens + 1
        exceeds_mask = attn_metadata_i.seq_lens[:batch_size] > \\
            self.runner.model_config.max_model_len
        attn_metadata_i.seq_lens[:batch_size].masked_fill_(exceeds_mask, 1)
'''
EAGLE = '''
class EagleProposer(VllmEagleProposer):
    def _propose(self, attn_metadata, positions):
        exceeds_max_model_len = positions >= self.vllm_config.model_config.max_model_len
        attn_metadata.seq_lens = attn_metadata.seq_lens + 1
'''


def test_a_reset_split_over_lines_is_read_and_a_class_without_one_is_not_reset() -> None:
    """0.13.0's layout: the comparison's right side on the next line; EAGLE never resets."""
    found = dr.drafters({"pkg/spec_decode/mtp_proposer.py": SPLIT, "pkg/spec_decode/eagle_proposer.py": EAGLE})
    assert found["MtpProposer"]["value"] == "reset"
    assert found["MtpProposer"]["source"] == "pkg/spec_decode/mtp_proposer.py:5-7"  # the mask's line to the call's
    assert found["EagleProposer"]["value"] == "no-reset"
    assert found["EagleProposer"]["resets"] == []
    assert "no masked_fill_" in found["EagleProposer"]["reason"]


def test_a_position_keyed_reset_a_moved_mask_and_a_host_copy_are_not_the_seq_len_reset() -> None:
    source = '''
class Base:
    def step(self, m, positions, batch_size):
        exceeds = positions >= self.max_model_len
        moved = exceeds.to(m.seq_lens.device, non_blocking=False)
        m.seq_lens[:batch_size] += 1
        m.seq_lens[:batch_size].masked_fill_(moved, 1)
        mask = m.seq_lens_cpu[:batch_size] >= self.max_model_len
        m.seq_lens_cpu[:batch_size].masked_fill_(mask, 1)
'''
    fact = dr.drafters({"pkg/spec_decode/base_proposer.py": source})["Base"]
    assert fact["value"] == "no-reset"
    assert [(r["kind"], r["source"]) for r in fact["resets"]] == [
        ("position", "pkg/spec_decode/base_proposer.py:4-7"), ("host-copy", "pkg/spec_decode/base_proposer.py:8-9")]
    assert "keyed on the position" in fact["reason"] and "host copy" in fact["reason"]


def test_a_reset_reached_through_super_is_inherited() -> None:
    """0.28.0rc1's Gemma4 drafter overrides the step update and calls its base's."""
    source = '''
class Base:
    def update(self, m, batch_size):
        m.seq_lens[:batch_size] += 1
        m.seq_lens[:batch_size].masked_fill_(m.seq_lens[:batch_size] > self.max_model_len, 1)

class Wrapper(Other, Base):
    def update(self, m, batch_size):
        return super().update(m, batch_size)

class Replacer(Base):
    def update(self, m, batch_size):
        m.seq_lens[:batch_size] += 1
        return self.max_model_len
'''
    found = dr.drafters({"pkg/spec_decode/x_proposer.py": source})
    assert (found["Base"]["value"], found["Wrapper"]["value"], found["Replacer"]["value"]) == ("reset", "reset", "no-reset")
    assert found["Wrapper"]["source"] == "pkg/spec_decode/x_proposer.py:5"


def test_drafter_classes_that_differ_give_no_value_and_each_class_its_own() -> None:
    classes = dr.drafters({"pkg/spec_decode/mtp_proposer.py": SPLIT, "pkg/spec_decode/eagle_proposer.py": EAGLE})
    fact = learn_ascend.fact_from_classes(classes, "pkg/spec_decode/*proposer*.py")
    assert fact["value"] is None
    assert fact["finding"] == "the drafter classes differ: EagleProposer no-reset, MtpProposer reset"
    assert {name: p["value"] for name, p in fact["proposers"].items()} == {"EagleProposer": "no-reset",
                                                                          "MtpProposer": "reset"}
    alone = learn_ascend.fact_from_classes({"MtpProposer": classes["MtpProposer"]}, "pkg")
    assert alone["value"] == "reset" and alone["source"] == "pkg/spec_decode/mtp_proposer.py:5-7"
    assert "every drafter class (MtpProposer) reset" in alone["reason"]
    assert learn_ascend.fact_from_classes({}, "pkg/spec_decode/*proposer*.py")["how"] == "absent"


# ---- several forms agreeing: undetermined, never one chosen --------------------------------------------


def test_forms_a_grid_does_not_tell_apart_are_recorded_undetermined() -> None:
    points = [({"n": 8}, 8), ({"n": 16}, 16)]  # both candidates give n at these points
    fact = lr.name_rule(points, {"plain": lambda s: s["n"], "rounded-to-8": lambda s: -(-s["n"] // 8) * 8},
                        function="f", keys=("n",))
    assert fact["value"] is None
    assert fact["undetermined"] == ["plain", "rounded-to-8"]
    assert fact["finding"].startswith("undetermined: the grid does not tell plain and rounded-to-8 apart")
    wider = lr.name_rule([*points, ({"n": 9}, 9)], {"plain": lambda s: s["n"],
                                                    "rounded-to-8": lambda s: -(-s["n"] // 8) * 8},
                         function="f", keys=("n",))
    assert wider["value"] == "plain" and "undetermined" not in wider


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def test_start_up_lengths_tell_the_tables_width_from_the_builders_own() -> None:
    """An engine whose buffer is ``cdiv(final length, block size * dcp)`` (0.20.1's indexer.py:310-313),
    its table unaligned and rebuilt only when block sizes change: at equal lengths ``none`` and
    ``table`` agree, at a start-up length 128 blocks above only ``none`` gives the engine's width."""
    grid = [[1000, 16, 1], [350000, 64, 1], [4097, 1, 2]]
    states = learn_vllm.with_startup_lengths(grid)
    assert states[1] == {"max_model_len": 1000, "block_size": 16, "dcp": 1,
                         "table_max_model_len": (_cdiv(1000, 16) + 128) * 16}
    points = [(s, _cdiv(s["max_model_len"], s["block_size"] * s["dcp"])) for s in states]
    candidates = learn_vllm._buffer_candidates("none", "block-sizes-change")
    equal = [(s, v) for s, v in points if s["table_max_model_len"] == s["max_model_len"]]
    assert lr.name_rule(equal, candidates, function="f", keys=("max_model_len",))["undetermined"] == ["none", "table"]
    assert lr.name_rule(points, candidates, function="f", keys=("max_model_len",))["value"] == "none"


def test_a_table_rebuilt_at_the_final_length_is_the_tables_alignment_under_one_name() -> None:
    """0.33.0: the builder is given the table's aligned width of the final length (utils.py:308-316),
    the table rebuilt when widths change; block size 48 aligns to 8 blocks (128 / gcd(128, 48))."""
    states = learn_vllm.with_startup_lengths([[1000, 48, 1], [350000, 64, 2]])
    def aligned(s: dict[str, int]) -> int:
        step = 128 // math.gcd(128, s["block_size"])
        return _cdiv(_cdiv(s["max_model_len"], s["block_size"] * s["dcp"]), step) * step
    points = [(s, aligned(s)) for s in states]
    candidates = learn_vllm._buffer_candidates("128-div-gcd", "widths-change")
    assert "128-div-gcd" not in candidates
    assert lr.name_rule(points, candidates, function="f", keys=("max_model_len",))["value"] == "table"


# ---- the rebuild condition, read with the AST -------------------------------------------------------------

RUNNER = '''
class GPUModelRunner:
    def may_reinitialize_input_batch(self, kv_cache_config):
        block_sizes = [g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups]
{condition}
            self.input_batch = InputBatch(block_sizes=block_sizes)
'''


@pytest.mark.parametrize(("condition", "value", "lines"), [
    ("        if block_sizes != [self.cache_config.block_size]:", "block-sizes-change", "5"),  # 0.9.1
    ("        if (\n            block_sizes != self._init_block_sizes\n            or kernel_block_sizes != x\n        ):",
     "block-sizes-change", "5-8"),  # 0.23.0
    ("        if (\n            block_sizes != self._init_block_sizes\n            or max_num_blocks != self._init_max_num_blocks\n"
     "        ):", "widths-change", "5-8"),  # 0.33.0
    ("        if self.cache_config.cpu_offload_gb == 0:", None, "5"),
])
def test_the_rebuild_condition_is_read_whatever_its_layout(condition: str, value: str | None, lines: str) -> None:
    fact = learn_vllm.rebuild_condition(RUNNER.format(condition=condition), "vllm/v1/worker/gpu_model_runner.py")
    assert fact["value"] == value
    assert fact["source"] == f"vllm/v1/worker/gpu_model_runner.py:{lines}"
    if value is None:
        assert fact["finding"] == "the rebuild condition is not one the model knows"
    else:
        assert "`block_sizes != " in fact["reason"]


def test_the_preallocation_reason_says_what_was_read() -> None:
    agreed = {"value": "capped"}
    without = learn_kv.preallocate_reason(False, 0, agreed)
    assert without.startswith("KVCacheManager.__init__ takes no num_preallocate_tokens")
    assert "num_preallocate_tokens, default" not in without
    assert learn_kv.preallocate_reason(True, 64, agreed).startswith(
        "KVCacheManager.__init__ takes num_preallocate_tokens, default 64")
    assert "unchecked" in learn_kv.preallocate_reason(True, 64, {"value": None})
    with pytest.raises(ValueError):
        learn_kv.preallocate_reason(None, 0, agreed)


# ---- each reviewed fact, measured again from the release's code -------------------------------------------


def _release(engine: str) -> Any:
    from workbench.engines.store import wheels

    if not os.environ.get("WORKBENCH_ENGINE_VERSIONS"):
        pytest.skip("slow (a release fetched and read or run): WORKBENCH_ENGINE_VERSIONS=1")
    return wheels.fetch(engine)


def _shipped(engine: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(learned.shipped_path(engine).read_text())
    return data


def _lines(install: Any, relative: str, source: str) -> str:
    """The release's own lines ``a-b`` of ``relative`` (from ``file:a-b``), whitespace folded."""
    span = source.rsplit(":", 1)[1]
    first, _, last = span.partition("-")
    text = (install.src / relative).read_text(encoding="utf-8-sig").splitlines()
    return " ".join(" ".join(text[int(first) - 1:int(last or first)]).split())


@pytest.mark.engine_versions
def test_vllm_ascend_0_13_0_mtp_resets_and_eagle_does_not() -> None:
    install = _release("vllm-ascend==0.13.0")
    fact = learn_ascend.drafter_fact(install.package_dir)
    proposers = fact["proposers"]
    assert (proposers["MtpProposer"]["value"], proposers["EagleProposer"]["value"]) == ("reset", "no-reset")
    assert fact["value"] is None
    text = _lines(install, "vllm_ascend/spec_decode/mtp_proposer.py", proposers["MtpProposer"]["source"])
    assert text.startswith("exceeds_mask = attn_metadata_i.seq_lens[:batch_size] > \\ ")  # the statement split
    text = " ".join(text.replace("\\", " ").split())
    assert "seq_lens[:batch_size] > self.runner.model_config.max_model_len" in text and "masked_fill_(exceeds_mask, 1)" in text
    shipped = _shipped("vllm-ascend==0.13.0")["sections"]["buffers"]["backends"][learn_ascend.COMPONENT]["drafter"]
    assert shipped == fact


@pytest.mark.engine_versions
@pytest.mark.parametrize("engine", ["vllm-ascend==0.18.0", "vllm-ascend==0.20.2rc1"])
def test_vllm_ascend_position_keyed_resets_are_named_in_the_reason(engine: str) -> None:
    install = _release(engine)
    fact = learn_ascend.drafter_fact(install.package_dir)
    assert fact["value"] == "no-reset"
    assert "no seq_len is reset" not in fact["reason"]
    for proposer in fact["proposers"].values():
        positions = [r for r in proposer["resets"] if r["kind"] == "position"]
        assert positions, proposer
        relative, _, _ = positions[0]["source"].rpartition(":")
        text = _lines(install, relative, positions[0]["source"])
        assert "positions >= self.max_model_len" in text and "seq_lens[:batch_size].masked_fill_(" in text
        assert positions[0]["source"] in proposer["reason"]
    assert _shipped(engine)["sections"]["buffers"]["backends"][learn_ascend.COMPONENT]["drafter"] == fact


@pytest.mark.engine_versions
def test_vllm_0_9_1_rebuilds_its_table_when_block_sizes_change() -> None:
    install = _release("vllm==0.9.1")
    fact = learn_vllm.rebuilt_when(install)
    assert fact["value"] == "block-sizes-change"
    assert "if block_sizes != [self.cache_config.block_size]:" in _lines(install, "vllm/v1/worker/gpu_model_runner.py",
                                                                         fact["source"])
    shipped = _shipped("vllm==0.9.1")["sections"]["buffers"]["backends"][ib.NAME]["table_rebuilt_when"]
    assert shipped == fact


def _takes_preallocation(install: Any) -> bool:
    """Whether the release's ``KVCacheManager.__init__`` has a ``num_preallocate_tokens`` parameter, read here."""
    tree = ast.parse((install.src / "vllm/v1/core/kv_cache_manager.py").read_text())
    manager = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KVCacheManager")
    init = next(n for n in manager.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return any(a.arg == "num_preallocate_tokens" for a in (*init.args.args, *init.args.kwonlyargs))


@pytest.mark.engine_versions
@pytest.mark.parametrize("engine", ["vllm==0.9.1", "vllm==0.20.1"])
def test_vllm_preallocation_reason_matches_the_managers_parameters(engine: str) -> None:
    install = _release(engine)
    from workbench.engines.vllm import session as vllm_session

    session, located = vllm_session.open_session(install)
    session.close()
    assert located["kv_manager"]["preallocate_parameter"] is _takes_preallocation(install) is False
    fact = _shipped(engine)["sections"]["kv"]["backends"]["vllm-v1-block-table"]["preallocate_tokens"]
    assert fact["value"] == 0 and fact["reason"].startswith("KVCacheManager.__init__ takes no num_preallocate_tokens")


@pytest.mark.engine_versions
def test_vllm_0_20_1_indexer_buffer_follows_the_final_length_not_the_table() -> None:
    """At 300000 tokens after a start-up at 350000, block size 64: the table keeps 5469 blocks
    (rebuilt only when block sizes change), the engine's buffer is cdiv(300000, 64) = 4688."""
    install = _release("vllm==0.20.1")
    from workbench.engines.vllm import session as vllm_session

    session, located = vllm_session.open_session(install)
    try:
        assert session.ask({"name": "indexer_width", "points": [[300000, 64, 1]]})["values"] == [4688]
        rebuilt = learn_vllm.rebuilt_when(install)
        table = {"value": "none"}
        fact = learn_vllm.learn_indexer(session, located, table, rebuilt, lambda line: None)["buffer_alignment"]
    finally:
        session.close()
    assert rebuilt["value"] == "block-sizes-change"
    assert fact["value"] == "none"
    shipped = _shipped("vllm==0.20.1")["sections"]["buffers"]["backends"][ib.NAME]
    assert shipped["buffer_alignment"]["value"] == "none" and shipped["table_alignment"]["value"] == "none"
    assert shipped["buffer_alignment"]["samples"] == fact["samples"]


def _undetermined_with_a_value(node: object) -> list[object]:
    """Every fact under ``node`` that lists undetermined forms and yet names a value."""
    if isinstance(node, dict):
        found: list[object] = [node] if node.get("undetermined") and node.get("value") is not None else []
        return found + [f for child in node.values() for f in _undetermined_with_a_value(child)]
    if isinstance(node, list):
        return [f for child in node for f in _undetermined_with_a_value(child)]
    return []


def test_shipped_files_record_no_chosen_form_where_forms_agree() -> None:
    """No learned file names a value where it lists forms the states could not tell apart."""
    for path in sorted(learned.SHIPPED.glob("*/*.json")):
        text = path.read_text()
        if "undetermined" in text:
            assert _undetermined_with_a_value(json.loads(text)) == [], path


def test_the_ascend_learners_source_reading_reads_its_own_example_file(tmp_path: Path) -> None:
    """``drafter_fact`` on a package folder: a byte-order mark (vllm-ascend 0.13.0 has files with
    one) does not stop the parse."""
    folder = tmp_path / "vllm_ascend" / "spec_decode"
    folder.mkdir(parents=True)
    (folder / "mtp_proposer.py").write_text("\ufeff" + SPLIT, encoding="utf-8")
    fact = learn_ascend.drafter_fact(tmp_path / "vllm_ascend")
    assert fact["value"] == "reset" and fact["source"] == "vllm_ascend/spec_decode/mtp_proposer.py:5-7"


@pytest.mark.engine_versions
@pytest.mark.parametrize(("engine", "clamped"), [("sglang==0.5.18", False), ("sglang==0.5.19", True)])
def test_sglang_npu_gather_is_clamped_from_0_5_19(engine: str, clamped: bool) -> None:
    """docs/engine-facts.md said the clamp starts in 0.5.20: the release's own ``alloc_decode`` run
    on the seed under both candidates says 0.5.19, and its source has the clamp statement there."""
    from workbench.engines.sandbox.locate import Wheel
    from workbench.engines.sglang import learn as learn_sglang
    from workbench.engines.sglang import learn_buffers as lb

    install = _release(engine)
    modules = lb.locate_modules(Wheel(install.src, "sglang"))
    with learn_sglang._session(install, modules, lambda line: None) as (session, _):
        fact = learn_sglang._learn_npu_gather(session, modules, lambda line: None)
    assert fact["value"] == ("npu-clamped" if clamped else "npu-legacy")
    source = (install.src / "sglang/srt/hardware_backend/npu/allocator_npu.py").read_text()
    assert ("start_new_pages.clamp(max=num_new_pages - 1)" in source) is clamped
    shipped = _shipped(engine)["sections"]["buffers"]["backends"]["allocator"]["gather"]
    assert shipped["value"] == fact["value"]
