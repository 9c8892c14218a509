"""Bytes per graph buffer and sizing rule, the narrowest safe width, and model presets.

A buffer's cost only matters next to what it protects: the KV cache of the same graph batch. So
every number here comes with the model it belongs to (a ``ModelPreset``) and the KV budget of
``max_bs`` requests of ``context_len`` tokens.

Worked example (QwQ-32B on Ascend, the first seed): ctx 32768, ps 128, D 16, ``context`` rule,
so ``block_tables`` is ``(max_bs, 256)`` int32 = ``max_bs * 256 * 4`` bytes; the narrowest safe
table holds ``cdiv(W, ps) = cdiv(32788, 128) = 257`` pages, so the legacy rule is one page short.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

import pandas as pd  # type: ignore[import-untyped]

from workbench import backends
from workbench.backends import DEFAULT_COMPONENTS, RULE_NAMES
from workbench.backends.base import INT32_BYTES, TableBackend
from workbench.model.geometry import Mode, ServingGeometry

__all__ = ["INT32_BYTES"]  # re-exported: the memory model's vocabulary
DEFAULT_PRESETS = Path(__file__).resolve().parents[2] / "data" / "presets.json"


# ---- model presets ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ModelPreset:
    """A model as it is served: its KV shape and the serving geometry it is launched with.

    Attention is either MHA/GQA (``kv_heads`` and ``head_dim`` set) or MLA (``kv_lora_rank`` and
    ``qk_rope_head_dim`` set, one latent vector per token and layer), never both.
    """

    name: str
    source: str  # one line: where the numbers come from
    context_len: int
    num_layers: int
    kv_heads: int | None = None
    head_dim: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    kv_dtype_bytes: int
    page_size: int
    draft_tokens: int
    spec_steps: int = 1
    spec_topk: int = 1
    draft_has_kv: bool = True  # False for NGRAM, which keeps no KV of its own
    max_bs: int
    width_gen: str = "g1"
    weights_bytes: int | None = None  # the checkpoint's weights (the KV pool's estimate subtracts them)

    def __post_init__(self) -> None:
        for name in ("name", "source"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name}: {value!r} is not a non-empty string")
        for name in ("num_layers", "kv_dtype_bytes"):
            _check_positive(name, getattr(self, name))
        for name in ("kv_heads", "head_dim", "kv_lora_rank", "qk_rope_head_dim"):
            if getattr(self, name) is not None:
                _check_positive(name, getattr(self, name))
        mha = self.kv_heads is not None and self.head_dim is not None
        mla = self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
        if mha == mla:
            raise ValueError(
                "kv_heads: set either kv_heads and head_dim (MHA/GQA) or kv_lora_rank and "
                "qk_rope_head_dim (MLA), not both and not neither"
            )
        _ = self.geometry  # validates the serving fields; ServingGeometry names the bad one

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token takes over all layers.

        MHA/GQA keeps a key and a value per KV head: ``2 * layers * kv_heads * head_dim * bytes``.
        MLA keeps one compressed latent plus the rope key: ``layers * (rank + rope) * bytes``.
        """
        if self.kv_lora_rank is not None and self.qk_rope_head_dim is not None:
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_dtype_bytes
        assert self.kv_heads is not None and self.head_dim is not None
        return 2 * self.num_layers * self.kv_heads * self.head_dim * self.kv_dtype_bytes

    @property
    def geometry(self) -> ServingGeometry:
        return ServingGeometry(
            context_len=self.context_len, page_size=self.page_size, draft_tokens=self.draft_tokens,
            spec_steps=self.spec_steps, spec_topk=self.spec_topk, draft_has_kv=self.draft_has_kv,
            max_bs=self.max_bs, width_gen=self.width_gen,
        )

    @property
    def kv_budget_bytes(self) -> int:
        """The KV cache of a full graph batch (``verdict_numbers.kv_budget_bytes``)."""
        from workbench.analysis.verdict_numbers import kv_budget_bytes

        budget = kv_budget_bytes(self.max_bs, self.context_len, self.kv_bytes_per_token)
        assert budget is not None
        return budget


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: {value!r} is not a positive integer")


_PRESET_FIELDS = {f.name for f in fields(ModelPreset)}


def preset_from_dict(data: object, index: int = 0) -> ModelPreset:
    """One preset from its JSON object; errors name the preset and the field."""
    if not isinstance(data, Mapping):
        raise ValueError(f"preset #{index}: {type(data).__name__} is not a JSON object")
    label = data.get("name", f"#{index}")
    unknown = sorted(set(data) - _PRESET_FIELDS)
    if unknown:
        raise ValueError(f"preset {label!r}: {unknown[0]}: unknown field (allowed: {', '.join(sorted(_PRESET_FIELDS))})")
    try:
        return ModelPreset(**data)
    except TypeError as err:  # a required field is missing: the message names it
        missing = [f.name for f in fields(ModelPreset) if f.name not in data and f.default is MISSING]
        field_name = missing[0] if missing else "preset"
        raise ValueError(f"preset {label!r}: {field_name}: missing (required)") from err
    except ValueError as err:
        raise ValueError(f"preset {label!r}: {err}") from None


