"""The accelerators a check can stand for (``data/gpus.json``): ``gpu("h100")``."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from workbench.engines.launch_adapters import Gpu

GPUS_FILE = Path(__file__).resolve().parents[2] / "data" / "gpus.json"


@functools.lru_cache(maxsize=2)
def _load(path: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(path).read_text())
    return data


def names(path: Path = GPUS_FILE) -> list[str]:
    return list(_load(str(path))["gpus"])


def default_name(path: Path = GPUS_FILE) -> str:
    return str(_load(str(path))["default"])


def gpu(name: str, path: Path = GPUS_FILE) -> Gpu:
    """The GPU named ``name``; ValueError naming the allowed ones otherwise."""
    entries = _load(str(path))["gpus"]
    if name not in entries:
        raise ValueError(f"--gpu: {name!r} is not one of {', '.join(entries)}")
    entry = entries[name]
    return Gpu(name=name, platform=entry["platform"], device_name=entry["device_name"],
               capability=(int(entry["capability"][0]), int(entry["capability"][1])), memory_mib=int(entry["memory_mib"]),
               multiprocessors=int(entry["multiprocessors"]), toolkit=str(entry["toolkit"]), source=entry["source"],
               devices_per_node=int(entry.get("devices_per_node", 8)), arch=str(entry.get("arch", "")))
