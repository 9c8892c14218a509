"""The GPU a check assumes, stood in for in the engine process: ``install(gpu)``.

An engine picks defaults by the device it runs on (the attention backend by compute capability,
CUDA-graph batch sizes and memory fractions by total memory). On a CPU machine those questions
get the answers of the ``Gpu`` the check was given:

* ``torch.cuda`` (CUDA and ROCm): ``is_available``, ``device_count``, ``get_device_name``,
  ``get_device_capability``, ``get_device_properties``, ``mem_get_info``; ``torch.version.cuda``
  or ``torch.version.hip`` is the GPU's toolkit version.
* ``torch.npu`` (Ascend): the same questions on the NPU module the engine probes; every other
  attribute ``torch_npu`` would add (``Stream``, ``Event``, ``NPUGraph``, ``current_stream``) is a
  permissive stand-in (``standins.StandInModule``), which the engine's start-up may name (a field's
  annotation, ``GraphCaptureContext.stream: torch.npu.Stream``) but whose use computes nothing.
* ``torch.xpu`` (Intel): the same questions, and the properties SGLang reads on XPU
  (``has_fp64``, which ``xpu_has_xmx_support`` takes for XMX; ``torch.cuda`` stays unavailable, so
  SGLang's platform discovery picks its ``XpuSRTPlatform``).
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

from workbench.engines.sandbox.standins import StandInModule
from workbench.engines.store.gpus import Gpu


def _properties(gpu: Gpu) -> types.SimpleNamespace:
    major, minor = gpu.capability
    return types.SimpleNamespace(
        name=gpu.device_name, total_memory=gpu.memory_bytes, major=major, minor=minor,
        multi_processor_count=gpu.multiprocessors, gcnArchName=gpu.arch or "", is_integrated=False,
        L2_cache_size=50 << 20, uuid="stand-in", warp_size=64 if gpu.platform == "rocm" else 32,
        has_fp64=gpu.fp64, max_compute_units=gpu.multiprocessors, platform_name=gpu.device_name,
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
        "memory_allocated": lambda device=None: 0,
        "max_memory_allocated": lambda device=None: 0,
        "is_bf16_supported": lambda *args, **kwargs: True,
    }
    for name, value in values.items():
        setattr(module, name, value)


def _tool(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _nvidia_smi(gpu: Gpu) -> str:
    """``nvidia-smi --query-gpu=a,b --format=csv,noheader,nounits``: one line per device (a shell
    script: engines run it once a request, and a Python one would cost a tenth of a second)."""
    values = {"memory.total": str(gpu.memory_mib), "memory.used": "0", "memory.free": str(gpu.memory_mib),
              "name": gpu.device_name, "compute_cap": f"{gpu.capability[0]}.{gpu.capability[1]}",
              "count": str(gpu.devices_per_node), "driver_version": "570.00", "index": "$i"}
    cases = "\n".join(f"      {name}) v=\"{value}\" ;;" for name, value in values.items())
    return f"""#!/bin/sh
q=""
for a in "$@"; do case "$a" in --query-gpu=*) q="${{a#--query-gpu=}}" ;; esac; done
if [ -z "$q" ]; then echo "stand-in nvidia-smi: {gpu.device_name} x {gpu.devices_per_node} (workbench)"; exit 0; fi
i=0
while [ "$i" -lt {gpu.devices_per_node} ]; do
  line=""
  for f in $(echo "$q" | tr ',' ' '); do
    case "$f" in
{cases}
      *) v="[N/A]" ;;
    esac
    line="${{line:+$line, }}$v"
  done
  echo "$line"
  i=$((i + 1))
done
"""


def _rocminfo(gpu: Gpu) -> str:
    kib = gpu.memory_mib * 1024
    agent = f"  Name: {gpu.arch}\\n  Pool 1\\n    Segment: GLOBAL\\n    Size: {kib}(0x0) KB\\n"
    return f"#!{sys.executable}\nprint(\"{agent}\" * {gpu.devices_per_node})\n"


def _npu_smi(gpu: Gpu) -> str:
    return f"#!{sys.executable}\nprint('stand-in npu-smi: {gpu.device_name} x {gpu.devices_per_node} (workbench)')\n"


def _host_cpu(torch: Any) -> None:
    """The host CPU questions older releases ask through torch internals this torch no longer has
    (``torch._C._cpu._is_amx_tile_supported``, asked for the CPU backend): no AMX, the answer of a
    CPU without it. Only a missing function is added; nothing the running torch has is changed."""
    cpu = torch._C._cpu
    if not hasattr(cpu, "_is_amx_tile_supported"):
        cpu._is_amx_tile_supported = lambda: False


# Operator namespaces of the accelerator libraries the engine process stands in for (standins.py).
STOOD_IN_OPS = ("sgl_kernel", "flashinfer", "vllm", "_C", "_moe_C", "npu", "aiter", "torch_npu", "torchvision")


def _fake_registrations(torch: Any) -> None:
    """``torch.library.register_fake("sgl_kernel::op")`` at a module's top registers a shape
    function for an operator of a library that is not here: the operator does not exist, and the
    registration raises at import. For those namespaces a failed registration leaves the function
    unregistered (it would only ever describe a kernel that cannot run here)."""
    library = torch.library
    original = library.register_fake
    if getattr(original, "workbench_stood_in", False):
        return

    def register_fake(op: Any, func: Any = None, /, *args: Any, **kwargs: Any) -> Any:
        namespace = op.split("::", 1)[0] if isinstance(op, str) else ""
        if namespace not in STOOD_IN_OPS:
            return original(op, func, *args, **kwargs)

        def apply(function: Any) -> Any:
            try:
                return original(op, function, *args, **kwargs)
            except RuntimeError as error:  # "operator sgl_kernel::x does not exist"
                if "does not exist" not in str(error):
                    raise
                return function

        return apply if func is None else apply(func)

    register_fake.workbench_stood_in = True  # type: ignore[attr-defined]
    library.register_fake = register_fake


def install(gpu: Gpu) -> Path:
    """Stand in for ``gpu`` in this process; returns the folder of the stand-in tools (on ``PATH``)."""
    import torch

    _host_cpu(torch)
    _fake_registrations(torch)
    if gpu.platform in ("cuda", "rocm"):
        _device_module(gpu, torch.cuda)
        torch.version.cuda = gpu.toolkit if gpu.platform == "cuda" else None  # type: ignore[misc]
        torch.version.hip = gpu.toolkit if gpu.platform == "rocm" else None  # type: ignore[misc]
    elif gpu.platform == "xpu":
        _device_module(gpu, torch.xpu)  # torch.cuda stays unavailable: the engine finds an XPU only
    elif gpu.platform == "npu":
        npu = StandInModule("torch.npu")  # what torch_npu adds beyond the questions: stand-ins
        _device_module(gpu, npu)
        torch.npu = npu  # type: ignore[attr-defined]
        sys.modules["torch.npu"] = npu
    else:
        raise ValueError(f"gpu {gpu.name}: platform {gpu.platform!r} is not cuda, rocm, npu or xpu")
    tools = Path(tempfile.mkdtemp(prefix=f"workbench-{gpu.name}-tools-"))
    _tool(tools, "nvidia-smi", _nvidia_smi(gpu) if gpu.platform == "cuda" else "#!/bin/sh\nexit 127\n")
    if gpu.platform == "rocm":
        _tool(tools, "rocminfo", _rocminfo(gpu))
        _tool(tools, "rocm-smi", _rocminfo(gpu))
    if gpu.platform == "npu":
        _tool(tools, "npu-smi", _npu_smi(gpu))
    os.environ["PATH"] = f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"
    return tools