def load_presets(path: str | Path = DEFAULT_PRESETS) -> list[ModelPreset]:
    """The presets of a JSON file holding a list of preset objects."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, list) or not data:
        raise ValueError(f"{path}: presets: expected a non-empty JSON list of preset objects")
    presets = [preset_from_dict(item, i) for i, item in enumerate(data)]
    names = [p.name for p in presets]
    if len(set(names)) != len(names):
        duplicate = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"{path}: preset {duplicate!r}: name: listed twice")
    return presets


# ---- bytes per buffer ---------------------------------------------------------------------------


def _checked(component: str, geometry: ServingGeometry, mode: Mode | str) -> tuple[TableBackend, Mode]:
    backend = backends.backend_of(component)
    parsed = Mode.parse(mode)
    reason = geometry.invalid_mode_reason(parsed) or backend.mode_problem(parsed)
    if reason:
        raise ValueError(reason)
    return backend, parsed


def table_bytes(
    component: str, geometry: ServingGeometry, width: int, mode: Mode | str = "target-verify", *, hybrid_swa: bool = False
) -> int:
    """Bytes of the buffers ``init_cuda_graph_state`` makes for a table ``width`` wide (the
    backend's ``table_bytes``: e.g. NPU ``block_tables`` (max_bs, width pages) int32)."""
    backend, parsed = _checked(component, geometry, mode)
    return backend.table_bytes(geometry, width, parsed, hybrid_swa=hybrid_swa)


def rule_width(component: str, geometry: ServingGeometry, rule: str) -> int:
    """The width a rule gives, in the backend's unit (pages or tokens)."""
    backend = backends.backend_of(component)
    return backend.width(geometry, backends.check_rule(backend, rule))


def buffer_bytes(
    component: str, geometry: ServingGeometry, rule: str, mode: Mode | str = "target-verify", *, hybrid_swa: bool = False
) -> int:
    """Bytes the graph buffers of ``component`` take when sized by ``rule``."""
    return table_bytes(component, geometry, rule_width(component, geometry, rule), mode, hybrid_swa=hybrid_swa)


def max_step_reads(component: str, geometry: ServingGeometry, mode: Mode | str = "target-verify", step_id: int = 0) -> int:
    """Tokens the longest request may read in one step: the table's bound plus the backend's
    lookahead (D in target-verify; ``step_id + 1`` in draft-decode where the backend adds it)."""
    backend, parsed = _checked(component, geometry, mode)
    return geometry.max_committed_len(parsed, step_id) + backend.lookahead(geometry, parsed, step_id)


def min_safe_width(component: str, geometry: ServingGeometry, mode: Mode | str = "target-verify", step_id: int = 0) -> int:
    """The narrowest width that no committed length up to ``max_committed_len`` can overflow.

    A table of pages: the pages of the longest read, ``cdiv(reads, ps)``; of tokens: the read.
    Example: QwQ verify (ctx 32768, D 16, ps 128): bound W - D = 32772, reads 32788, 257 pages.
    """
    reads = max_step_reads(component, geometry, mode, step_id)
    return backends.backend_of(component).width_for_tokens(geometry, reads)


def min_safe_bytes(
    component: str, geometry: ServingGeometry, mode: Mode | str = "target-verify", *, hybrid_swa: bool = False
) -> int:
    return table_bytes(component, geometry, min_safe_width(component, geometry, mode), mode, hybrid_swa=hybrid_swa)


# ---- the memory table ---------------------------------------------------------------------------


def memory_rows(preset: ModelPreset, component: str, rules: Iterable[str], mode: str) -> list[dict[str, object]]:
    g = preset.geometry
    safe = min_safe_bytes(component, g, mode)
    rows: list[dict[str, object]] = []
    for rule in rules:
        size = buffer_bytes(component, g, rule, mode)
        rows.append({
            "preset": preset.name, "component": component, "rule": rule, "mode": mode,
            "context_len": preset.context_len, "page_size": preset.page_size,
            "draft_tokens": preset.draft_tokens, "max_bs": preset.max_bs,
            "request_table_width": g.request_table_width,
            "buffer_width": rule_width(component, g, rule),
            "min_safe_width": min_safe_width(component, g, mode),
            "bytes": size, "buffer_bytes": size, "min_safe_bytes": safe,
            "overhead_bytes": size - safe, "overhead_ratio": (size - safe) / safe,
            "kv_bytes_per_token": preset.kv_bytes_per_token,
            "kv_budget_bytes": preset.kv_budget_bytes,
            "share_of_kv_budget": size / preset.kv_budget_bytes,
        })
    return rows


def memory_table(
    presets: Iterable[ModelPreset],
    rules: Iterable[str] = RULE_NAMES,
    *,
    components: Iterable[str] = DEFAULT_COMPONENTS,
    mode: str = "target-verify",
) -> pd.DataFrame:
    """One row per preset x component x rule: the buffer's bytes beside the KV budget they guard.

    ``bytes`` and ``buffer_bytes`` are the same number (the first name for the memory table, the
    second matching the sweep frame). ``overhead_bytes`` is negative for a rule narrower than the
    safe width: bytes saved at the price of a failing step. ``overhead_ratio`` is relative to the
    safe bytes.
    """
    rule_list = list(rules)
    for rule in rule_list:
        if rule not in RULE_NAMES:
            raise ValueError(f"rule: {rule!r} is not one of {', '.join(RULE_NAMES)}")
    rows = [
        row
        for preset in presets
        for component in components
        for row in memory_rows(preset, component, [r for r in rule_list if r in backends.backend_of(component).rules], mode)
    ]
    return pd.DataFrame(rows)
