"""Which graph paths an SGLang launch takes on its platform, as the release decides them.

Two decisions the graph buffers depend on that ``ServerArgs`` alone does not show:

* **Decode graphs on or off.** The resolution writes ``cuda_graph_config`` whole, many times; the
  phase that matters is the decode backend. 0.5.23 keeps it ``disabled`` on XPU unless the command
  sets ``--cuda-graph-backend-decode`` or ``--cuda-graph-config`` (``_handle_xpu_backends``,
  ``arg_groups/platform_hook.py``: "Decode graph is opt-in on XPU"). ``decode_graph_setting`` names
  the decision that last changed the decode backend in the release's own list of declarations
  (``_resolved_overrides``), so the deployment reads "decode graphs: disabled (_handle_xpu_backends
  ...)" rather than the last function that rewrote the whole config.
* **AITER's verify path.** ``AiterAttnBackend.__init__`` reads a 2-D page table in the target
  verify only on the unified path: ``use_triton_unified_attention`` (a sliding-window KV pool, or
  ``SGLANG_USE_AITER_UNIFIED_ATTN``) and not MLA and ``topk == 1`` and ``SGLANG_AITER_UNIFIED_VERIFY``
  (default on). The constructor needs a device (it allocates), so ``aiter_verify_setting`` runs its
  inputs as the engine computes them: the release's ``get_bool_env_var`` on the command's
  environment, its ``ModelConfig.is_hybrid_swa`` (the SWA pool exists only for such a model) and
  ``attention_arch``, and the ``topk`` the target backend is built with (the constructor's own
  default: the registry passes none). The lines are found in the release's source, not typed here.

Runs in the engine process (``launch_adapter``); returns plain ``Setting`` values.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from workbench.engines.commands.adapter_common import short_path
from workbench.engines.commands.adapters import ENGINE, GIVEN, READ, Setting

DECODE_GRAPH = "path.decode_graph_backend"  # the settings' names: resolve_sglang takes every "path." one
AITER_VERIFY = "path.aiter_verify"
LAUNCH_FEATURES = "launch_features"  # what the launch sets up beyond its attention backend (TableBackend.launch_names)
AITER_UNIFIED_VERIFY = "aiter-unified-verify"  # the feature name of AITER's unified target verify
AITER_FILE = "srt/layers/attention/aiter_backend.py"
REGISTRY_FILE = "srt/layers/attention/attention_registry.py"


def _decode_backend(config: Any) -> str | None:
    decode = getattr(config, "decode", None)
    if decode is None and isinstance(config, dict):
        decode = config.get("decode")
    value = decode.get("backend") if isinstance(decode, dict) else getattr(decode, "backend", None)
    return None if value is None else str(value)


def decode_graph_setting(server_args: Any, resolved: dict[str, Any], given: Iterable[str],
                         sites: dict[str, str]) -> Setting | None:
    """The decode phase's graph backend and the declaration that decided it (None where the release
    has no per-phase graph config). ``sites``: a declaration's source -> "function (file:line)"."""
    final = _decode_backend(resolved.get("cuda_graph_config"))
    if final is None:
        return None
    given = set(given)
    flag = next((dest for dest in ("cuda_graph_backend_decode", "cuda_graph_config") if dest in given), None)
    changed_by: str | None = None
    previous: str | None = None
    for source, fields in getattr(server_args, "_resolved_overrides", None) or ():
        if "cuda_graph_config" not in fields:
            continue
        value = _decode_backend(fields["cuda_graph_config"])
        if value is not None and value != previous:
            changed_by, previous = str(source), value
    if flag is not None and _given_value(resolved, flag) == final:  # the command's own choice, kept
        return Setting(final, GIVEN, f"--{flag.replace('_', '-')}")
    if changed_by is None:
        return Setting(final, ENGINE, "cuda_graph_config's decode phase as the release builds it (no declaration changed it)")
    return Setting(final, ENGINE, f"cuda_graph_config.decode.backend: {sites.get(changed_by, changed_by)}")


def _given_value(resolved: dict[str, Any], flag: str) -> str | None:
    if flag == "cuda_graph_backend_decode":
        value = resolved.get(flag)
        return None if value is None else str(value)
    return _decode_backend(resolved.get(flag))


def _line_of(path: Path, text: str) -> int | None:
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if text in line:
            return number
    return None


def _constructor_topk(path: Path) -> tuple[int | None, int | None]:
    """(default of ``AiterAttnBackend.__init__``'s ``topk``, its line), read from the release's source."""
    tree = ast.parse(path.read_text(errors="replace"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "AiterAttnBackend":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    args = item.args.args
                    defaults = dict(zip([a.arg for a in args[len(args) - len(item.args.defaults):]], item.args.defaults))
                    default = defaults.get("topk")
                    if isinstance(default, ast.Constant) and isinstance(default.value, int):
                        return default.value, default.lineno
    return None, None


def aiter_verify_setting(server_args: Any, model_config: Any, package_dir: Path) -> tuple[Setting, bool] | None:
    """(AITER's target-verify path, whether it is the unified one), or None where the launch runs
    another backend or the release has no unified verify."""
    backends = {getattr(server_args, "decode_attention_backend", None) or getattr(server_args, "attention_backend", None)}
    path = package_dir / AITER_FILE
    if "aiter" not in backends or not path.exists():
        return None
    verify_line = _line_of(path, "self._use_unified_verify = (")
    unified_line = _line_of(path, "self.use_triton_unified_attention = True")
    if verify_line is None or unified_line is None:
        return None
    env = importlib.import_module("sglang.srt.utils").get_bool_env_var
    arch = importlib.import_module("sglang.srt.configs.model_config").AttentionArch
    swa = bool(getattr(model_config, "is_hybrid_swa", False))
    asked = bool(env("SGLANG_USE_AITER_UNIFIED_ATTN"))
    mla = model_config.attention_arch == arch.MLA
    topk, topk_line = _constructor_topk(path)
    verify_env = bool(env("SGLANG_AITER_UNIFIED_VERIFY", "1"))
    unified = (swa or asked) and not mla and topk == 1 and verify_env
    where = short_path(str(path), package_dir)
    registry = package_dir / REGISTRY_FILE
    built = _line_of(registry, "AiterAttnBackend(runner)") if registry.exists() else None
    why = (f"use_triton_unified_attention = {swa or asked} (sliding-window KV pool: {swa}, ModelConfig.is_hybrid_swa; "
           f"SGLANG_USE_AITER_UNIFIED_ATTN: {asked}); MLA: {mla}; topk: {topk} (the constructor's default, {where}:"
           f"{topk_line}; the target's backend is built without one"
           f"{f', {short_path(str(registry), package_dir)}:{built}' if built else ''}); SGLANG_AITER_UNIFIED_VERIFY: {verify_env}")
    value = "unified (2-D page table)" if unified else "not unified (flat kv_indices)"
    return Setting(value, READ, f"AiterAttnBackend.__init__ ({where}:{unified_line}-{verify_line + 5}), run on the "
                                f"release's own inputs (the constructor allocates on the device): {why}"), unified
