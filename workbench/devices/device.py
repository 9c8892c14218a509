"""Which torch device the probes run on, and what that device is.

``auto`` prefers an Ascend NPU, then CUDA, then the CPU; ``cpu``, ``cuda`` and ``npu`` force one.

torch_npu needs care. Where it is installed without the Ascend runtime, torch's device-backend
auto-loading (torch >= 2.5 imports every registered backend during ``import torch``) makes
``import torch`` itself fail, unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` is set before the first
import. So this module finds torch_npu without importing it (``importlib.util.find_spec``), turns
auto-loading off before torch is imported, and later imports torch_npu explicitly under a guard.
The guard itself lives in ``autoload_guard.py`` (no torch there), which ``workbench/__init__.py``
runs first so that it holds before any workbench module imports torch. A program that imports
torch *before* workbench is on its own.
"""

from __future__ import annotations

import contextlib
import platform
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from workbench.devices.autoload_guard import guard_backend_autoload, torch_npu_installed

guard_backend_autoload()  # a no-op after workbench/__init__.py ran it; here for a direct import of this module

import torch  # noqa: E402

from workbench.devices.kinds import DEVICE_CHOICES  # noqa: E402

# ---- detection ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """Whether one accelerator kind is usable, and in a few words why (not)."""

    available: bool
    note: str


def find_npu() -> Found:
    """Import torch_npu under a guard; an install without the Ascend runtime is not a device."""
    if not torch_npu_installed():
        return Found(False, "torch_npu not installed")
    try:
        import torch_npu  # type: ignore[import-not-found]  # noqa: F401
    except Exception as err:  # the runtime's own error, shortened to its first line
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        return Found(False, f"torch_npu import failed ({first})")
    npu = getattr(torch, "npu", None)
    if npu is None or not npu.is_available():
        return Found(False, "torch_npu imported but no Ascend device is visible")
    return Found(True, f"{npu.get_device_name(0)}, {npu.device_count()} visible")


def find_cuda() -> Found:
    if not torch.cuda.is_available():
        return Found(False, "torch sees no CUDA device")
    return Found(True, f"{torch.cuda.get_device_name(0)}, {torch.cuda.device_count()} visible")


@dataclass(frozen=True)
class Selection:
    """The device a run uses and the one line that says how it was chosen."""

    device: torch.device
    summary: str


def select_device(name: str = "auto") -> Selection:
    """The device for ``name``; raises ValueError naming what is missing."""
    if name not in DEVICE_CHOICES:
        raise ValueError(f"device: {name!r} is not one of {', '.join(DEVICE_CHOICES)}")
    if name == "cpu":
        return Selection(torch.device("cpu"), "device cpu (requested)")
    if name == "npu":
        npu = find_npu()
        if not npu.available:
            raise ValueError(f"device: 'npu' requested but {npu.note}")
        return Selection(torch.device("npu"), f"device npu ({npu.note})")
    if name == "cuda":
        cuda = find_cuda()
        if not cuda.available:
            raise ValueError(f"device: 'cuda' requested but {cuda.note}")
        return Selection(torch.device("cuda"), f"device cuda ({cuda.note})")
    npu, cuda = find_npu(), find_cuda()
    kind = auto_kind(npu, cuda)
    return Selection(torch.device(kind), f"device auto -> {kind} (npu: {npu.note}; cuda: {cuda.note})")


def auto_kind(npu: Found, cuda: Found) -> str:
    """What ``auto`` picks: an Ascend NPU, else CUDA, else the CPU."""
    if npu.available:
        return "npu"
    return "cuda" if cuda.available else "cpu"


def resolve_device(name: str = "auto") -> torch.device:
    """The device for ``name``; raises ValueError naming what is missing."""
    return select_device(name).device


# ---- the device module: one place that knows torch.cuda from torch.npu ---------------------------


def accelerator_module(device: torch.device | str) -> ModuleType | None:
    """``torch.cuda`` or ``torch.npu`` (torch_npu's mirror of the CUDA API); None on the CPU."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda
    if kind == "npu":
        module = getattr(torch, "npu", None)
        return module if isinstance(module, ModuleType) else None
    return None


def synchronize(device: torch.device | str) -> None:
    """Wait for the device's queued work; a no-op on the CPU, where every op is synchronous."""
    module = accelerator_module(device)
    if module is not None:
        module.synchronize(torch.device(device))


def allocated_bytes(device: torch.device | str) -> int | None:
    """Bytes the device's caching allocator has handed to live tensors; None on the CPU."""
    module = accelerator_module(device)
    if module is None:
        return None
    return int(module.memory_allocated(torch.device(device)))


# ---- what the device is ------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceInfo:
    """The facts a hardware result is filed under."""

    kind: str  # "cpu", "cuda", "npu"
    name: str  # the device's own name, e.g. "NVIDIA H200"
    driver: str  # the driver version where the device says it, else ""
    runtime: str  # CUDA runtime of the torch build, or the CANN version, or ""
    torch_version: str

    @property
    def file_stem(self) -> str:
        """``<kind>-<sanitized name>``: the name of the device's hardware file."""
        return f"{self.kind}-{sanitize_name(self.name)}"


def sanitize_name(name: str) -> str:
    """Lower case, runs of anything but letters and digits as one '-': "NVIDIA H200" -> "nvidia-h200"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def device_info(device: torch.device | str) -> DeviceInfo:
    dev = torch.device(device)
    if dev.type == "cuda":
        return DeviceInfo("cuda", torch.cuda.get_device_name(dev), _cuda_driver(), torch.version.cuda or "", torch.__version__)
    if dev.type == "npu":
        module = accelerator_module(dev)
        name = module.get_device_name(dev) if module is not None else "unknown"
        return DeviceInfo("npu", name, _cann_version("DRIVER"), _cann_version("CANN"), torch.__version__)
    return DeviceInfo("cpu", _cpu_name(), "", "", torch.__version__)


def _cuda_driver() -> str:
    """The NVIDIA driver version through NVML when it is installed, else the driver's CUDA API level."""
    try:
        import pynvml  # type: ignore[import-not-found,import-untyped]

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # no NVML: fall back to what torch can say without it
        pass
    get = getattr(torch._C, "_cuda_getDriverVersion", None)  # e.g. 12080 for CUDA 12.8
    if get is None:
        return ""
    level = int(get())
    return f"cuda-api {level // 1000}.{level % 1000 // 10}"


def _cann_version(part: str) -> str:
    """A CANN component's version (torch_npu.npu.utils.get_cann_version, CANN >= 8.1), or ""."""
    try:
        from torch_npu.npu.utils import get_cann_version  # type: ignore[import-not-found]

        return str(get_cann_version(module=part))
    except Exception:
        return str(getattr(torch.version, "cann", "") or "") if part == "CANN" else ""


def _cpu_name() -> str:
    """The CPU model from /proc/cpuinfo on Linux, else what platform knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run probes on one intra-op thread, then restore the caller's setting.

    Probes move one row at a time; torch's thread pool only adds hand-off cost. Measured on two
    busy cores: 40 sweep configurations took 5.0 s with two threads and 0.26 s with one, and a
    3-row ``repeat_interleave`` 2.8 ms against 0.008 ms.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
