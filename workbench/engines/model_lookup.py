"""Where the model a command names keeps its ``config.json``, on this machine, without downloading.

Runs in the engine process, with the release's own ``huggingface_hub`` (the one its engine reads
the cache with). In order:

1. ``--model-config CONFIG.json``: the user's copy of the model's config. The engine is pointed
   at a folder holding it (named like the model's last path part, since engines read the name).
2. A local directory (the path exists, relative to the checker's working directory): the engine
   reads it there itself.
3. A Hugging Face id (``org/name``): the user's cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``),
   read with ``huggingface_hub.try_to_load_from_cache``, offline. The engine then loads it by its
   id, offline, from that same cache (``apply_hub_env``).

A model found nowhere is ``Located.missing``: one line naming exactly what to give.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

HUB_VARIABLES = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME")


@dataclass(frozen=True)
class Located:
    name: str  # as the command names it
    engine_path: str  # what the engine is given in its place ("" when missing)
    found: str  # one line: where the config is
    missing: str | None = None  # one line naming what to give, when it is found nowhere


def hub_cache(lookup_env: Mapping[str, str]) -> str:
    """The cache folder huggingface_hub would use with these variables (its own precedence)."""
    if lookup_env.get("HF_HUB_CACHE"):
        return os.path.expanduser(lookup_env["HF_HUB_CACHE"])
    if lookup_env.get("HUGGINGFACE_HUB_CACHE"):
        return os.path.expanduser(lookup_env["HUGGINGFACE_HUB_CACHE"])
    if lookup_env.get("HF_HOME"):
        return os.path.join(os.path.expanduser(lookup_env["HF_HOME"]), "hub")
    xdg = lookup_env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "huggingface", "hub")


def apply_hub_env(lookup_env: Mapping[str, str]) -> str:
    """Point this process's huggingface_hub (and transformers) at the checker's cache, offline.

    huggingface_hub reads its variables once, at import (the engine process imported it before
    this request), so its constants are set as well as the environment."""
    cache = hub_cache(lookup_env)
    for name in HUB_VARIABLES:
        os.environ.pop(name, None)
    os.environ.update({"HF_HUB_CACHE": cache, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                       "HF_HUB_DISABLE_TELEMETRY": "1"})
    try:
        from huggingface_hub import constants  # type: ignore[import-not-found]  # the release's own, in its cache
    except ImportError:
        return cache
    constants.HF_HUB_CACHE = cache
    constants.HUGGINGFACE_HUB_CACHE = cache
    constants.HF_HUB_OFFLINE = True
    try:
        from transformers.utils import hub as transformers_hub  # type: ignore[import-not-found]
    except ImportError:
        return cache
    for name in ("TRANSFORMERS_CACHE", "HUGGINGFACE_HUB_CACHE", "PYTORCH_TRANSFORMERS_CACHE", "PYTORCH_PRETRAINED_BERT_CACHE"):
        if hasattr(transformers_hub, name):
            setattr(transformers_hub, name, cache)
    if hasattr(transformers_hub, "_is_offline_mode"):
        transformers_hub._is_offline_mode = True
    return cache


def _looks_local(name: str) -> bool:
    """A path rather than a hub id: absolute, relative with ./ or ../, home, or more than org/name."""
    return name.startswith(("/", "./", "../", "~")) or name.count("/") > 1 or name.endswith("/") or "\\" in name


def from_config_file(name: str, model_config: str, cwd: str) -> Located:
    """A folder holding ``model_config`` as its config.json, named like the model (engines read the name)."""
    source = Path(cwd, os.path.expanduser(model_config))
    if not source.is_file():
        return Located(name, "", "", f"--model-config: {model_config!r} is not a file (give the model's config.json)")
    folder = Path(tempfile.mkdtemp(prefix="workbench-model-")) / (Path(name.rstrip("/")).name or "model")
    folder.mkdir()
    shutil.copyfile(source, folder / "config.json")
    return Located(name, str(folder), f"--model-config {model_config}")


def locate(name: str, *, revision: str | None, model_config: str | None, cwd: str,
           lookup_env: Mapping[str, str], flag: str) -> Located:
    """Where ``name``'s config.json is; ``flag`` is the option that named it (for the message)."""
    if model_config is not None:
        return from_config_file(name, model_config, cwd)
    local = Path(cwd, os.path.expanduser(name))
    if local.is_dir():
        if (local / "config.json").is_file():
            return Located(name, str(local), f"local directory {local}")
        return Located(name, "", "", f"{flag} {name}: the directory has no config.json "
                                     "(give --model-config CONFIG.json, the model's config)")
    cache = hub_cache(lookup_env)
    if _looks_local(name):
        return Located(name, "", "", f"{flag} {name}: no such directory on this machine; give --model-config "
                                     "CONFIG.json (the config.json of that directory)")
    from huggingface_hub import try_to_load_from_cache  # the release's own

    found = try_to_load_from_cache(name, "config.json", cache_dir=cache, revision=revision)
    if isinstance(found, str):
        return Located(name, name, f"Hugging Face cache {Path(found).parent}")
    return Located(name, "", "", f"{flag} {name}: not in the Hugging Face cache ({cache}; set by HF_HUB_CACHE or "
                                 f"HF_HOME); give --model-config CONFIG.json, or fetch its config into the cache "
                                 f"(hf download {name} config.json)")
