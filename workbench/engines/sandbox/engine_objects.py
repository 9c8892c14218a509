"""Running an engine object's capture-time sizing on a CPU without its server (worker process only).

``init_cuda_graph_state`` is where an attention backend sizes the buffers its graphs read. It
needs the object its ``__init__`` made, and ``__init__`` needs a model runner, a GPU and the
attention libraries. So the object is made with ``object.__new__`` and given the settings of the
state being measured (``attributes``: ``max_context_len``, ``page_size``, the speculative
settings), and the method is run:

* on the **meta device** (``on_meta``): every tensor it makes has its shape and no storage, so a
  1M-token context times 256 requests costs nothing, and a hard-coded ``device="cuda"`` works;
* **filling what it reads** (``call_filling``): an attribute it reads that the object lacks is
  taken from the engine's own ``__init__`` when one statement there assigns it from attributes
  the object already has (``self.max_num_pages = (self.max_context_len + self.page_size - 1) //
  self.page_size``: the engine's statement is executed, and its line is recorded), else it is set
  to None and recorded as such (``Filled``), so a reader sees every setting the number rests on.

Then ``tensors_of`` lists every tensor the object holds, by attribute path, with its shape.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import inspect
import textwrap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

DEVICE_KWARGS = ("device",)


class _MetaDevice(TorchFunctionMode):
    """Every ``device=`` a torch function is given becomes ``meta``."""

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: Mapping[str, Any] | None = None) -> Any:
        kwargs = dict(kwargs or {})
        if kwargs.get("device") is not None:
            kwargs["device"] = "meta"
        if getattr(func, "__name__", "") in ("to", "cuda", "npu") and args and isinstance(args[0], torch.Tensor):
            return args[0]  # ``.to("cuda")`` / ``.cuda()``: stays where it is
        return func(*args, **kwargs)


@contextlib.contextmanager
def on_meta() -> Iterator[None]:
    with _MetaDevice():
        yield


@dataclass
class Filled:
    """What ``call_filling`` had to give the object: from the engine's ``__init__`` (name ->
    ``file:line``) or None (the names nothing assigned)."""

    from_init: dict[str, str] = field(default_factory=dict)
    as_none: list[str] = field(default_factory=list)

    def note(self) -> str:
        parts = [f"{name} from {where}" for name, where in sorted(self.from_init.items())]
        if self.as_none:
            parts.append("None: " + ", ".join(sorted(self.as_none)))
        return "; ".join(parts)


def make(cls: type, attributes: Mapping[str, Any]) -> Any:
    """``cls`` made without ``__init__``, holding ``attributes``."""
    obj: Any = object.__new__(cls)
    for name, value in attributes.items():
        setattr(obj, name, value)
    return obj


@functools.cache
def _init_tree(init: Any) -> tuple[ast.AST, int] | None:
    """The parsed source of an ``__init__`` and its first line (parsed once per class)."""
    try:
        lines, start = inspect.getsourcelines(init)
    except (OSError, TypeError):
        return None
    return ast.parse(textwrap.dedent("".join(lines))), start


def _init_assignment(cls: type, name: str, have: Callable[[str], bool]) -> tuple[ast.expr, str, dict[str, Any]] | None:
    """The first ``self.<name> = <expr>`` in the ``__init__`` of ``cls`` or its bases whose
    expression reads only ``self``'s attributes the object has and the module's globals."""
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or not inspect.isfunction(init):
            continue
        parsed = _init_tree(init)
        if parsed is None:
            continue
        tree, start = parsed
        module_globals = init.__globals__
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target = node.targets[0]
            if not (isinstance(target, ast.Attribute) and target.attr == name
                    and isinstance(target.value, ast.Name) and target.value.id == "self"):
                continue
            if _readable(node.value, have, module_globals):
                where = f"{inspect.getsourcefile(init)}:{start + node.lineno - 1}"
                return node.value, where, module_globals
    return None


def _readable(expr: ast.expr, have: Callable[[str], bool], module_globals: Mapping[str, Any]) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            if not have(node.attr):
                return False
        elif isinstance(node, ast.Name) and node.id != "self" and node.id not in module_globals \
                and not hasattr(builtins, node.id):
            return False
    return True


def call_filling(obj: Any, method: str, *args: Any, package_root: str = "", limit: int = 64) -> tuple[Any, Filled]:
    """``obj.<method>(*args)`` on the meta device, giving ``obj`` each attribute it lacks (see the
    module note). Exceptions other than a missing attribute of ``obj`` propagate."""
    filled = Filled()
    for _ in range(limit):
        try:
            with on_meta():
                return getattr(obj, method)(*args), filled
        except NameError as error:  # a module global the engine's __init__ sets at start-up (``global X``)
            module = inspect.getmodule(getattr(type(obj), method))
            name = getattr(error, "name", None)
            if module is None or not name or not _set_at_run_time(module, name):
                raise
            setattr(module, name, None)
            filled.as_none.append(f"{module.__name__}.{name}")
        except AttributeError as error:
            name = getattr(error, "name", None)
            if getattr(error, "obj", None) is not obj or not name or hasattr(obj, name):
                raise
            found = _init_assignment(type(obj), name, lambda attr: attr in vars(obj))
            if found is None:
                setattr(obj, name, None)
                filled.as_none.append(name)
                continue
            expr, where, module_globals = found
            with on_meta():
                value = eval(compile(ast.Expression(expr), where, "eval"), dict(module_globals), {"self": obj})  # noqa: S307 - the engine's own statement
            setattr(obj, name, value)
            filled.from_init[name] = where.split(package_root, 1)[-1].lstrip("/") if package_root else where
    raise RuntimeError(f"{method} read more than {limit} attributes the object lacks")


def _set_at_run_time(module: Any, name: str) -> bool:
    """Whether ``name`` is a global of ``module`` that a function assigns (``global NAME``) and
    the module's top level does not: set when the server starts, absent here."""
    return name in _declared_global(module)


@functools.cache
def _declared_global(module: Any) -> frozenset[str]:
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return frozenset()
    return frozenset(n for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names)


def tensors_of(obj: Any, depth: int = 3) -> dict[str, tuple[int, ...]]:
    """Every tensor ``obj`` holds, by attribute path (``decode_cuda_graph_metadata.page_table``,
    ``cuda_graph_kv_indices[0]``), with its shape; through dicts, lists and tuples ``depth`` deep."""
    found: dict[str, tuple[int, ...]] = {}

    def walk(value: Any, path: str, level: int) -> None:
        if isinstance(value, torch.Tensor):
            found[path] = tuple(value.shape)
        elif level < depth and isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}.{key}", level + 1)
        elif level < depth and isinstance(value, list | tuple):
            for i, item in enumerate(value[:4]):
                walk(item, f"{path}[{i}]", level + 1)

    for name, value in vars(obj).items():
        walk(value, name, 0)
    return found
