"""vLLM's learned releases (``data/engines/vllm/X.json``), checked offline, and the vLLM launch
read by the release's own code.

Offline (fast): every learned file is sound; the rule each width fact names gives the engine's
own answer on the points recorded with it (the samples ``learn_vllm`` kept); the conformance rows
recorded at learning agree on every state, with at least 200 states per function (1,000 for the
newest release); the hand-read entries of ``data/engines.json`` equal what the engine measured;
the backends take each release's learned data.

With the engine (marked ``engine``; one engine process per release, shared by the tests): a vLLM
command read by the release's own parser, its underscores, dotted keys and JSON values giving the
same settings as the full spellings, and a command it refuses answered with its own message.
Expected values come from the model's config (``max_position_embeddings``) and from the command.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from workbench.backends.vllm import indexer_block_table as ib
from workbench.backends.vllm import v0_graph_block_tables as v0
from workbench.engines.store import learned, releases, vllm_releases

SHIPPED = sorted(learned.SHIPPED.joinpath("vllm").glob("*.json"))
DATA = Path(__file__).resolve().parent / "data"


def _file(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _restated(rule: str, state: dict[str, int]) -> int:
    """The alignment rules restated from vLLM's source (block_table.py): an independent computation."""
    blocks = _cdiv(state["max_model_len"], state["block_size"] * state["dcp"])
    size = state["block_size"]
    if rule == "none":
        return blocks
    if rule == "128-div-block-size":
        step = 128 // size if size <= 128 else 1
    else:
        step = 128 // math.gcd(128, size)
    return _cdiv(blocks, step) * step


pytestmark = pytest.mark.skipif(not SHIPPED, reason="no learned vLLM release is shipped (workbench engines learn --all vllm)")


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_each_learned_file_is_sound_and_its_rules_give_the_engines_answers(path: Path) -> None:
    data = _file(path)
    assert learned.validate(data) == []
    backends = data["sections"]["buffers"]["backends"]
    indexer, graphs = backends[ib.NAME], backends[v0.NAME]
    for name in ("table_alignment", "buffer_alignment", "table_rebuilt_when"):
        assert indexer[name]["how"] in ("measured", "read", "absent")
    table = indexer["table_alignment"]
    for sample in table.get("samples", []) if table.get("value") is not None else ():
        assert _restated(table["value"], sample["state"]) == sample["engine"]
    buffer = indexer["buffer_alignment"]
    if buffer.get("value") is None:  # no rule named (a finding, which says why): nothing to restate
        assert buffer["how"] == "absent" or buffer.get("finding") or buffer.get("reason")
    for sample in buffer.get("samples", []) if buffer.get("value") is not None else ():
        rule = table["value"] if buffer["value"] == "table" else buffer["value"]
        assert _restated(rule, sample["state"]) == sample["engine"]
    for sample in graphs["graph_width"].get("samples", []):
        state = sample["state"]
        assert _cdiv(state["max_seq_len_to_capture"], state["block_size"]) == sample["engine"]
    if table["how"] == "measured":  # measured on a grid, the grid's points kept
        assert table["states"] >= 60 and table["samples"]


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_a_release_whose_indexer_widths_were_measured_has_its_tables_rebuild_rule(path: Path) -> None:
    """Both widths measured but no rebuild rule leaves the release without an indexer row at all
    (``ib.versions`` needs the three), unless a finding says why (0.17.x: a condition the model
    does not know). 0.34.0 was shipped without one once, when the learner stopped reading
    ``initialize_kv_cache`` at its signature's closing line."""
    indexer = _file(path)["sections"]["buffers"]["backends"][ib.NAME]
    if indexer["table_alignment"]["value"] is not None and indexer["buffer_alignment"]["value"] is not None:
        rule = indexer["table_rebuilt_when"]
        assert rule["value"] is not None or rule.get("finding"), rule  # a rule, or a finding that says why not


