"""What a launch command resolves to: the deployment a check runs, with where each value came from.

Shared by both engines' resolutions (``resolve_sglang``, ``resolve_vllm``): the resolved settings
(``Setting``: given, an engine default with its file:line, or the workbench's own choice), the
model (its launch data, preset or ``config.json``) and the serving geometry the tables are sized by.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from workbench.analysis.memory import ModelPreset, load_presets
from workbench.analysis.reach import Conditions, ReachRule
from workbench.analysis.verdict_numbers import kv_budget_bytes
from workbench.engines.launch import LaunchData, LaunchVersion, ModelInfo, load_launch_data
from workbench.model.geometry import Mode, ServingGeometry
from workbench.preflight.command import LaunchCommand
from workbench.preflight.flags import PreflightError

GIVEN = "given"
DEFAULT = "default"  # the engine's default, read from its source
FORCED = "forced"  # the engine's resolution overrides what the command gave
MODEL = "model"  # the model's preset or config.json
WORKBENCH = "workbench"  # the workbench's own stand-in, where the engine decides at start-up

DEVICE_FAMILIES = {"npu": "ascend-npu", "cuda": "cuda"}  # TableBackend.device_family of a --device


@dataclass(frozen=True)
class Setting:
    name: str
    value: object
    origin: str  # GIVEN, DEFAULT, FORCED, MODEL or WORKBENCH
    source: str  # the flag as given, or the file:lines the default was read from

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "value": self.value, "origin": self.origin, "source": self.source}


@dataclass(frozen=True)
class Deployment:
    """One resolved launch: everything a check needs, nothing parsed any more."""

    version: LaunchVersion
    command: LaunchCommand
    model_path: str
    model: ModelInfo
    preset: ModelPreset | None
    device: str
    geometry: ServingGeometry
    launch_names: tuple[str, ...]  # what sets tables up: the attention backend, features ("dsa-indexer")
    modes: tuple[tuple[Mode, int], ...]  # (mode, step_id) of every graph the deployment captures
    graphs: bool  # False: graphs disabled, the eager path builds tables fresh each step
    reach_rule: ReachRule
    settings: tuple[Setting, ...]
    notes: tuple[str, ...] = ()
    kv_bytes_per_token: int | None = None
    extra: Mapping[str, object] = field(default_factory=dict)  # engine-specific values (vLLM: dcp, lookahead)
    conditions: Conditions = field(default_factory=Conditions)  # overlap, the KV pool: what the reach depends on
    pool_estimated: bool = True  # the pool's size is an estimate (or unknown), not --max-total-tokens
    pool_tokens: int | None = None  # the KV pool, given or estimated (None: unknown)

    @property
    def device_family(self) -> str:
        return DEVICE_FAMILIES.get(self.device, self.device)

    @property
    def kv_budget_bytes(self) -> int | None:
        """The KV cache of a full graph batch (``verdict_numbers.kv_budget_bytes``)."""
        return kv_budget_bytes(self.geometry.max_bs, self.geometry.context_len, self.kv_bytes_per_token)


class Settings:
    """Collects resolved settings in order; ``value`` returns what was recorded."""

    def __init__(self) -> None:
        self.items: list[Setting] = []
        self.notes: list[str] = []

    def add(self, name: str, value: object, origin: str, source: str) -> object:
        self.items.append(Setting(name, value, origin, source))
        return value

    def given_or(self, name: str, flags: LaunchCommand, dest: str, default: object, source: str,
                 origin: str = DEFAULT) -> object:
        """The command's value for ``dest``, or ``default`` from ``source``."""
        if dest in flags.flags.values:
            return self.add(name, flags.flags.values[dest], GIVEN, flags.flags.spelled[dest])
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


def check_geometry(**fields: object) -> ServingGeometry:
    try:
        return ServingGeometry(**fields)  # type: ignore[arg-type]
    except ValueError as err:
        raise PreflightError(f"resolved settings: {err}") from None


def launch_data() -> LaunchData:
    return load_launch_data()
