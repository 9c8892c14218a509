"""The config files of a hub model the engine's loader reads, fetched into the user's own cache.

An engine fetches a model's files at start-up; people check a deployment before they download a
model of hundreds of gigabytes. So when the hub is reachable and the user has not said offline
(``HF_HUB_OFFLINE=1``, ``workbench check --offline``), the files the loader reads to build the
model's config are fetched, and nothing else:

* ``config.json`` (the model's architecture and sizes);
* ``generation_config.json`` and ``hf_quant_config.json`` where the repository has them (the
  engine reads both when present; a repository without them answers "no such file", which the
  cache remembers);
* for a ``--trust-remote-code`` launch, the configuration module ``config.json``'s ``auto_map``
  names for ``AutoConfig`` and the modules it imports relatively (transformers loads them so).

Every name passes ``allowed`` first: those JSON files, or a Python module. A weights file
(``*.safetensors``, ``*.bin``, ``*.pt``, ``*.gguf``) is never asked for. The files go through the
release's own ``huggingface_hub`` (``hf_hub_download``) into the cache the check reads, exactly
where the engine would put them; the engine process is offline again before the engine runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

CONFIG_FILES = ("config.json", "generation_config.json", "hf_quant_config.json")
OPTIONAL = ("generation_config.json", "hf_quant_config.json")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.py$")
_RELATIVE_IMPORT = re.compile(r"^\s*from\s+\.([A-Za-z_][A-Za-z0-9_]*)\s+import\s", re.M)
OFF_VALUES = ("1", "true", "yes", "on")
ETAG_TIMEOUT = 10.0  # seconds the hub has to answer each file's metadata


def allowed(filename: str) -> bool:
    """A file the check may fetch: a config JSON the loader reads, or a Python module of remote
    code (never a weights file)."""
    return filename in CONFIG_FILES or bool(_MODULE.match(filename))


def offline(lookup_env: Mapping[str, str]) -> bool:
    """Whether the user said offline (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``, as the hub client reads them)."""
    return any(lookup_env.get(name, "").strip().lower() in OFF_VALUES for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


@dataclass(frozen=True)
class Fetched:
    files: tuple[str, ...]  # fetched now (already cached ones not listed)
    problem: str | None = None  # one line: the hub's refusal or why it could not be reached
    refused: bool = False  # the hub answered and refused (gated, private, no such repository)


def fetch_configs(repo_id: str, *, revision: str | None, cache: str, lookup_env: Mapping[str, str],
                  remote_code: bool) -> Fetched:
    """Fetch what ``repo_id``'s config needs into ``cache`` (files the cache already holds, or
    knows the repository lacks, are not asked for again)."""
    from huggingface_hub import constants  # type: ignore[import-not-found]  # the release's own, in its cache

    was = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = False  # this process is offline for the engine; the fetch is the check's own
    _reset_sessions()
    try:
        return _fetch(repo_id, revision, cache, lookup_env, remote_code)
    finally:
        constants.HF_HUB_OFFLINE = was
        _reset_sessions()


def _reset_sessions() -> None:
    try:
        from huggingface_hub.utils import reset_sessions  # type: ignore[import-not-found]
    except ImportError:
        return
    reset_sessions()


def _fetch(repo_id: str, revision: str | None, cache: str, lookup_env: Mapping[str, str], remote_code: bool) -> Fetched:
    fetched: list[str] = []
    wanted = list(CONFIG_FILES)
    done: set[str] = set()
    while wanted:
        name = wanted.pop(0)
        if name in done:
            continue
        done.add(name)
        if not allowed(name):  # a guard on every name, whatever a config or a module says
            continue
        path, problem, refused = _one(repo_id, name, revision, cache, lookup_env)
        if problem is not None:
            if name in OPTIONAL and not refused:
                continue
            return Fetched(tuple(fetched), problem, refused)
        if path is None:
            continue
        if path.startswith("fetched:"):
            path = path[len("fetched:"):]
            fetched.append(name)
        if name == "config.json" and remote_code:
            wanted += _config_module(Path(path))
        elif name.endswith(".py"):
            wanted += [f"{m}.py" for m in _RELATIVE_IMPORT.findall(Path(path).read_text(errors="replace"))]
    return Fetched(tuple(fetched))


def _one(repo_id: str, name: str, revision: str | None, cache: str,
         lookup_env: Mapping[str, str]) -> tuple[str | None, str | None, bool]:
    """(path, problem, refused): ``"fetched:PATH"`` when fetched now, PATH when cached, None when
    the repository has no such file."""
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, name, cache_dir=cache, revision=revision)
    if isinstance(found, str):
        return found, None, False
    if found is not None:  # the cache knows the repository lacks it
        return None, None, False
    endpoint = lookup_env.get("HF_ENDPOINT") or None
    token = lookup_env.get("HF_TOKEN") or None  # else the client's own (its token file)
    try:
        path = hf_hub_download(repo_id, name, revision=revision, cache_dir=cache, endpoint=endpoint, token=token,
                               etag_timeout=ETAG_TIMEOUT)
    except Exception as err:  # noqa: BLE001 - the hub client's errors differ by release; each becomes one line
        kind = type(err).__name__
        text = " ".join(str(err).split())
        if "EntryNotFound" in kind:
            return None, f"the hub has no {name} for {repo_id}", False
        if kind in ("GatedRepoError", "RepositoryNotFoundError", "RevisionNotFoundError", "DisabledRepoError", "HfHubHTTPError"):
            return None, f"the hub refuses {repo_id}/{name}: {text[:400]}", True
        return None, f"the hub could not be reached for {repo_id}/{name} ({kind}: {text[:200]})", False
    return f"fetched:{path}", None, False


def _config_module(config: Path) -> list[str]:
    """The module ``auto_map`` names for AutoConfig (``configuration_deepseek.DeepseekV3Config``);
    a class of another repository (``org/repo--module.Class``) is that repository's, not fetched."""
    try:
        auto_map = json.loads(config.read_text()).get("auto_map") or {}
    except (OSError, ValueError, AttributeError):
        return []
    entry = auto_map.get("AutoConfig") if isinstance(auto_map, dict) else None
    if isinstance(entry, list):
        entry = entry[0] if entry else None
    if not isinstance(entry, str) or "--" in entry or "." not in entry:
        return []
    return [f"{entry.rsplit('.', 1)[0]}.py"]