def test_the_second_runners_table_is_found_past_a_signature_over_several_lines(tmp_path: Path) -> None:
    """The model runner file as 0.34.0 lays it out (the signature's ``) -> None:`` at the def's
    indentation), and the same method without the table: only the first is ``kv-cache-init``."""
    from types import SimpleNamespace

    from workbench.engines.vllm import learn as learn_vllm

    runner = tmp_path / "vllm" / "v1" / "worker" / "gpu" / "model_runner.py"
    runner.parent.mkdir(parents=True)
    body = ("class GPUModelRunner:\n"
            "    def initialize_kv_cache(\n        self,\n        kv_cache_config,\n    ) -> None:\n"
            "        groups = kv_cache_config.kv_cache_groups\n{built}"
            "    def next_method(self):\n        self.block_tables = BlockTables(0)\n")
    runner.write_text(body.format(built="        self.block_tables = BlockTables(groups)\n"))
    fact = learn_vllm.rebuilt_when(SimpleNamespace(src=tmp_path))  # type: ignore[arg-type]
    assert (fact["value"], fact["source"]) == ("kv-cache-init", "vllm/v1/worker/gpu/model_runner.py:7")
    runner.write_text(body.format(built=""))
    assert learn_vllm.rebuilt_when(SimpleNamespace(src=tmp_path))["value"] is None  # type: ignore[arg-type]


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_recorded_conformance_agrees_on_every_state(path: Path) -> None:
    data = _file(path)
    engine = data["engine"]
    wanted = 1000 if engine == releases.newest("vllm") else 200
    rows = data["sections"]["conformance"]["functions"]
    ran = [r for r in rows if r["skipped"] is None]
    assert ran, f"{engine}: no conformance row ran"
    for row in ran:
        assert row["agree"] == row["states"] >= wanted, (engine, row["function"], row["first_disagreement"])


def test_the_hand_read_entries_equal_the_measured_ones() -> None:
    """data/engines.json's vLLM entries against the learned files of the same releases (where the
    engine disagrees it wins, and docs/releases.md says what changed: no entry disagrees today)."""
    checked = 0
    for component in (ib.NAME, v0.NAME):
        for engine, entry in vllm_releases.hand_read(component).items():
            facts = vllm_releases.learned_facts(component).get(engine)
            if facts is None:
                continue
            for name, value in entry.items():
                assert facts[name]["value"] == value, (engine, component, name, facts[name])
                checked += 1
    assert checked >= 1


def test_the_backends_take_each_releases_learned_data() -> None:
    for engine, facts in vllm_releases.learned_facts(ib.NAME).items():
        version = ib.versions().get(engine)
        if any(facts[name]["value"] is None for name in ("table_alignment", "buffer_alignment", "table_rebuilt_when")):
            assert version is None  # a width the release's data cannot give: no version for the backend
            continue
        assert version == ib.IndexerVersion(facts["table_alignment"]["value"], facts["buffer_alignment"]["value"],
                                            facts["table_rebuilt_when"]["value"])
    for engine, facts in vllm_releases.learned_facts(v0.NAME).items():
        writes = facts["row_write"]["value"]
        if isinstance(writes, dict):
            assert dict(v0.row_writes()[engine]) == {k: w for k, w in writes.items() if w is not None}


def test_a_dsa_launch_without_speculation_takes_the_native_path() -> None:
    """The DeepSeek-V3.2 recipe (no speculative decoding): one query row per request, so the
    indexer's expanded buffer is not written; the row is ok, not an internal error."""
    engine = next(iter(ib.versions()))
    case = ib.BACKEND.launch_case(engine, 163840, 64, {"lookahead": 0})
    assert case is not None and case.indexer_path == "native"
    assert ib.BACKEND.probe(case).outcome.value == "ok"
    spec = ib.BACKEND.launch_case(engine, 163840, 64, {"lookahead": 1})
    assert spec is not None and (spec.indexer_path, spec.rows) == ("variable", 3)


# ---- the release's own parser and resolution (an engine process per release) ---------------------

CONFIG = next((DATA / "hf_cache" / "hub" / "models--deepseek-ai--DeepSeek-V3.2" / "snapshots").glob("*/config.json"), None)


