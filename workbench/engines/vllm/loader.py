"""A vLLM release's own modules on a CPU: what they import that a CPU machine lacks, stood in.

vLLM's parser, configuration and sizing code is plain Python over pydantic, transformers and
torch; what it also imports (the compiled ``vllm._C`` kernels, fastapi, openai, xgrammar, ...)
is not needed to read a command or size a table. ``install(package_dir, deps, gpu)`` arranges
this process so that the release's own files run:

* the release's package is registered bare (its ``__path__`` the unpacked wheel; its
  ``__init__``, which imports the whole engine, never runs), its small dependencies after the
  running environment's own paths (torch and numpy stay the project's);
* a module the release's files import and nothing can find becomes a permissive stand-in
  (``standins.StandInModule``), but only for the engine's own imports: a probe
  (``importlib.util.find_spec``, ``try: import x``) of another library, and the hardware probes
  (``libtpu``, ``amdsmi``, ``torch_npu``, ...), still find nothing, so vLLM's own platform
  detection runs as on a machine without them;
* the GPU: NVML (``pynvml``, and the copy vLLM vendors as ``vllm.third_party.pynvml``) answers
  as the ``Gpu`` given (its name, memory, compute capability, device count), on top of
  ``platform_standins`` (``torch.cuda``); vLLM's own detection then picks its CUDA platform;
* the compiled kernels: an op of a kernel library's namespace (``torch.ops._C.*``) that is not
  registered is a stand-in, and registering a fake (meta) implementation for it is skipped;
* Ray: importable and not initialized, as in a server that has just started in vLLM's image,
  whether or not this environment has Ray (``ray_standin``);
* the host is a GPU node: its memory is ``HOST_MEMORY`` (the workbench's assumption);
* a tensor the release creates on the GPU is a meta tensor (shape and dtype, no data: reading a
  value from one raises);
* the model registry inspects a model class in this process (vLLM runs that in a subprocess
  of its own, which would not have these stand-ins);
* a platform plugin among the extra paths (vllm-ascend, on an NPU ``Gpu``): vLLM's own plugin
  look-up (its ``vllm.platform_plugins`` entry point) finds it and makes its platform the
  current one, as on an Ascend machine; ``torch_npu`` is stood in for the plugin's files as for
  vLLM's, torch's private device takes the name ``npu`` (what ``torch_npu`` does at import), and
  ``torch.npu`` answers the device questions as the ``Gpu`` (``platform_standins``), any other
  attribute a stand-in.

Everything stood in is recorded (``LOG``), so a resolution can say what it did not run.
This changes the process for good, so it runs only in an engine process.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import traceback
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workbench.engines.store.gpus import Gpu

# Never stood in: imports whose success tells vLLM that a hardware platform or an out-of-tree
# plugin is present (or vLLM would find a TPU, an AMD GPU or an NPU here), and NVML (answered as
# the GPU). Triton is stood in for the release's own imports where it is not on the path (its
# probes, ``find_spec``, still find nothing, so vLLM takes its paths without it).
# Names of accelerator stacks (an import of one succeeds only on that hardware): never stood in either.
HARDWARE_WORDS = ("neuron", "tpu", "habana", "gaudi", "xla", "npu", "hpu", "spyre", "rbln", "mlu", "musa", "ipex", "rocm",
                  "amd", "hip")
NEVER_STOOD_IN = frozenset({
    "libtpu", "tpu_inference", "tpu_commons", "torch_xla", "amdsmi", "torch_npu", "vllm_ascend", "vllm_omni",
    "intel_extension_for_pytorch", "habana_frameworks", "neuronxcc", "torch_neuronx", "transformers_neuronx",
    "zentorch", "vllm_spyre", "vllm_gaudi", "pynvml",
})
NVML_MODULES = ("pynvml", "vllm.third_party.pynvml")

LOG: dict[str, set[str]] = {"modules": set(), "ops": set(), "fakes_skipped": set(), "meta_tensors": set(),
                            "inspection": set(), "ops_answered_false": set(), "reasoning_ids_left": set()}
HOST_MEMORY = 2 << 40  # the workbench's assumption: an 8-GPU node's host memory (a DGX H100 has 2 TB)
FACTORIES = ("zeros", "empty", "ones", "full", "arange", "tensor", "rand", "randn", "randint")


class _NvmlError(Exception):
    """``pynvml.NVMLError``: what a query the stand-in does not answer raises."""


def nvml_module(name: str, gpu: Gpu) -> types.ModuleType:
    """NVML as vLLM queries it, answering as ``gpu`` (one handle per device of a node)."""
    module = types.ModuleType(name)
    module.__file__ = f"<the workbench's NVML for {gpu.device_name}>"
    memory = types.SimpleNamespace(total=gpu.memory_bytes, free=gpu.memory_bytes, used=0)
    values: dict[str, Any] = {
        "NVMLError": _NvmlError, "NVML_P2P_CAPS_INDEX_NVLINK": 3, "NVML_P2P_STATUS_OK": 0,
        "nvmlInit": lambda *args: None, "nvmlShutdown": lambda *args: None,
        "nvmlDeviceGetCount": lambda: gpu.devices_per_node,
        "nvmlDeviceGetHandleByIndex": lambda index: int(index),
        "nvmlDeviceGetHandleByUUID": lambda uuid: int(str(uuid).rsplit("-", 1)[-1]),
        "nvmlDeviceGetIndex": lambda handle: handle,
        "nvmlDeviceGetName": lambda handle: gpu.device_name,
        "nvmlDeviceGetUUID": lambda handle: f"GPU-workbench-stand-in-{handle}",
        "nvmlDeviceGetCudaComputeCapability": lambda handle: gpu.capability,
        "nvmlDeviceGetMemoryInfo": lambda handle: memory,
        "nvmlDeviceGetP2PStatus": lambda a, b, c: 0,
        "nvmlSystemGetCudaDriverVersion": lambda: int(float(gpu.toolkit) * 1000),
        "nvmlSystemGetDriverVersion": lambda: "570.00",
    }
    for key, value in values.items():
        setattr(module, key, value)

    def missing(attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)

        def query(*args: Any) -> Any:
            raise _NvmlError(f"{attribute}: not answered by the workbench's stand-in for {gpu.device_name}")
        return query

    module.__getattr__ = missing  # type: ignore[method-assign]
    return module


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """NVML as the GPU (first on the path), and stand-ins for what the engine's files (and a
    platform plugin's) import and nothing else finds (last on the path)."""

    def __init__(self, roots: Sequence[Path], gpu: Gpu, last: bool, plugin: bool = False) -> None:
        self.roots, self.gpu, self.last = tuple(str(root) for root in roots), gpu, last
        # with its platform's plugin loaded, the NPU's own library is what the plugin's files import
        self.never = NEVER_STOOD_IN - {"torch_npu"} if plugin else NEVER_STOOD_IN
        self.hardware = tuple(w for w in HARDWARE_WORDS if w != "npu") if plugin else HARDWARE_WORDS

    def find_spec(self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None,
                  ) -> importlib.machinery.ModuleSpec | None:
        if not self.last:
            return importlib.machinery.ModuleSpec(name, self) if name in NVML_MODULES else None
        top = name.split(".")[0]
        if (top in sys.stdlib_module_names or top in self.never or any(w in top.lower() for w in self.hardware)
                or not self._engine_imports()):
            return None
        LOG["modules"].add(top)
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if spec.name in NVML_MODULES:
            return nvml_module(spec.name, self.gpu)
        from workbench.engines.sandbox.standins import StandInModule

        module = StandInModule(spec.name)
        module.__path__ = []
        module.__version__ = "0"  # type: ignore[attr-defined]  # a library that is not installed has no release
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass

    def _engine_imports(self) -> bool:
        """True for an ``import`` statement in the engine's own files; False for a probe
        (``importlib.util.find_spec``) or another library's import."""
        frame: types.FrameType | None = sys._getframe(2)
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename in ("<frozen importlib.util>",) or filename.endswith(("importlib/util.py",)):
                return False
            if not (filename.startswith("<frozen importlib") or filename.endswith("importlib/__init__.py")):
                return filename.startswith(self.roots)
            frame = frame.f_back
        return False


