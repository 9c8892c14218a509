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
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from workbench.engines.sandbox import hub_fetch

HUB_VARIABLES = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME")
CREATED: list[Path] = []  # folders made for --model-config in this process, removed by cleanup()


def cleanup() -> None:
    """Remove the folders this process made for ``--model-config`` files."""
    while CREATED:
        shutil.rmtree(CREATED.pop(), ignore_errors=True)


@dataclass(frozen=True)
class Located:
    name: str  # as the command names it
    engine_path: str  # what the engine is given in its place ("" when missing)
    found: str  # one line: where the config is
    missing: str | None = None  # one line naming what to give, when it is found nowhere
    folder: str = ""  # the folder holding its config.json (what else of the model is there to read)


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
    note_absent_files()
    ASKED_ABSENT.clear()  # this request's look-ups only
    return cache


ASKED_ABSENT: list[tuple[str, tuple[str, ...]]] = []  # (repo or folder, files) a model file look-up could not give


def note_absent_files() -> None:
    """Make transformers' ``cached_files`` (every file of a model it reads: a config, its remote
    code, a tokenizer) note the files it raised for, so that an engine stopped for want of one can
    be told which the engine asked for. Releases with a transformers before ``cached_files`` are
    left as they are (their messages only say the cache lacks a file)."""
    hub = sys.modules.get("transformers.utils.hub")  # imported by apply_hub_env, from the release's deps
    original = getattr(hub, "cached_files", None)
    if original is None or getattr(original, "workbench_notes", False):
        return

    def cached_files(path_or_repo_id: object, filenames: list[str], *args: object, **kwargs: object) -> object:
        try:
            return original(path_or_repo_id, filenames, *args, **kwargs)
        except OSError:
            ASKED_ABSENT.append((str(path_or_repo_id), tuple(str(f) for f in filenames)))
            raise

    cached_files.workbench_notes = True  # type: ignore[attr-defined]
    hub.cached_files = cached_files  # type: ignore[union-attr]


def absent_files(model: Located, *, last: bool = False) -> str | None:
    """What to give for the files of ``model`` the engine asked for and this machine lacks (noted
    by ``note_absent_files`` since the last ``ASKED_ABSENT.clear()``), or None where none was.
    ``last``: only the last look-up that failed, when it is ``model``'s (the one that stopped the
    engine; one before it was of a file the engine takes as optional, or of another model)."""
    folder = os.path.realpath(model.folder) if model.folder else None

    def of_model(where: str) -> bool:
        return where in (model.name, model.engine_path) or bool(folder and os.path.realpath(where) == folder)

    noted = ASKED_ABSENT[-1:] if last else ASKED_ABSENT
    asked = [files for where, files in noted if of_model(where)]
    if not asked:
        return None
    names = list(dict.fromkeys(f for files in asked for f in files))
    shown = ", ".join(names)
    if model.found.startswith(("--model-config", "--draft-model-config")):  # the folder is the workbench's, holding that config only
        return (f"the engine asked for {shown}, which --model-config does not give (a config.json only); run the check "
                "where the model's folder is, or name the model by its hub id with its files in the Hugging Face cache")
    if _looks_local(model.name) or not model.folder:
        return f"the engine asked for {shown}, which is not beside its config.json; put the model's files there"
    return (f"the engine asked for {shown}, which the Hugging Face cache does not hold; fetch "
            f"{'it' if len(names) == 1 else 'them'} into the cache (hf download {model.name} {' '.join(names)})")


def _looks_local(name: str) -> bool:
    """A path rather than a hub id: absolute, relative with ./ or ../, home, or more than org/name."""
    return name.startswith(("/", "./", "../", "~")) or name.count("/") > 1 or name.endswith("/") or "\\" in name


def from_config_file(name: str, model_config: str, cwd: str, config_flag: str = "--model-config") -> Located:
    """A folder holding ``model_config`` as its config.json, named like the model (engines read the name)."""
    source = Path(cwd, os.path.expanduser(model_config))
    if not source.is_file():
        return Located(name, "", "", f"{config_flag}: {model_config!r} is not a file (give the model's config.json)")
    folder = Path(tempfile.mkdtemp(prefix="workbench-model-")) / (Path(name.rstrip("/")).name or "model")
    CREATED.append(folder.parent)
    folder.mkdir()
    shutil.copyfile(source, folder / "config.json")
    return Located(name, str(folder), f"{config_flag} {model_config}", folder=str(folder))