def _resolve(engine: str, argv: list[str]) -> Any:
    from workbench.engines.commands import launch_service
    from workbench.engines.commands.adapters import LaunchRequest
    from workbench.engines.store import gpus, wheels

    try:
        install = wheels.fetch(engine)
    except wheels.FetchError as error:
        pytest.skip(f"{engine} is neither cached nor fetchable: {error}")
    request = LaunchRequest(engine, "vllm serve", tuple(argv), {}, gpus.gpu("h100"), model_config=str(CONFIG),
                            cwd=str(DATA))
    return launch_service.resolve(request, install, owner=True, progress=None)


@pytest.mark.engine
def test_a_reasoning_parser_with_no_tokenizer_here_leaves_its_token_ids_and_the_check_goes_on() -> None:
    """The test data holds config.json alone. vLLM 0.34.0 ends its config by encoding the reasoning
    parser's think strings with the tokenizer; those ids size no buffer, so the resolution goes on
    and its notes name the release's line that loads the tokenizer (found here in its source)."""
    from workbench.engines.commands.adapters import RESOLVED
    from workbench.engines.store import wheels

    argv = ["deepseek-ai/DeepSeek-V3.2", "--tensor-parallel-size", "8", "--reasoning-parser", "deepseek_v3"]
    with_parser = _resolve("vllm==0.34.0", argv)
    assert with_parser.status == RESOLVED, with_parser.message
    source = (wheels.fetch("vllm==0.34.0").package_dir / "config" / "reasoning.py").read_text().splitlines()
    method = next(i for i, line in enumerate(source) if "def initialize_token_ids" in line)
    loads = next(i for i in range(method, len(source)) if "tokenizer_from_config(" in source[i]) + 1
    assert [n for n in with_parser.notes if "token ids were left uninitialized" in n] == [
        n for n in with_parser.notes if f"(vllm/config/reasoning.py:{loads})" in n] != []
    without = _resolve("vllm==0.34.0", argv[:-2])
    assert without.status == RESOLVED and not [n for n in without.notes if "token ids" in n]


@pytest.mark.engine
def test_underscores_dots_and_json_are_the_parsers_own() -> None:
    assert CONFIG is not None
    base = ["deepseek-ai/DeepSeek-V3.2-Exp", "--max-model-len", "32768", "--speculative-config",
            '{"method": "mtp", "num_speculative_tokens": 2}']
    spelled = ["deepseek-ai/DeepSeek-V3.2-Exp", "--max_model_len", "32768", "--speculative-config.method", "mtp",
               "--speculative_config.num_speculative_tokens", "2"]
    full, other = _resolve("vllm==0.33.0", base), _resolve("vllm==0.33.0", spelled)
    assert (full.status, other.status) == ("resolved", "resolved"), (full.message, other.message)
    names = ("model_config.max_model_len", "speculative_config.method", "speculative_config.num_speculative_tokens",
             "cache_config.block_size", "num_lookahead_tokens")
    assert {n: full.settings[n].value for n in names} == {n: other.settings[n].value for n in names}
    assert full.settings["model_config.max_model_len"].value == 32768
    assert full.settings["speculative_config.num_speculative_tokens"].value == 2
    assert [f.spelled for f in other.flags][1:] == ["--max_model_len", "--speculative-config.method",
                                                    "--speculative_config.num_speculative_tokens"]


@pytest.mark.engine
def test_a_command_the_release_refuses_gets_its_own_message() -> None:
    """350000 tokens on a model whose config derives 163840 (max_position_embeddings): vLLM's own check."""
    assert CONFIG is not None
    derived = json.loads(CONFIG.read_text())["max_position_embeddings"]
    answer = _resolve("vllm==0.33.0", ["deepseek-ai/DeepSeek-V3.2-Exp", "--max_model_len", "350000"])
    assert answer.status == "rejected"
    assert answer.message.startswith(f"User-specified max_model_len (350000) is greater than the derived max_model_len "
                                     f"(max_position_embeddings={derived}")
    refused = _resolve("vllm==0.33.0", ["deepseek-ai/DeepSeek-V3.2-Exp", "--no-such-flag", "1"])
    assert (refused.status, refused.rejected_by) == ("rejected", "parser")
    assert refused.message == "unrecognized arguments: --no-such-flag 1"


