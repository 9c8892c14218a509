"""What a vLLM release builds for a hybrid model's recurrent-state layers, asked of its own objects
(engine process only).

A hybrid model (Qwen3-Next, Qwen3.5 / 3.6, Kimi-Linear, Nemotron-H, ...) keeps one state per request
for its linear-attention or Mamba layers, addressed through state-index buffers that the layer
type's metadata builder allocates once, sized by ``max_num_seqs`` and the draft count (see
``backends/vllm/gdn_state_indices.py``). Nothing here is the workbench's reading of a config:

* whether the model is hybrid is the release's ``ModelConfig.is_hybrid``;
* the layer type is the ``mamba_type`` of the state layers the model's own module defines
  (``MambaBase`` subclasses), a ``MambaAttentionBackendEnum``;
* the buffers are those the release's metadata builder for that type allocates in ``__init__``,
  run here on meta tensors with the resolved config and the model's own state shapes
  (``get_mamba_state_shape_from_config``);
* whether the recurrent kernel bounds ``num_accepted_tokens - 1`` is read from the release's kernel
  source (file and line: Triton cannot run its kernels outside the interpreter on a CPU).

Every answer is a ``Setting`` with its origin; where a step cannot run, the setting says why.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

from workbench.engines.commands.adapters import ENGINE, READ, Setting

KIND = "recurrent_state"  # the layer type (MambaAttentionBackendEnum name), or "none: <why>"
BUFFERS = "recurrent_state.buffers"  # {attribute: shape} the layer type's builder allocates
ACCEPTED_INDEX = "recurrent_state.accepted_index"  # "unbounded" / "clamped": the kernel's read of a row's state
# Where the GDN recurrent kernel lives, newest layout first (0.28.0 moved it under third_party).
GDN_KERNEL_FILES = ("third_party/flash_linear_attention/ops/fused_recurrent.py",
                    "model_executor/layers/fla/ops/fused_recurrent.py")


def observe(config: Any, package_dir: Path) -> dict[str, Setting]:
    """The hybrid layers' settings of a resolved ``VllmConfig``; {} for a model with none."""
    model_config = config.model_config
    if not bool(getattr(model_config, "is_hybrid", False)):
        return {}
    out: dict[str, Setting] = {}
    try:
        model_cls = _model_class(model_config)
        kinds = _layer_kinds(model_cls)
    except Exception as error:  # noqa: BLE001 - a release whose registry differs: said, never guessed
        out[KIND] = Setting(f"unobserved: {type(error).__name__}: {str(error)[:160]}", ENGINE,
                            "ModelConfig.is_hybrid is True; the state layers' type could not be asked")
        return out
    if len(kinds) != 1:
        names = ", ".join(sorted(kinds)) or "none found"
        out[KIND] = Setting(f"unobserved: {len(kinds)} state layer types ({names})", ENGINE,
                            f"{model_cls.__name__}'s module defines these MambaBase layers")
        return out
    (kind, (layer, mamba_type)), = kinds.items()
    out[KIND] = Setting(kind, ENGINE, f"ModelConfig.is_hybrid; {model_cls.__name__}'s state layer {layer}.mamba_type")
    shapes = _builder_buffers(config, model_cls, mamba_type)
    if isinstance(shapes, str):
        out[BUFFERS] = Setting(f"unobserved: {shapes}", ENGINE, f"the {kind} metadata builder's __init__ on meta tensors")
    else:
        builder, buffers = shapes
        out[BUFFERS] = Setting(buffers, ENGINE, f"{builder}.__init__ run on meta tensors with the resolved config")
    if kind == "GDN_ATTN":
        found = gdn_accepted_index(package_dir)
        if found is not None:
            out[ACCEPTED_INDEX] = Setting(found[0], READ, found[1])
    return out


def _model_class(model_config: Any) -> type:
    """The model class the release's registry resolves; where it cannot import it, the import's own
    error (the registry logs it and raises a generic one), so that a missing library is named."""
    registry = importlib.import_module("vllm.model_executor.models").ModelRegistry
    try:
        found = registry.resolve_model_cls(model_config.architectures, model_config)
    except Exception:
        for arch in model_config.architectures or ():
            module_name = getattr(getattr(registry, "models", {}).get(arch), "module_name", None)
            if module_name:
                importlib.import_module(module_name)  # raises the import's own error
        raise
    cls: type = found[0]
    return cls