def locate(name: str, *, revision: str | None, model_config: str | None, cwd: str,
           lookup_env: Mapping[str, str], flag: str, config_flag: str = "--model-config",
           remote_code: bool = False) -> Located:
    """Where ``name``'s config.json is; ``flag`` is the option that named it, ``config_flag`` the
    check's option that gives its config.json (``--draft-model-config`` for a draft model).
    ``remote_code``: the launch trusts the model's remote code (its configuration module is
    fetched with its config, ``hub_fetch``)."""
    if model_config is not None:
        return from_config_file(name, model_config, cwd, config_flag)
    local = Path(cwd, os.path.expanduser(name))
    if local.is_dir():
        if (local / "config.json").is_file():
            return Located(name, str(local), f"local directory {local}", folder=str(local))
        return Located(name, "", "", f"{flag} {name}: the directory has no config.json "
                                     f"(give {config_flag} CONFIG.json, the model's config)")
    cache = hub_cache(lookup_env)
    if "$" in name or "{" in name or re.search(r"<[A-Za-z][A-Za-z0-9_-]*>", name):  # $MODEL, {weights path}, <model>
        return Located(name, "", "", f"{flag} {name}: a placeholder the command does not set; give the model "
                                     f"(its directory or Hugging Face id) in its place, or {config_flag} CONFIG.json")
    if _looks_local(name):
        return Located(name, "", "", f"{flag} {name}: no such directory on this machine; give {config_flag} "
                                     f"CONFIG.json (the config.json of that directory)")
    from huggingface_hub import try_to_load_from_cache  # the release's own

    try:
        found = try_to_load_from_cache(name, "config.json", cache_dir=cache, revision=revision)
    except ValueError:  # not a valid repository id (huggingface_hub's HFValidationError)
        return Located(name, "", "", f"{flag} {name}: neither a directory on this machine nor a Hugging Face id; "
                                     f"give {config_flag} CONFIG.json")
    fetched = None
    if not hub_fetch.offline(lookup_env):  # as the engine would at start-up: its config files, never weights
        fetched = hub_fetch.fetch_configs(name, revision=revision, cache=cache, lookup_env=lookup_env,
                                          remote_code=remote_code)
        if fetched.refused:
            return Located(name, "", "", f"{flag} {name}: {fetched.problem}; a gated or private model needs a token "
                                         "with access: accept its terms on the hub and set HF_TOKEN (or run hf auth "
                                         f"login), or give {config_flag} CONFIG.json")
        found = try_to_load_from_cache(name, "config.json", cache_dir=cache, revision=revision)
    if isinstance(found, str):
        got = f" (fetched from the hub now: {', '.join(fetched.files)})" if fetched is not None and fetched.files else ""
        return Located(name, name, f"Hugging Face cache {Path(found).parent}{got}", folder=str(Path(found).parent))
    why = f" ({fetched.problem})" if fetched is not None and fetched.problem else " (offline: HF_HUB_OFFLINE)"
    return Located(name, "", "", f"{flag} {name}: not in the Hugging Face cache ({cache}; set by HF_HUB_CACHE or "
                                 f"HF_HOME){why}; give {config_flag} CONFIG.json, or fetch its config into the cache "
                                 f"(hf download {name} config.json)")


def warm_hub_client() -> None:
    """Make TLS contexts once, in the engine process. Engines ask the hub about a model during
    resolution (offline, the answer is an error at once), but huggingface_hub builds an HTTP client
    per process first, and loading the certificate store costs 0.1 to 0.2 s in every forked child.
    Nothing is sent: offline, no connection is opened; the contexts are only reused."""
    import functools
    import ssl

    if getattr(ssl.create_default_context, "workbench_cached", False):
        return
    made = functools.lru_cache(maxsize=8)(ssl.create_default_context)

    def cached(*args: object, **kwargs: object) -> ssl.SSLContext:
        try:
            return made(*args, **kwargs)
        except TypeError:  # an unhashable argument: made as usual
            fresh: ssl.SSLContext = made.__wrapped__(*args, **kwargs)
            return fresh

    cached.workbench_cached = True  # type: ignore[attr-defined]
    cached.__wrapped__ = made.__wrapped__  # type: ignore[attr-defined]
    ssl.create_default_context = cached  # type: ignore[assignment]


ASSUMED_ABSENT: list[str] = []  # "repo/file" the engine asked the hub about that the cache lacks (this request)


def _cached_file(repo_id: str, filename: str, revision: str | None, repo_type: str | None) -> bool:
    from huggingface_hub import constants, try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, filename, cache_dir=constants.HF_HUB_CACHE, revision=revision,
                                   repo_type=repo_type)
    if not isinstance(found, str):
        ASSUMED_ABSENT.append(f"{repo_id}/{filename}")
    return isinstance(found, str)


def answer_hub_from_cache() -> None:
    """Answer the hub questions engines ask while resolving (``HfApi.file_exists``,
    ``list_repo_files``) from the user's cache, as the hub would answer for the files it holds.

    Online, the engine asks the hub whether a model has, say, ``hf_quant_config.json``; offline
    the question raises. Here the cache answers: a file it holds exists, one it lacks is taken as
    absent from the repository (the workbench's assumption, listed in the check's notes)."""
    try:
        import huggingface_hub
        from huggingface_hub import HfApi
    except ImportError:
        return
    if getattr(HfApi.file_exists, "workbench_cached", False):
        return

    def file_exists(self: object, repo_id: str, filename: str, *, repo_type: str | None = None,
                    revision: str | None = None, token: object = None) -> bool:
        return _cached_file(repo_id, filename, revision, repo_type)

    def list_repo_files(self: object, repo_id: str, *, revision: str | None = None, repo_type: str | None = None,
                        token: object = None) -> list[str]:
        from huggingface_hub import constants

        snapshot = _snapshot(repo_id, constants.HF_HUB_CACHE, revision)
        return sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file()) if snapshot else []

    file_exists.workbench_cached = True  # type: ignore[attr-defined]
    originals = {"file_exists": HfApi.file_exists, "list_repo_files": HfApi.list_repo_files}
    HfApi.file_exists = file_exists  # type: ignore[assignment,method-assign]
    HfApi.list_repo_files = list_repo_files  # type: ignore[assignment,method-assign]
    # The module-level shortcuts (huggingface_hub.file_exists) are methods bound at import.
    api = HfApi()
    for module in [huggingface_hub, *(m for name, m in sys.modules.items() if name.startswith("huggingface_hub."))]:
        for name, original in originals.items():
            bound = getattr(module, name, None)
            if bound is not None and getattr(bound, "__func__", None) is original:
                setattr(module, name, getattr(api, name))


def _snapshot(repo_id: str, cache: str, revision: str | None) -> Path | None:
    folder = Path(cache) / f"models--{repo_id.replace('/', '--')}"
    ref = folder / "refs" / (revision or "main")
    name = ref.read_text().strip() if ref.is_file() else (revision or "")
    snapshot = folder / "snapshots" / name
    return snapshot if name and snapshot.is_dir() else None