def platform_plugin(path: Path) -> str | None:
    """``name==version`` of the distribution at ``path`` that declares a vLLM platform plugin (a
    ``vllm.platform_plugins`` entry point: vllm-ascend's ``ascend = vllm_ascend:register``), if any."""
    for info in path.glob("*.dist-info"):
        points = info / "entry_points.txt"
        if points.exists() and "[vllm.platform_plugins]" in points.read_text():
            name, version = info.name.removesuffix(".dist-info").split("-", 1)
            return f"{name.replace('_', '-')}=={version}"
    return None


def _unbuilt_build_info(path: Path, gpu: Gpu) -> None:
    """vllm-ascend's ``_build_info`` module, where the release came as source (``sdists``) and was
    not built: its ``setup.py`` (``gen_build_info``) writes the file at build time from the
    ``SOC_VERSION`` it is built for, and the plugin reads the device family from it. Built here for
    the NPU the check models, as a build on that machine would be (``__soc_version__``, which the
    plugin's own ``device_type_from_soc_version`` maps)."""
    package = path / "vllm_ascend"
    if not package.is_dir() or (package / "_build_info.py").exists():
        return
    module = types.ModuleType("vllm_ascend._build_info")
    module.__soc_version__ = gpu.device_name  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module


def _npu_device() -> None:
    """What ``torch_npu`` does to torch at import, as far as a plugin's configuration code asks:
    the private device is named ``npu`` (so ``torch.device("npu")`` parses), and ``torch.npu``
    (``platform_standins``' answers) gives a stand-in for any other attribute (streams, events)."""
    import torch

    from workbench.engines.sandbox.standins import stand_in

    torch.utils.rename_privateuse1_backend("npu")  # type: ignore[attr-defined]
    module = sys.modules["torch.npu"]

    def missing(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return stand_in(f"torch.npu.{name}")

    module.__getattr__ = missing  # type: ignore[method-assign]


def _cuda_counts(gpu: Gpu) -> None:
    """What ``platform_standins`` leaves to torch itself: whether torch was built with CUDA and
    NVML's device count (vLLM counts devices with them). Set after torch's own modules that read
    them at import (dynamo, inductor) have loaded, so those keep torch's CPU answers."""
    import torch

    for name in ("torch._dynamo.device_interface", "torch._inductor.utils"):
        importlib.import_module(name)
    torch.cuda._is_compiled = lambda: True  # type: ignore[attr-defined]
    torch.cuda._device_count_nvml = lambda: gpu.devices_per_node  # type: ignore[attr-defined]


class _KernelOp:
    """An op of a kernel library that is not loaded. Called while a module of the release runs its
    import-time code (``CUTLASS_BLOCK_FP8_SUPPORTED = cutlass_scaled_mm_supports_block_fp8(...)``)
    it answers False, as a build without that kernel would (recorded); called by the release's code
    once loaded, it raises: nothing computed by a missing kernel can pass for an answer."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> bool:
        from workbench.engines.sandbox import standins

        if standins._strict_now():
            raise standins.StandInCalled(f"{self.name} is a compiled kernel and its library is not loaded here")
        LOG["ops_answered_false"].add(self.name)
        return False

    def __getattr__(self, name: str) -> Any:  # an overload (``.default``)
        if name.startswith("__"):
            raise AttributeError(name)
        return self


def _kernel_ops() -> None:
    """Ops of the kernel libraries (``torch.ops._C``, ``torch.ops._moe_C`` ...) that are not
    loaded: looking one up gives a ``_KernelOp`` (recorded), and a fake kernel registered for one
    is skipped (recorded): module-level code that registers or probes them then runs as it would
    with the library present, and a call that needs one fails."""
    import torch._ops
    import torch.library

    lookup = torch._ops._OpNamespace.__getattr__

    def op_or_stand_in(namespace: Any, op: str) -> Any:
        try:
            return lookup(namespace, op)
        except AttributeError:
            if not namespace.name.startswith("_") or op.startswith("__"):
                raise
            LOG["ops"].add(f"torch.ops.{namespace.name}.{op}")
            return _KernelOp(f"torch.ops.{namespace.name}.{op}")

    torch._ops._OpNamespace.__getattr__ = op_or_stand_in  # type: ignore[method-assign]
    register_fake = torch.library.register_fake

    def registered(qualname: str) -> bool:
        try:
            return bool(torch._C._dispatch_find_schema_or_throw(qualname.split(".")[0], ""))
        except RuntimeError:
            return False

    def register_fake_if_loaded(op_name: Any, func: Any = None, /, *args: Any, **kwargs: Any) -> Any:
        if isinstance(op_name, str) and op_name.split("::")[0].startswith("_") and not registered(op_name):
            LOG["fakes_skipped"].add(op_name)
            return func if func is not None else (lambda function: function)
        return register_fake(op_name, func, *args, **kwargs)

    torch.library.register_fake = register_fake_if_loaded  # type: ignore[assignment]


def _gpu_tensors_on_meta() -> None:
    """A tensor the release creates on the GPU (``torch.zeros(..., device="cuda")``, as some of its
    modules do at import) is a meta tensor: its shape and dtype, no data. Reading a value from one
    raises, so nothing computed on the stand-in GPU can pass for an answer."""
    import torch

    def on_meta(name: str, factory: Any) -> Any:
        def made(*args: Any, **kwargs: Any) -> Any:
            device = kwargs.get("device")
            if device is not None and str(device).startswith("cuda"):
                kwargs["device"] = "meta"
                LOG["meta_tensors"].add(f"torch.{name}")
            return factory(*args, **kwargs)
        return made

    for name in FACTORIES:
        setattr(torch, name, on_meta(name, getattr(torch, name)))


def _host_memory() -> None:
    """The host is a GPU node, not this machine: ``psutil.virtual_memory().total`` (vLLM checks
    its swap space and offload sizes against it) answers ``HOST_MEMORY``."""
    import psutil  # type: ignore[import-untyped]

    real = psutil.virtual_memory

    def node_memory(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        return found._replace(total=HOST_MEMORY, available=HOST_MEMORY)

    psutil.virtual_memory = node_memory


def _environment(cache: Path) -> None:
    """Offline, quiet, and vLLM's own cache (model-class facts it saves) under the workbench's."""
    os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                       "DO_NOT_TRACK": "1", "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "ERROR"),
                       "VLLM_CACHE_ROOT": str(cache), "TOKENIZERS_PARALLELISM": "false"})


def register_package(package_dir: Path) -> types.ModuleType:
    """The release's package, bare: its files load on import, and its ``__init__`` (which in
    early releases imports the whole engine) runs only when a module asks the package itself for
    a name (``from vllm import EngineArgs``)."""
    package = types.ModuleType(package_dir.name)
    package.__path__ = [str(package_dir)]
    init = package_dir / "__init__.py"
    package.__file__ = str(init)
    package.__package__ = package_dir.name
    package.__spec__ = importlib.machinery.ModuleSpec(package_dir.name, None, origin=str(init), is_package=True)
    package.__spec__.submodule_search_locations = [str(package_dir)]

    def run_init(name: str) -> Any:
        submodule = (package_dir / name).is_dir() or (package_dir / f"{name}.py").exists()
        if name.startswith("__") or submodule or package.__dict__.get("__workbench_init_ran__"):
            raise AttributeError(name)  # a submodule is imported, not looked up
        package.__dict__["__workbench_init_ran__"] = True
        del package.__dict__["__getattr__"]
        exec(compile(init.read_text(), str(init), "exec"), package.__dict__)  # noqa: S102 - the release's own __init__
        return getattr(package, name)

    package.__getattr__ = run_init  # type: ignore[method-assign]
    sys.modules[package_dir.name] = package
    return package


def install(package_dir: Path, deps: Path, gpu: Gpu, extra_paths: Sequence[Path] = ()) -> Path:
    """Arrange this process to run the vLLM release unpacked at ``package_dir`` (see the module);
    returns the folder of the stand-in device tools (``platform_standins``)."""
    from workbench.engines.sandbox import platform_standins
    from workbench.engines.vllm import ray_standin

    tools = platform_standins.install(gpu)
    _cuda_counts(gpu)
    _environment(package_dir.parent.parent / "vllm-cache")
    sys.path.insert(0, str(package_dir.parent))  # the release's dist-info too (vLLM reads its own version)
    for path in (deps, *extra_paths):
        sys.path.append(str(path))
    register_package(package_dir)
    plugins = [path for path in extra_paths if platform_plugin(path) is not None]
    if plugins and gpu.platform == "npu":
        _npu_device()
    for path in plugins:
        _unbuilt_build_info(path, gpu)
    roots = (package_dir.parent, *plugins)
    sys.meta_path.insert(0, _Finder(roots, gpu, last=False))
    sys.meta_path.append(_Finder(roots, gpu, last=True, plugin=bool(plugins)))
    ray_standin.install()
    _kernel_ops()
    _gpu_tensors_on_meta()
    _host_memory()
    return tools


def model_inspection_in_process() -> bool:
    """The model registry's subprocess (``_run_in_subprocess``) run in this process instead;
    False when the release has none (it inspects in process already)."""
    try:
        registry = importlib.import_module("vllm.model_executor.models.registry")
    except ModuleNotFoundError:  # early releases: the registry is in models/__init__.py, in process
        return False
    if not hasattr(registry, "_run_in_subprocess"):
        return False
    package = Path(str(registry.__file__)).resolve().parents[2]  # .../vllm

    def in_process(function: Any) -> Any:
        try:
            return function()
        except Exception as error:  # noqa: BLE001 - the registry logs it and says "failed to be inspected"
            text = str(error).strip().splitlines()[0] if str(error).strip() else ""
            LOG["inspection"] = {f"{type(error).__name__}: {text}{_release_line(error, package)}"}
            raise

    setattr(registry, "_run_in_subprocess", in_process)  # noqa: B010
    # A platform that is not CUDA (a plugin's NPU) loads the class itself (``_try_load_model_cls``):
    # its failure is recorded the same way.
    lazy = getattr(registry, "_LazyRegisteredModel", None)
    load = getattr(lazy, "load_model_cls", None)
    if lazy is not None and load is not None and not getattr(load, "workbench_records", False):
        def load_model_cls(self: Any) -> Any:
            return in_process(lambda: load(self))

        load_model_cls.workbench_records = True  # type: ignore[attr-defined]
        setattr(lazy, "load_model_cls", load_model_cls)  # noqa: B010
    return True


class TokenizerFilesMissing(OSError):
    """The engine asked for the tokenizer of a model whose folder here holds no tokenizer file."""


TOKENIZER_ABSENT: set[str] = set()  # the names and paths of this request's model when it has no tokenizer file


def tokenizers_need_files() -> None:
    """A tokenizer asked for a model of ``TOKENIZER_ABSENT`` raises ``TokenizerFilesMissing``.

    A check reads only the model's config.json. Asked for a tokenizer with no file, recent
    transformers builds one with an empty vocabulary rather than failing, and the engine's code
    then refuses what the real tokenizer would pass (vLLM 0.34.0's reasoning parser "could not
    locate think start/end tokens"): the engine refusing for want of a file, not the command.
    Every tokenizer class loads through ``PreTrainedTokenizerBase.from_pretrained``."""
    base = importlib.import_module("transformers.tokenization_utils_base").PreTrainedTokenizerBase
    original = base.from_pretrained.__func__
    if getattr(original, "workbench_needs_files", False):
        return

    def from_pretrained(cls: type, name: Any, *args: Any, **kwargs: Any) -> Any:
        if str(name) in TOKENIZER_ABSENT or os.path.realpath(str(name)) in TOKENIZER_ABSENT:
            raise TokenizerFilesMissing(f"{name}: the engine loads the model's tokenizer, and no tokenizer file is here")
        return original(cls, name, *args, **kwargs)

    from_pretrained.workbench_needs_files = True  # type: ignore[attr-defined]
    base.from_pretrained = classmethod(from_pretrained)


def reasoning_ids_without_tokenizer() -> bool:
    """The reasoning parser's token ids left uninitialized when the model has no tokenizer file here.

    From 0.20.0 on, ``VllmConfig.__post_init__`` ends by calling
    ``ReasoningConfig.initialize_token_ids`` (``config/reasoning.py``), which loads the tokenizer to
    encode the parser's think start/end strings. Those ids steer the thinking budget at run time and
    size no buffer; the engine itself leaves them uninitialized (and warns) when the strings are
    missing. So a ``TokenizerFilesMissing`` inside it leaves them so too, and ``LOG`` records where,
    for the check's notes; every other tokenizer load still stops the check. False when the release
    has no such method."""
    try:
        reasoning = importlib.import_module("vllm.config.reasoning")
    except ModuleNotFoundError:
        return False
    config_class = getattr(reasoning, "ReasoningConfig", None)
    original = getattr(config_class, "initialize_token_ids", None)
    if original is None:
        return False
    if getattr(original, "workbench_without_tokenizer", False):
        return True
    package = Path(str(reasoning.__file__)).parents[2]

    def initialize_token_ids(self: Any, model_config: Any) -> None:
        try:
            original(self, model_config)
        except TokenizerFilesMissing as error:
            lines = [f.lineno for f in traceback.extract_tb(error.__traceback__) if f.filename == reasoning.__file__]
            where = f"{Path(str(reasoning.__file__)).relative_to(package)}:{lines[0]}" if lines else "?"
            LOG["reasoning_ids_left"].add(f"ReasoningConfig.initialize_token_ids ({where})")

    initialize_token_ids.workbench_without_tokenizer = True  # type: ignore[attr-defined]
    setattr(config_class, "initialize_token_ids", initialize_token_ids)  # noqa: B010
    return True


def _release_line(error: BaseException, package: Path) -> str:
    """`` (vllm/path.py:line)`` of the innermost frame of the release's own code the error passed."""
    inside = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith(str(package) + "/")]
    if not inside:
        return ""
    return f" ({Path(inside[-1].filename).relative_to(package.parent)}:{inside[-1].lineno})"


def stood_in() -> dict[str, list[str]]:
    """What was stood in so far: modules, kernel ops looked up, fake registrations skipped."""
    return {key: sorted(values) for key, values in LOG.items()}
