"""Whether an SGLang release runs a model with recurrent-state layers (engine process only).

A hybrid model (Mamba2, Gated-DeltaNet, Kimi-Linear, Lightning layers beside attention) keeps a
state per request in a pool of its own, addressed through state indices and, in speculative
decoding, verify scratch rows (``intermediate_ssm_state_cache``) that no workbench backend models
for SGLang yet. The answer is the release's own: its ``mambaish_config`` (``configs/hybrid_arch.py``
from 0.5.17; before, a ``ModelRunner`` property, asked of a runner that holds only the model config;
0.5.3's ``is_hybrid_gdn``). A release with none of them runs no such layers.
"""

from __future__ import annotations

import importlib
from typing import Any

from workbench.engines.commands.adapters import ENGINE, Setting

KIND = "recurrent_state"  # the hybrid config's class name, or "unobserved: <why>"


def state_setting(model_config: Any) -> Setting | None:
    """The model's recurrent-state layers as the release names them; None for a model with none, or
    a release that runs no such layers (0.5.2 and before: no ``mambaish_config``, no ``is_hybrid_gdn``)."""
    try:
        found, where = _mambaish(model_config)
    except Exception as error:  # noqa: BLE001 - a release that asks more of the runner: said, never guessed
        return Setting(f"unobserved: {type(error).__name__}: {str(error)[:160]}", ENGINE, "mambaish_config")
    if not found:
        return None
    name = "hybrid GDN" if found is True else type(found).__name__
    return Setting(name, ENGINE, f"{where} (a hybrid model: its state layers' buffers are not modelled)")


def _mambaish(model_config: Any) -> tuple[Any, str]:
    """The release's own answer: ``configs/hybrid_arch.mambaish_config`` (0.5.17 on), else the model
    runner's ``mambaish_config`` (0.5.4 to 0.5.16) or ``is_hybrid_gdn`` (0.5.3), asked of a runner that
    holds only the model config; (None, "") where the release has none of them."""
    try:
        arch = importlib.import_module("sglang.srt.configs.hybrid_arch")
    except ModuleNotFoundError:
        runner_cls = importlib.import_module("sglang.srt.model_executor.model_runner").ModelRunner
        for name in ("mambaish_config", "is_hybrid_gdn"):
            prop = getattr(runner_cls, name, None)
            if isinstance(prop, property) and prop.fget is not None:
                runner = object.__new__(runner_cls)  # no __init__: the property reads the model config only
                runner.model_config = model_config
                return prop.fget(runner), f"ModelRunner.{name}"
        return None, ""
    return arch.mambaish_config(model_config), "sglang.srt.configs.hybrid_arch.mambaish_config"
