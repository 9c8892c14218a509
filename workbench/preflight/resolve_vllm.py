"""A vLLM launch command, resolved from the workbench's own reading of vLLM (until vLLM's adapter lands).

vLLM commands are not yet read by vLLM's own parser here (``launch_adapters`` has no vLLM adapter
on this branch): the flags come from a table of vLLM's names (``flags.py``), the defaults from
``data/launch_defaults.json`` (each with its file:line), the model from the workbench's presets.

``vllm serve MODEL --max-model-len N --block-size B --speculative-config JSON ...``: the model
length (given, or the model's), the block size (given, or 16), the speculative method and its
token count ``k`` (MTP's default is the model's MTP layer count), the lookahead the scheduler
reserves (k for EAGLE, MTP and draft models, k + 1 for DFlash, 0 for ngram), the batch limits
(by GPU memory), and the decode context-parallel size. The geometry takes ``block_size`` as its
page size and ``k`` as its draft tokens; what is vLLM's own (DCP, lookahead, batched tokens)
rides in ``Deployment.extra`` for the vLLM backends.

What sets tables up (``launch_names``): a DSA model has the sparse indexer's expanded block
table (``"dsa-indexer"``, vLLM's ``v1/attention/backends/mla/indexer.py``). The vLLM backends
declare that name in ``TableBackend.launch_names``; the registry picks them (``vllm_backends``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.analysis.memory import ModelPreset, load_presets
from workbench.analysis.reach import reach_rule
from workbench.engines.launch import LaunchData, LaunchVersion, ModelInfo, load_launch_data
from workbench.engines.launch_adapters import ModelFacts
from workbench.engines.release_choice import Choice
from workbench.model.geometry import Mode
from workbench.preflight.command import LaunchCommand, PreflightError
from workbench.preflight.deployment import Deployment, Setting, check_geometry
from workbench.preflight.flags import TABLES, VLLM_SPECULATIVE_KEYS, ParsedFlags, nearest, parse_flags

if TYPE_CHECKING:
    from workbench.preflight import CheckResult

GIVEN, DEFAULT, MODEL, WORKBENCH = "given", "read", "read", "workbench"
DSA_INDEXER = "dsa-indexer"  # the sparse indexer's expanded block table, DSA models only
_SGLANG_CONTEXT_KEYS = ["max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings"]


@dataclass(frozen=True)
class _Cmd:
    flags: ParsedFlags


class Settings:
    """Collects resolved settings in order."""

    def __init__(self) -> None:
        self.items: dict[str, Setting] = {}
        self.notes: list[str] = []

    def add(self, name: str, value: object, origin: str, source: str) -> object:
        self.items[name] = Setting(name, value, origin, source)
        return value

    def given_or(self, name: str, cmd: _Cmd, dest: str, default: object, source: str, origin: str = DEFAULT) -> object:
        if dest in cmd.flags.values:
            return self.add(name, cmd.flags.values[dest], GIVEN, cmd.flags.spelled[dest])
        return self.add(name, default, origin, source)


# ---- models -------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=2)
def _presets() -> dict[str, ModelPreset]:
    return {p.name: p for p in load_presets()}


def preset_named(name: str | None) -> ModelPreset | None:
    return _presets().get(name) if name else None


def _config_context_len(config: Mapping[str, object], keys: list[str]) -> int | None:
    """The engine's rule: the first context key present, times the rope scaling factor."""
    rope = config.get("rope_scaling")
    factor = 1.0
    if isinstance(rope, dict) and "original_max_position_embeddings" not in rope and rope.get("rope_type") != "llama3":
        factor = float(rope.get("factor", 1))
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return int(factor * value)
    return None


