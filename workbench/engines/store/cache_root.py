"""The workbench's own cache folder: engine wheels, learned files, engine processes' sockets."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$WORKBENCH_CACHE``, else ``~/.cache/workbench``. An empty ``WORKBENCH_CACHE`` counts as
    unset (as ``${WORKBENCH_CACHE:-...}`` reads it in a shell): a relative empty path would put the
    cache, a gigabyte of wheels, in whatever folder the command ran from."""
    return Path(os.environ.get("WORKBENCH_CACHE") or Path.home() / ".cache" / "workbench")
