"""Loading an engine's modules on a CPU: a bare package for the wheel, stand-ins for what is missing.

The engine's top-level ``sglang/__init__.py`` imports the whole server; the modules conformance
runs need only torch and a few small packages. So the package is registered bare (its
``__path__`` is the unpacked wheel, its ``__init__`` never runs), and every accelerator library a
module imports at its top (torch_npu, sgl_kernel, flashinfer, ...) is given a permissive
stand-in: any attribute is another stand-in, which can be called, subclassed, used as a
decorator, indexed and iterated (as nothing). A function that really *needs* one of them then
fails when called, which conformance reports as a skipped row, not as an agreement.

This mutates ``sys.modules`` and ``sys.meta_path`` for good, so it runs only in the conformance
worker, a subprocess of its own per engine version (``worker.py``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import re
import sys
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

# Top-level modules that are accelerator libraries or heavy optional stacks: never importable on
# a plain CPU machine, so they are always stood in rather than searched for. ``torchair`` (Ascend's
# graph compiler): releases up to 0.5.10 build a ``torch.compile`` backend from it at import where
# ``torch.npu`` is available (``get_compiler_backend``), which on the stand-in NPU it is.
ALWAYS_STAND_IN = ("torch_npu", "torchair", "sgl_kernel", "sgl_kernel_npu", "flashinfer", "aiter", "vllm", "torchvision",
                   "deep_gemm", "flash_mla", "flash_attn", "cuda", "cutlass",
                   "nvidia", "mooncake", "triton_kernels", "tilelang", "xgrammar", "outlines",
                   "zmq",
                   "uvloop", "fastapi", "uvicorn", "aiohttp", "setproctitle",
                   "numba", "einops", "sentencepiece", "tiktoken", "quack", "cuda_python",
                   "pynvml", "ray", "prometheus_client", "partial_json_parser", "compressed_tensors",
                   "gguf", "modelscope", "openai", "interegular", "llguidance", "blobfile",
                   "hf_transfer", "torchao", "decord", "soundfile", "av", "scipy", "sklearn",
                   "kernels", "apache_tvm_ffi", "tvm_ffi", "nvtx", "mamba_ssm", "causal_conv1d",
                   "fla", "torch_memory_saver", "sgl_fa3", "flash_attn_interface", "jinja2")


# While modules import, calls into stand-ins (decorators with arguments, ``tl.constexpr(8)``,
# ``get_logger(__name__)``) return more stand-ins; once loading is over (``strict()``) a call
# raises, so no engine function can compute an answer out of a library that is not there.
_STRICT = [False]


def strict() -> None:
    _STRICT[0] = True


def lenient() -> None:
    """Back to import mode, before the next group of engine modules loads."""
    _STRICT[0] = False


# Packages whose modules may still be imported after loading (vLLM imports a model's modules only
# when it inspects that model): while one of their files runs its module-level code, calls into
# stand-ins stay lenient, as in import mode.
_LAZY_PACKAGES: list[str] = []


def lenient_while_importing(package_dir: Path) -> None:
    _LAZY_PACKAGES.append(str(package_dir))


def _strict_now() -> bool:
    if not _STRICT[0]:
        return False
    if not _LAZY_PACKAGES:
        return True
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_code.co_filename.startswith(tuple(_LAZY_PACKAGES)):
            return False
        frame = frame.f_back  # type: ignore[assignment]
    return True


class StandInCalled(RuntimeError):
    """A stand-in was called as a function: the engine code needs the real library."""


# Names whose use must fail as on a machine without the device: engine code probes them inside
# ``try`` and takes its CPU path on the exception (``triton.runtime.driver.active`` in fla/utils).
NO_DEVICE = frozenset({"triton.runtime.driver.active"})


class StandInMeta(type):
    """Classes whose missing class attributes are stand-ins too (``torch_npu.npu.Event``)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if f"{cls.__qualname__}.{name}" in NO_DEVICE:
            raise RuntimeError(f"{cls.__qualname__}.{name}: no device here (a stand-in)")
        return stand_in(f"{cls.__qualname__}.{name}")

    def __getitem__(cls, item: object) -> Any:
        return cls

    def __iter__(cls) -> Iterator[Any]:
        return iter(())

    def __bool__(cls) -> bool:
        return False

    def __instancecheck__(cls, instance: object) -> bool:
        # A function a stand-in decorated (``@triton.jit``) is what that library would have made of
        # it (``isinstance(fn, triton.runtime.jit.JITFunction)`` at import)
        return isinstance(instance, Decorated) or type.__instancecheck__(cls, instance)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        # Used as a decorator (``@torch_npu.something`` or ``@triton.jit``): give the function back.
        strict_now = _strict_now()
        if not strict_now and len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], StandInMeta):
            return Decorated(args[0], cls.__qualname__)
        if cls.__dict__.get("_direct", False) and strict_now:
            # The engine really calls the missing library: whatever it computed would be made up.
            raise StandInCalled(f"{cls.__qualname__} is a stand-in (the library is not installed)")
        return super().__call__(*args, **kwargs)  # an engine class that subclasses a stand-in