def _config_kv_bytes(config: Mapping[str, object]) -> int | None:
    """KV bytes per token from a config.json (bf16 assumed, as the presets do)."""
    layers = config.get("num_hidden_layers")
    if not isinstance(layers, int):
        return None
    rank, rope = config.get("kv_lora_rank"), config.get("qk_rope_head_dim")
    if isinstance(rank, int) and isinstance(rope, int):
        return layers * (rank + rope) * 2
    heads = config.get("num_key_value_heads", config.get("num_attention_heads"))
    head_dim = config.get("head_dim")
    hidden, attention_heads = config.get("hidden_size"), config.get("num_attention_heads")
    if not isinstance(head_dim, int) and isinstance(hidden, int) and isinstance(attention_heads, int) and attention_heads:
        head_dim = hidden // attention_heads
    if isinstance(heads, int) and isinstance(head_dim, int):
        return 2 * layers * heads * head_dim * 2
    return None


def model_from_config(path: str, model_path: str, data: LaunchData, keys: list[str]) -> tuple[ModelInfo, int | None]:
    """A ``--model-config`` file as a model: architecture, DSA, context length; its KV bytes per token."""
    try:
        config = json.loads(Path(path).read_text())
    except OSError as err:
        raise PreflightError(f"--model-config: cannot read {path!r} ({err.strerror})") from None
    except json.JSONDecodeError as err:
        raise PreflightError(f"--model-config: {path!r} is not JSON ({err.msg}, line {err.lineno})") from None
    if not isinstance(config, dict):
        raise PreflightError(f"--model-config: {path!r} is not a JSON object (a model's config.json)")
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or not architectures or not isinstance(architectures[0], str):
        raise PreflightError(f"--model-config: {path!r} has no \"architectures\" list (a model's config.json has one)")
    known = data.model(model_path)
    model = ModelInfo(
        model_paths=(model_path,), preset=known.preset if known else None, architecture=architectures[0],
        attention="mla" if "kv_lora_rank" in config else "mha", dsa=config.get("index_topk") is not None,
        index_kpool=int(config.get("index_kpool", 1)),
        num_nextn_predict_layers=int(config.get("num_nextn_predict_layers", 0) or 0),
        context_len=_config_context_len(config, keys), source=f"--model-config {path}",
    )
    return model, _config_kv_bytes(config)


def resolve_model(model_path: str, model_config: str | None, data: LaunchData, keys: list[str],
                  flag: str) -> tuple[ModelInfo | None, ModelPreset | None, int | None]:
    """The model, its preset and KV bytes per token; None for a model neither known nor configured."""
    if model_config is not None:
        configured, kv = model_from_config(model_config, model_path, data, keys)
        preset = preset_named(configured.preset)
        return configured, preset, kv if kv is not None else (preset.kv_bytes_per_token if preset else None)
    known = data.model(model_path)
    if known is None:
        return None, None, None
    preset = preset_named(known.preset)
    if known.preset and preset is None:
        raise PreflightError(f"{flag}: {model_path!r} names preset {known.preset!r}, which data/presets.json lacks")
    return known, preset, preset.kv_bytes_per_token if preset else None


def unknown_model(model_path: str, flag: str, data: LaunchData, needs: str) -> PreflightError:
    return PreflightError(f"{flag}: {model_path!r} is not a known model (known: {', '.join(data.known_models())}); "
                          f"give --model-config CONFIG.json{needs}")


def context_source(model: ModelInfo, preset: ModelPreset | None) -> str:
    """Where a context length the command does not give comes from: a config.json, or the preset."""
    if model.context_len is not None:
        return model.source
    return f"preset {preset.name} (data/presets.json)" if preset else "no preset"



def _gpu_class(gpu: Mapping[str, object], name: str) -> str:
    """vLLM's batch defaults by device memory: 160 GiB or more, 70 GiB or more and not an A100."""
    memory = float(str(gpu["memory_gib"]))
    if memory >= 160:
        return "huge_gpu"
    if memory >= 70 and name != "a100":
        return "large_gpu"
    return "other"


def _by_gpu(version: LaunchVersion, name: str, gpu_class: str) -> int:
    table = version.default(name).value
    assert isinstance(table, dict)
    value = table.get(gpu_class, table.get("large_gpu" if gpu_class == "huge_gpu" else "other"))
    return int(str(value))