def _layer_kinds(model_cls: type) -> dict[str, tuple[str, Any]]:
    """{layer type's name: (the layer class that has it, its ``mamba_type`` as the release gives it)}
    over the ``MambaBase`` subclasses the model's module defines or imports (its state layers: the
    model builds them, nothing else does). Releases before the enum (0.20 and older) give a string,
    named here by the release's own map to the enum (``MAMBA_TYPE_TO_BACKEND_MAP``)."""
    base = importlib.import_module("vllm.model_executor.layers.mamba.abstract").MambaBase
    module = sys.modules[model_cls.__module__]
    names = getattr(importlib.import_module("vllm.v1.attention.backends.registry"), "MAMBA_TYPE_TO_BACKEND_MAP", {})
    kinds: dict[str, tuple[str, Any]] = {}
    for value in vars(module).values():
        if inspect.isclass(value) and issubclass(value, base) and value is not base and not inspect.isabstract(value):
            prop = inspect.getattr_static(value, "mamba_type", None)
            if isinstance(prop, property) and prop.fget is not None:
                kind = prop.fget(None)  # a constant per class: the property reads no instance state
                name = str(getattr(kind, "name", None) or names.get(kind, kind))
                kinds[name] = (value.__name__, kind)
    return kinds


def _builder_buffers(config: Any, model_cls: type, mamba_type: Any) -> tuple[str, dict[str, list[int]]] | str:
    """The tensors the metadata builder of ``mamba_type`` allocates, by attribute, on meta tensors
    (the backend chosen by the release's own ``get_mamba_attn_backend``); or why not."""
    import torch

    try:
        selector = importlib.import_module("vllm.v1.attention.selector")
        backend = selector.get_mamba_attn_backend(mamba_type)
        builder_cls = backend.get_builder_cls()
        spec_cls = importlib.import_module("vllm.v1.kv_cache_interface").MambaSpec
        shapes = model_cls.get_mamba_state_shape_from_config(config)  # type: ignore[attr-defined]
        dtypes = model_cls.get_mamba_state_dtype_from_config(config)  # type: ignore[attr-defined]
        block_size = int(config.cache_config.block_size or 16)
        spec = spec_cls(block_size=block_size, shapes=shapes, dtypes=dtypes, mamba_type=mamba_type)
        builder = builder_cls(spec, ["model.layers.0.linear_attn"], config, torch.device("meta"))
    except Exception as error:  # noqa: BLE001 - said in the setting, the verdict counts it unobserved
        return f"{type(error).__name__}: {str(error)[:160]}"
    buffers = {name: list(value.shape) for name, value in vars(builder).items() if isinstance(value, torch.Tensor)}
    return builder_cls.__name__, buffers


def gdn_accepted_index(package_dir: Path) -> tuple[str, str] | None:
    """Whether the release's GDN recurrent kernel bounds the state column it reads for a speculative
    row (``num_accepted_tokens - 1``): ("unbounded" | "clamped", "file:line: the statement"); None
    where the kernel file is not in the release."""
    for relative in GDN_KERNEL_FILES:
        path = package_dir / relative
        if path.is_file():
            return accepted_index_form(path.read_text(errors="replace"), f"vllm/{relative}")
    return None


def accepted_index_form(source: str, where: str) -> tuple[str, str] | None:
    """The form of the first assignment in ``source`` whose value loads from ``num_accepted_tokens``
    and subtracts one (the kernel's state column), by the AST, whatever its line layout: "clamped"
    where a ``maximum``/``max``/``where`` call bounds it, else "unbounded"."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        names = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
        minus_one = any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub) and isinstance(n.right, ast.Constant)
                        and n.right.value == 1 for n in ast.walk(node.value))
        if "num_accepted_tokens" not in names or not minus_one:
            continue
        calls = {_call_name(n) for n in ast.walk(node.value) if isinstance(n, ast.Call)}
        form = "clamped" if calls & {"maximum", "max", "where", "clamp"} else "unbounded"
        return form, f"{where}:{node.lineno}: {ast.unparse(node)}"
    return None


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