class Decorated:
    """A function decorated by a stand-in (``@triton.jit``): callable as itself, but launching it
    as a kernel (``kernel[grid](...)``) needs the real library, so that raises StandInCalled."""

    def __init__(self, function: Any, decorator: str) -> None:
        self.function = function
        self.fn = function  # what a JITFunction calls the function it wraps
        self.decorator = decorator
        self.__name__ = getattr(function, "__name__", "function")
        self.__doc__ = getattr(function, "__doc__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def __getitem__(self, grid: object) -> Any:
        if not _strict_now():
            return self
        raise StandInCalled(f"{self.__name__} is a {self.decorator} kernel and that library is not installed")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.function, name)


class StandInBase(metaclass=StandInMeta):
    def __init_subclass__(cls, **kwargs: Any) -> None:  # ``class X(TypedDictStandIn, total=False)``
        pass

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """Engine pydantic models with a stood-in field type (xgrammar's) accept anything."""
        from pydantic_core import core_schema  # type: ignore[import-not-found]  # the engine's cache, not ours

        return core_schema.any_schema()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return stand_in(f"{type(self).__qualname__}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not _strict_now():
            if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], StandInMeta):
                return Decorated(args[0], type(self).__qualname__)  # ``@triton.jit(do_not_specialize=...)``
            return stand_in(f"{type(self).__qualname__}()")
        raise StandInCalled(f"{type(self).__qualname__}() is a stand-in (the library is not installed)")


def stand_in(name: str) -> Any:
    """A permissive class named ``name``."""
    return StandInMeta(name, (StandInBase,), {"__qualname__": name, "__module__": "standin", "_direct": True})


class StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = stand_in(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StandInLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = StandInModule(spec.name)
        module.__path__ = []  # a package, so ``import torch_npu.contrib`` works too
        if spec.name == "triton":
            # Older than any real release: modules that compare it at import (the scheduler's mamba
            # kernels) take their no-triton branch instead of failing to import.
            module.__version__ = "0.0.0"  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class StandInFinder(importlib.abc.MetaPathFinder):
    """Finds the stood-in top-level names and everything under them."""

    def __init__(self, names: Iterable[str], engine_dir: Path, visible: Iterable[str] = ()) -> None:
        self.names = frozenset(names)
        self.visible = frozenset(visible)  # stood in for every importer, not only the engine's files
        self.engine_dir = str(engine_dir)
        self.used: set[str] = set()

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None,
                  ) -> importlib.machinery.ModuleSpec | None:
        top = fullname.split(".")[0]
        if top not in self.names:
            return None
        # Submodules of a stood-in package are stand-ins for everyone, or they would not resolve.
        if top not in self.visible and not isinstance(sys.modules.get(top), StandInModule) and not self._engine_imports():
            return None
        self.used.add(fullname.split(".")[0])
        return importlib.machinery.ModuleSpec(fullname, _StandInLoader(), is_package=True)

    def _engine_imports(self) -> bool:
        """True when the code asking is the engine's own file (or a stand-in's submodule).

        Other libraries probe for optional ones (transformers asks ``find_spec("torchvision")``
        and then reads its version); they must keep seeing them as absent.
        """
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if not (name.startswith("<frozen importlib") or name.endswith(("importlib/__init__.py",
                                                                           "importlib/util.py"))):
                return name.startswith(self.engine_dir) or name == __file__
            frame = frame.f_back  # type: ignore[assignment]
        return False