def _speculative(config: object, version: LaunchVersion, mtp_layers: int, s: Settings) -> tuple[str | None, int, int]:
    """(method, k, lookahead) of a ``--speculative-config`` object."""
    if config is None:
        return None, 0, 0
    flag = "--speculative-config"
    if not isinstance(config, dict):
        raise PreflightError(f"{flag}: {type(config).__name__} is not a JSON object (write '{{\"method\": \"mtp\", ...}}')")
    for key in config:
        if key not in VLLM_SPECULATIVE_KEYS:
            raise PreflightError(f"{flag}: {key!r} is not a key of vLLM's SpeculativeConfig "
                                 f"(nearest: {nearest(key, VLLM_SPECULATIVE_KEYS)})")
    methods = version.default("speculative_methods").value
    assert isinstance(methods, list)
    method = config.get("method")
    if method not in methods:
        raise PreflightError(f"{flag}: method {method!r} is not one of {', '.join(map(str, methods))}")
    k = config.get("num_speculative_tokens")
    if k is None and (method == "mtp" or str(method).endswith("_mtp")) and mtp_layers > 0:
        k = s.add("num_speculative_tokens", mtp_layers, MODEL, version.default("mtp_num_speculative_tokens").source)
    elif isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 1024:
        raise PreflightError(f"{flag}: num_speculative_tokens {k!r} is out of range (allowed: an integer, 1 to 1024)")
    else:
        s.add("num_speculative_tokens", k, GIVEN, flag)
    s.add("speculative_method", method, GIVEN, flag)
    rules = version.default("lookahead").value
    assert isinstance(rules, dict)
    # eagle, eagle3 and every MTP model type are EAGLE-style drafters (use_eagle, config/speculative.py)
    kind = str(method) if method in rules else "eagle" if method in ("eagle", "eagle3") or "mtp" in str(method) else "other"
    k_int = int(str(k))
    lookahead = {"k": k_int, "k + 1": k_int + 1}.get(str(rules.get(kind, 0)), 0)
    s.add("lookahead", lookahead, DEFAULT, f"{rules.get(kind, 0)} for {method}: {version.default('lookahead').source}")
    return str(method), k_int, lookahead


