"""The GPU a check assumes, stood in for in the engine process: ``install(gpu)``.

An engine picks defaults by the device it runs on (the attention backend by compute capability,
CUDA-graph batch sizes and memory fractions by total memory). On a CPU machine those questions
get the answers of the ``Gpu`` the check was given:

* ``torch.cuda`` (CUDA and ROCm): ``is_available``, ``device_count``, ``get_device_name``,
  ``get_device_capability``, ``get_device_properties``, ``mem_get_info``; ``torch.version.cuda``
  or ``torch.version.hip`` is the GPU's toolkit version.
* ``torch.npu`` (Ascend): the same questions on the NPU module the engine probes.
* the vendor's command-line tools the engines run for memory and capability (``nvidia-smi``,
  ``rocminfo``, ``npu-smi``): small scripts on ``PATH`` printing the GPU's values.

Nothing here can run a kernel: an engine function that allocates on the device fails, as on a
CPU. This changes ``torch`` for good, so it runs only in an engine process (``launch_service``).
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

from workbench.engines.launch_adapters import Gpu


def _properties(gpu: Gpu) -> types.SimpleNamespace:
    major, minor = gpu.capability
    return types.SimpleNamespace(
        name=gpu.device_name, total_memory=gpu.memory_bytes, major=major, minor=minor,
        multi_processor_count=gpu.multiprocessors, gcnArchName=gpu.arch or "", is_integrated=False,
        L2_cache_size=50 << 20, uuid="stand-in", warp_size=64 if gpu.platform == "rocm" else 32,
    )


def _device_module(gpu: Gpu, module: Any) -> None:
    """Answer a torch device module's questions (``torch.cuda`` or ``torch.npu``) as ``gpu``."""
    props = _properties(gpu)
    values: dict[str, Any] = {
        "is_available": lambda: True,
        "device_count": lambda: gpu.devices_per_node,
        "get_device_name": lambda device=None: gpu.device_name,
        "get_device_capability": lambda device=None: gpu.capability,
        "get_device_properties": lambda device=None: props,
        "mem_get_info": lambda device=None: (gpu.memory_bytes, gpu.memory_bytes),
        "current_device": lambda: 0,
        "set_device": lambda device: None,
        "is_initialized": lambda: False,
        "synchronize": lambda device=None: None,
        "empty_cache": lambda: None,
        "get_arch_list": lambda: [f"sm_{gpu.capability[0]}{gpu.capability[1]}"],
        "is_bf16_supported": lambda *args, **kwargs: True,
    }
    for name, value in values.items():
        setattr(module, name, value)


def _tool(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _nvidia_smi(gpu: Gpu) -> str:
    """``nvidia-smi --query-gpu=a,b --format=csv,noheader,nounits``: one line per device."""
    fields = {"memory.total": str(gpu.memory_mib), "memory.used": "0", "memory.free": str(gpu.memory_mib),
              "name": gpu.device_name, "compute_cap": f"{gpu.capability[0]}.{gpu.capability[1]}",
              "count": str(gpu.devices_per_node), "driver_version": "570.00", "index": "{i}"}
    return f"""#!{sys.executable}
import sys
FIELDS = {fields!r}
query = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--query-gpu=")), None)
if query is None:
    print("stand-in nvidia-smi: {gpu.device_name} x {gpu.devices_per_node} (workbench)")
    sys.exit(0)
for i in range({gpu.devices_per_node}):
    print(", ".join(FIELDS.get(name, "[N/A]").format(i=i) for name in query.split(",")))
"""


def _rocminfo(gpu: Gpu) -> str:
    kib = gpu.memory_mib * 1024
    agent = f"  Name:                    {gpu.arch}\\n  Pool 1\\n    Segment:                 GLOBAL\\n    Size:                    {kib}(0x0) KB\\n"
    return f"#!{sys.executable}\nprint(\"{agent}\" * {gpu.devices_per_node})\n"


def _npu_smi(gpu: Gpu) -> str:
    return f"#!{sys.executable}\nprint('stand-in npu-smi: {gpu.device_name} x {gpu.devices_per_node} (workbench)')\n"


def install(gpu: Gpu) -> Path:
    """Stand in for ``gpu`` in this process; returns the folder of the stand-in tools (on ``PATH``)."""
    import torch

    if gpu.platform in ("cuda", "rocm"):
        _device_module(gpu, torch.cuda)
        torch.version.cuda = gpu.toolkit if gpu.platform == "cuda" else None  # type: ignore[misc]
        torch.version.hip = gpu.toolkit if gpu.platform == "rocm" else None  # type: ignore[misc]
    elif gpu.platform == "npu":
        npu = types.ModuleType("torch.npu")
        _device_module(gpu, npu)
        torch.npu = npu  # type: ignore[attr-defined]
        sys.modules["torch.npu"] = npu
    else:
        raise ValueError(f"gpu {gpu.name}: platform {gpu.platform!r} is not cuda, rocm or npu")
    tools = Path(tempfile.mkdtemp(prefix=f"workbench-{gpu.name}-tools-"))
    _tool(tools, "nvidia-smi", _nvidia_smi(gpu) if gpu.platform == "cuda" else "#!/bin/sh\nexit 127\n")
    if gpu.platform == "rocm":
        _tool(tools, "rocminfo", _rocminfo(gpu))
        _tool(tools, "rocm-smi", _rocminfo(gpu))
    if gpu.platform == "npu":
        _tool(tools, "npu-smi", _npu_smi(gpu))
    os.environ["PATH"] = f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"
    return tools