def _reexports(init: Path, package: str) -> Callable[[str], Any]:
    """The bare package's ``__getattr__``: a name its own ``__init__`` re-exports from a submodule
    (``from sglang.srt.x import Name`` or ``Name = LazyImport("sglang.srt.x", "Name")``), imported from
    that submodule on first use, as the ``__init__`` would give it (0.5.3's modules do
    ``from sglang import ServerArgs``); the ``__init__`` itself never runs."""
    names: dict[str, tuple[str, str]] = {}
    tree = ast.parse(init.read_text()) if init.exists() else ast.Module(body=[], type_ignores=[])
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update({alias.asname or alias.name: (node.module, alias.name) for alias in node.names})
        elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
              and getattr(node.value.func, "id", "") == "LazyImport" and len(node.value.args) == 2
              and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.value.args)):
            module, attr = (str(a.value) for a in node.value.args)  # type: ignore[attr-defined]
            names.update({t.id: (module, attr) for t in node.targets if isinstance(t, ast.Name)})

    def lookup(name: str) -> Any:
        if name not in names or not names[name][0].startswith(f"{package}."):
            raise AttributeError(f"module {package!r} has no attribute {name!r} (its __init__ is not run)")
        module, attr = names[name]
        return getattr(importlib.import_module(module), attr)
    return lookup


def install(package_dir: Path, deps: Path, extra_paths: Sequence[Path] = (), real: Sequence[str] = (),
            visible: Sequence[str] = ()) -> StandInFinder:
    """Register ``package_dir`` as a bare package and the stand-ins; return the finder.

    ``real`` names libraries from ``ALWAYS_STAND_IN`` that are present and wanted for real
    (``triton`` where it is installed). ``visible`` names stand-ins every importer gets, the
    libraries' probes included: ``torchvision`` for the releases whose pinned transformers registers
    the engine's image processors only when it finds torchvision and then imports it (0.5.21), while
    the cache's torchvision is a CUDA build that cannot load on a CPU torch. Its folder on
    ``extra_paths`` still gives its metadata (the version transformers reads).
    """
    # After the running environment's own paths: torch and numpy stay the project's, the cache
    # folders only fill in what is missing.
    for path in (deps, *extra_paths):
        sys.path.append(str(path))
    name = package_dir.name
    package = types.ModuleType(name)
    package.__path__ = [str(package_dir)]
    package.__file__ = None
    package.__getattr__ = _reexports(package_dir / "__init__.py", name)  # type: ignore[method-assign]
    sys.modules[name] = package
    names = set(ALWAYS_STAND_IN) - set(real)
    if "triton" not in real:
        names.add("triton")
    finder = StandInFinder(names | set(visible), package_dir, visible)
    sys.meta_path.insert(0, finder)
    return finder


# ---- a stand-in named in a message -------------------------------------------------------------------

# The marks a stand-in leaves in any text made of it: its class's module (``standin``: the repr
# ``<standin.vllm.AQLMConfig object at 0x...>``), the stand-ins' class names (``StandInCalled``,
# ``RunnerStandIn``), this module's name (``standins``) and the words of their own errors ("is a
# stand-in"). "standin" only as a word of its own: "outstanding" is not a stand-in.
_STAND_IN_MARK = re.compile(r"(?<![A-Za-z])standins?(?![a-z])|StandIn|[Ss]tand-in")


def names_stand_in(text: str) -> bool:
    """True when ``text`` names a stand-in: whatever it says came out of a library or device this
    machine does not have, not out of the engine's reading of a command."""
    return _STAND_IN_MARK.search(text) is not None


def stand_in_named(error: BaseException) -> str | None:
    """The first text of ``error`` naming a stand-in (its type's name, its message, the repr of what
    it carries, then the same of the exceptions it was raised from or while handling), or None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for text in (type(current).__name__, str(current), *(repr(arg) for arg in current.args)):
            if names_stand_in(text):
                return text
        current = current.__cause__ or current.__context__
    return None