def resolve_vllm(cmd: _Cmd, version: LaunchVersion, *, model_config: str | None, gpu: str,
                 overshoot: int | None, command: LaunchCommand, choice: Choice) -> Deployment:
    data = load_launch_data()
    s = Settings()
    values, spelled = cmd.flags.values, cmd.flags.spelled
    positionals = cmd.flags.positionals
    model_path = values.get("model") or (positionals[0] if positionals else None)
    if len(positionals) > 1:
        raise PreflightError(f"command: unexpected argument {positionals[1]!r} (vllm serve takes one MODEL)")
    if not isinstance(model_path, str):
        raise PreflightError("MODEL: missing (write vllm serve MODEL, or --model MODEL)")
    model, preset, kv = resolve_model(model_path, model_config, data, _SGLANG_CONTEXT_KEYS, "MODEL")
    if model is None:
        raise unknown_model(model_path, "MODEL", data, " (whether the model has DSA's indexer decides its tables)")
    s.add("model", model_path, GIVEN, spelled.get("model", "vllm serve MODEL"))
    context = model.context_len or (preset.context_len if preset else None)
    if "max_model_len" not in values and context is None:
        raise PreflightError(f"--max-model-len: missing ({model_path!r} has no preset context length)")
    max_model_len = int(str(s.given_or("max_model_len", cmd, "max_model_len", context, context_source(model, preset), MODEL)))
    block = version.default("block_size")
    block_size = int(str(s.given_or("block_size", cmd, "block_size", block.value, block.source)))
    method, k, lookahead = _speculative(values.get("speculative_config"), version, model.num_nextn_predict_layers, s)
    gpu_class = _gpu_class({"memory_gib": _GPU_MEMORY[gpu]}, gpu)
    max_num_seqs = int(str(s.given_or("max_num_seqs", cmd, "max_num_seqs", _by_gpu(version, "max_num_seqs", gpu_class),
                                      f"{gpu_class} ({gpu}): {version.default('max_num_seqs').source}")))
    batched = int(str(s.given_or("max_num_batched_tokens", cmd, "max_num_batched_tokens",
                                 _by_gpu(version, "max_num_batched_tokens", gpu_class),
                                 f"{gpu_class} ({gpu}): {version.default('max_num_batched_tokens').source}")))
    dcp_default = version.default("decode_context_parallel_size")
    dcp = int(str(s.given_or("decode_context_parallel_size", cmd, "decode_context_parallel_size", dcp_default.value,
                             dcp_default.source)))
    tp = values.get("tensor_parallel_size", 1)
    if isinstance(tp, int) and tp % dcp:
        raise PreflightError(f"--decode-context-parallel-size: {dcp} does not divide --tensor-parallel-size {tp}")
    rule = reach_rule(version)
    if overshoot is not None and overshoot != rule.overshoot:
        s.notes.append(f"--overshoot {overshoot} ignored: {version.engine} schedules no position past max_model_len - 1 "
                       f"({rule.sources.get('overshoot', '')})")
    s.add("overshoot", rule.overshoot, DEFAULT, rule.sources.get("overshoot", ""))
    s.add("gpu", gpu, WORKBENCH, "--gpu (picks vLLM's batch defaults)")
    geometry = check_geometry(context_len=max_model_len, page_size=block_size, draft_tokens=k, spec_steps=max(k, 1),
                              spec_topk=1, max_bs=max_num_seqs, width_gen="g1")
    names = (DSA_INDEXER,) if model.dsa else ()
    modes = ((Mode.TARGET_VERIFY, 0),) if k else ((Mode.DECODE, 0),)
    extra = {"method": method, "lookahead": lookahead, "dcp_size": dcp, "max_num_batched_tokens": batched}
    facts = ModelFacts(model_path, model.source or "workbench preset", model.architecture, model.context_len,
                       model.attention, model.dsa, kv, model.num_nextn_predict_layers)
    return Deployment(version, command, choice, model_path, facts, "cuda", geometry, names, modes,
                      not values.get("enforce_eager", False), rule, s.items, (), tuple(s.notes), extra)


_GPU_MEMORY = {"h100": 80, "h200": 141, "b200": 180, "a100": 80}


def legacy_check(command: LaunchCommand, *, engine: str | None, model_config: str | None, overshoot: int | None,
                 gpu: str | None, device: str | None) -> CheckResult:
    """A vLLM check by the workbench's own reading of vLLM (no vLLM adapter on this branch)."""
    from workbench.preflight import CheckResult, _run_rows

    data = load_launch_data()
    name = engine or data.newest["vllm"]
    try:
        version = data.version(name)
    except ValueError as err:
        raise PreflightError(str(err)) from None
    if version.family != "vllm":
        raise PreflightError(f"--engine: {name!r} is a {version.family} version, but the command launches vllm")
    gpu_name = {"hopper": "h100"}.get(gpu or "h100", gpu or "h100")
    if gpu_name not in _GPU_MEMORY:
        raise PreflightError(f"--gpu: {gpu!r} is not one of {', '.join(_GPU_MEMORY)} (vLLM, read by the workbench)")
    flags = parse_flags(TABLES["vllm"], command.argv)
    choice = Choice(name, name, "--engine" if engine else "the newest modelled vLLM version", name, ())
    deployment = resolve_vllm(_Cmd(flags), version, model_config=model_config, gpu=gpu_name, overshoot=overshoot,
                              command=command, choice=choice)
    if device is None:
        return CheckResult(command, choice, deployment, (), deployment.notes, 3, "not checked: resolved only")
    rows, notes, status, verdict = _run_rows(deployment, device)
    return CheckResult(command, choice, deployment, tuple(rows), (*deployment.notes, *notes), status, verdict)
