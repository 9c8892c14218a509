"""The accelerators a check can stand for (``data/gpus.json``): ``gpu("h100")``, a ``Gpu``.

Plain data: imports nothing of the workbench. ``Gpu`` crosses to the engine process inside a
``LaunchRequest`` (``commands.adapters``) and is what the platform stand-in answers with
(``platform_standins``); both import it from here."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Gpu:
    """The accelerator a check assumes, as data (``data/gpus.json``), fed to the engine's code
    through a stand-in platform (``torch.cuda`` answering with these values)."""

    name: str  # the workbench's key: "h100"
    platform: str  # "cuda", "rocm", "npu" or "xpu"
    device_name: str  # as torch reports it: "NVIDIA H100 80GB HBM3"
    capability: tuple[int, int]  # (9, 0)
    memory_mib: int  # total memory as nvidia-smi reports it
    multiprocessors: int
    toolkit: str  # the CUDA / ROCm / CANN version the stand-in reports ("12.8")
    source: str  # where these values come from (a vendor datasheet URL)
    devices_per_node: int = 8  # how many the stand-in platform reports
    arch: str = ""  # ROCm's gcnArchName ("gfx942"); "" elsewhere
    fp64: bool = False  # native FP64 (torch.xpu's ``has_fp64``: SGLang takes it for XMX support on XPU)

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib << 20


GPUS_FILE = Path(__file__).resolve().parents[3] / "data" / "gpus.json"


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
               devices_per_node=int(entry.get("devices_per_node", 8)), arch=str(entry.get("arch", "")),
               fp64=bool(entry.get("fp64", False)))
