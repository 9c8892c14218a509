"""Results that are expensive and deterministic, kept by the content they come from.

The atlas over every release and the history across releases take minutes on a loaded laptop, yet
they change only when what they are computed from changes: the workbench's code, the data it reads
(``data/``: learned releases, presets, launch defaults) and the releases learned on this machine
(the user's learned folder). ``cached_frames`` keys a result by a digest of all of those files'
bytes, the libraries that pickle the frames, and the call's own arguments; the first call computes
and stores, a later one with nothing changed loads (and says so), and any change anywhere in those
inputs computes afresh. A key names only content, so two reports running at once can share an entry:
each writes through a temporary file and a rename, the same bytes either way.

    ${WORKBENCH_CACHE:-~/.cache/workbench}/results/<name>-<key>.pkl   {frame name: DataFrame}

``WORKBENCH_RESULT_CACHE=0`` turns it off (computes every time, stores nothing).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd  # type: ignore[import-untyped]

from workbench.engines.store.cache_root import cache_root
from workbench.engines.store.learned import cache_dir as learned_cache_dir

PACKAGE = Path(__file__).resolve().parents[1]  # workbench/: the code's own version is its source
DATA = PACKAGE.parent / "data"
OFF_ENV = "WORKBENCH_RESULT_CACHE"
_DATA_SKIPPED = ("cache",)  # data/cache holds sweeps' own checkpoints, not inputs of these results


def _files(root: Path, suffixes: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> Iterable[Path]:
    if not root.is_dir():
        return []
    found = (p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return sorted(p for p in found if (not suffixes or p.suffix in suffixes)
                  and p.relative_to(root).parts[0] not in skip)


def inputs_digest() -> str:
    """One digest of every input a cached result may depend on: the package's source, ``data/``,
    the user's learned releases, and the versions of pandas and numpy (the pickle's readers)."""
    import numpy as np

    digest = hashlib.sha256(f"pandas {pd.__version__} numpy {np.__version__}".encode())
    for label, root, files in (("code", PACKAGE, _files(PACKAGE, (".py", ".json", ".tmpl"))),
                               ("data", DATA, _files(DATA, skip=_DATA_SKIPPED)),
                               ("learned", learned_cache_dir(), _files(learned_cache_dir()))):
        for path in files:
            digest.update(f"\0{label}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def code_digest() -> str:
    """A digest of the package's own source and torch's version: what an executed step's outcome and
    message rest on, beside the state it executes (``atlas.boundaries``)."""
    import torch

    digest = hashlib.sha256(f"torch {torch.__version__}".encode())
    for path in _files(PACKAGE, (".py", ".json", ".tmpl")):
        digest.update(f"\0{path.relative_to(PACKAGE).as_posix()}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:24]


def result_key(name: str, arguments: Mapping[str, Any]) -> str:
    """The key of ``name`` called with ``arguments`` (JSON-able) over the current inputs."""
    call = json.dumps({"name": name, "arguments": arguments}, sort_keys=True, default=str)
    return hashlib.sha256(f"{inputs_digest()}\0{call}".encode()).hexdigest()[:24]


def cache_folder() -> Path:
    return cache_root() / "results"


def cached_frames(name: str, arguments: Mapping[str, Any], compute: Callable[[], dict[str, pd.DataFrame]],
                  note: Callable[[str], None] = print) -> dict[str, pd.DataFrame]:
    """``compute()`` once per content of its inputs; later calls with nothing changed load its frames.
    ``note`` is told which happened, in one line (a notebook prints it; the report shows it)."""
    if os.environ.get(OFF_ENV, "1") == "0":
        note(f"{name}: computed ({OFF_ENV}=0: the result cache is off)")
        return compute()
    started = time.perf_counter()
    key = result_key(name, arguments)
    path = cache_folder() / f"{name}-{key}.pkl"
    if path.exists():
        try:
            with open(path, "rb") as handle:
                frames: dict[str, pd.DataFrame] = pickle.load(handle)
            note(f"{name}: reused the cached result, inputs unchanged (key {key}, {time.perf_counter() - started:.1f} s)")
            return frames
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError) as err:
            note(f"{name}: the cached result {path} could not be read ({type(err).__name__}); computing it again")
    frames = compute()
    store_pickle(path, frames)
    note(f"{name}: computed in {time.perf_counter() - started:.1f} s and cached (key {key})")
    return frames


def store_pickle(path: Path, content: object) -> None:
    """``content`` pickled to ``path`` through a temporary file and a rename: a reader never sees half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            pickle.dump(content, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
