"""A value set outside the command (a shell variable, a placeholder) stops the check only where it
reaches a setting that changes a modelled buffer, the model, or the engine's refusal."""

from __future__ import annotations

from pathlib import Path

import pytest
from check_json import check_json, launch_command

from workbench.engines.commands.adapters import FlagUse
from workbench.preflight import outside, unset_variables
from workbench.preflight.command import parse_command
from workbench.preflight.deployment import Setting

DATA = Path(__file__).parent / "data"


def test_each_value_is_found_with_the_option_that_takes_it() -> None:
    parsed = parse_command(launch_command("vllm-ascend-docs-pd-multinode-dsr1-w8a8-layerwise-prefiller1-mtp1"))
    uses = {u.text: u.options for u in outside.option_words(parsed.argv, unset_variables(parsed))}
    assert uses["$5"] == ("--data-parallel-address",) and uses["$7"] == ("--tensor-parallel-size",)


def test_a_value_reaching_a_modelled_setting_blocks_and_one_reaching_none_passes() -> None:
    uses = [outside.Use("$HEAD_ADDR", ("--master-addr",)), outside.Use("$BS", ("--max-num-seqs",)),
            outside.Use("$X", ("--nowhere",))]
    flags = [FlagUse("--master-addr", "--master-addr", "master_addr", "$HEAD_ADDR"),
             FlagUse("--max-num-seqs", "--max-num-seqs", "max_num_seqs", "$BS")]
    settings = {"master_addr": Setting("master_addr", "$HEAD_ADDR", "given", "--master-addr", modelled=False),
                "max_num_seqs": Setting("max_num_seqs", "$BS", "given", "--max-num-seqs", modelled=True)}
    blocking, passing = outside.reaching(uses, flags, settings)
    assert passing == ["$HEAD_ADDR (in --master-addr)"]
    assert [b.split(" ")[0] for b in blocking] == ["$BS", "$X"]


def test_a_refusal_about_the_value_is_the_values() -> None:
    uses = [outside.Use("${SERVER_PORT}", ("--port",)), outside.Use("<m>", ("--speculative-config",))]
    assert outside.in_refusal(uses, "argument --port: invalid int value: '${SERVER_PORT}'") == uses[:1]
    assert outside.in_refusal(uses, "argument --speculative-config/-sc: Value {\"model\": ... cannot be converted") == uses[1:]
    assert outside.in_refusal(uses, "unrecognized arguments: --contxt-length") == []


@pytest.mark.engine
def test_an_address_set_outside_the_command_does_not_stop_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The vLLM recipe's two-node command (record vllm-recipe-qwen38-24t-fp8-tp16-two-nodes-head-addr)
    sets --master-addr $HEAD_ADDR: the check goes on to the model, which the data set's cache lacks;
    with a model the cache holds, the same flags are decided and the verdict names $HEAD_ADDR."""
    monkeypatch.setenv("HF_HUB_CACHE", str(DATA / "hf_cache" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    command = launch_command("vllm-recipe-qwen38-24t-fp8-tp16-two-nodes-head-addr")
    status, data = check_json(["--engine", "vllm==0.34.0", "--cmd", command])
    assert status == 3 and "Qwen/Qwen3.8-2.4T-A95B-FP8" in str(data["verdict"]) and "$HEAD_ADDR" not in str(data["verdict"])
    assert any("$HEAD_ADDR" in n for n in data["notes"])  # type: ignore[attr-defined]
    cached = command.replace("Qwen/Qwen3.8-2.4T-A95B-FP8", "Qwen/Qwen3-235B-A22B").replace("262144", "32768")
    status, data = check_json(["--engine", "vllm==0.34.0", "--cmd", cached])
    assert status in (0, 1) and "$HEAD_ADDR (in --master-addr)" in str(data["verdict"]), data["verdict"]


@pytest.mark.engine
@pytest.mark.parametrize("name, value", [
    ("sglang-docs-dsv4-pro-nvfp4-kv-sm90-if-exports-tee", "${SERVER_PORT}"),  # argparse: not an int as written
    ("vllm-recipe-kimi-k25-eagle3-placeholder-json", "<eagle3_model_name>"),  # not JSON as written
])
def test_a_value_the_engine_cannot_read_as_written_stops_the_check(name: str, value: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(DATA / "hf_cache" / "hub"))
    status, data = check_json(["--cmd", launch_command(name)])
    assert status == 3 and value in str(data["verdict"]) and "set outside it" in str(data["verdict"])