ASCEND = sorted(learned.SHIPPED.joinpath("vllm-ascend").glob("*.json"))


@pytest.mark.parametrize("path", ASCEND, ids=[p.stem for p in ASCEND])
def test_each_vllm_ascend_release_names_its_drafter_with_the_lines_read(path: Path) -> None:
    """The drafter fact is read (the drafter runs on an NPU only), with the file it was read in;
    a ``reset`` (the release's, or one drafter class's where they differ) names the lines from its
    mask to its call, and the last of them in the cached release is the reset itself."""
    from workbench.backends.vllm import ascend_block_table as ascend
    from workbench.engines.store import wheels

    data = _file(path)
    assert learned.validate(data) == []
    fact = data["sections"]["buffers"]["backends"][ascend.NAME]["drafter"]
    assert fact["how"] in ("read", "absent") and fact["value"] in (*ascend.DRAFTERS, None)
    if fact["value"] is not None:
        assert ascend.drafters()[data["engine"]] == fact["value"]
    installed = wheels.cached(data["engine"])
    resets = [f for f in (fact, *fact.get("proposers", {}).values()) if f.get("value") == "reset"]
    for found in resets:
        if installed is None:
            break
        file, lines = found["source"].split(", ")[0].rsplit(":", 1)
        text = (installed.src / file).read_text(encoding="utf-8-sig").splitlines()[int(lines.split("-")[-1]) - 1]
        assert ".masked_fill_(" in text and text.rstrip().endswith(", 1)")


def test_the_atlas_has_a_row_per_learned_release_where_the_data_say() -> None:
    """5563's deployment under every V0 release (flash-attn): reachable exactly where the release's
    builder assigns the whole list; 46074's under every indexer release: reachable exactly where its
    table and buffer widths differ there (the measured rules, restated)."""
    from workbench.atlas.rows import case_backend_rows

    rows = case_backend_rows()
    v0_rows = rows[(rows.backend == v0.NAME) & (rows.rule == "vllm-5563")].drop_duplicates("engine").set_index("engine")
    for engine, writes in v0.row_writes().items():
        if "flash-attn" in writes:
            expected = "reachable" if writes["flash-attn"] == "assign" else "safe"
            assert v0_rows.loc[engine].status == expected, engine
    indexer_rows = rows[(rows.backend == ib.NAME) & (rows.rule == "vllm-46074") & (rows.reachable_len == 350000)]
    by_engine = indexer_rows.drop_duplicates("engine").set_index("engine")
    state = {"max_model_len": 350000, "block_size": 64, "dcp": 1}
    for engine, version in ib.versions().items():
        table = _restated(version.table_alignment, state)
        buffer = table if version.buffer_alignment == "table" else _restated(version.buffer_alignment, state)
        assert by_engine.loc[engine].status == ("reachable" if table != buffer else "safe"), engine


@pytest.mark.engine_versions
def test_learning_a_shipped_release_again_gives_the_same_file(tmp_path: Path) -> None:
    """``workbench engines learn vllm==0.6.0`` into an empty folder: byte for byte the shipped file
    (where the release is cached; ``make vllm-releases`` runs it)."""
    import os

    from workbench.engines.store import wheels
    from workbench.engines.vllm import learn as learn_vllm

    if not os.environ.get("WORKBENCH_ENGINE_VERSIONS"):
        pytest.skip("slow (a release learned again): WORKBENCH_ENGINE_VERSIONS=1, or make vllm-releases")
    engine = "vllm==0.6.0"
    shipped = learned.shipped_path(engine)
    if not shipped.exists() or wheels.cached(engine) is None:
        pytest.skip(f"{engine} is not shipped or not cached (workbench engines learn {engine})")
    made = learn_vllm.learn_release(engine, progress=lambda line: None, root=tmp_path)
    assert made.read_bytes() == shipped.read_bytes()
