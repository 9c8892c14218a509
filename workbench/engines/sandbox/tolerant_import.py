"""Importing an engine module whose top level needs a device, statement by statement (worker only).

Some attention modules do device work at import: AITER's ``aiter_backend.py`` computes
``torch.finfo`` of an AITER dtype at its top level, which a stand-in cannot be. The classes in
such a module are still plain Python. ``import_tolerant`` runs the module's top-level statements
one at a time in a fresh module object and skips each statement that raises, saying which
(``file:line: error``), so the classes that do not depend on a skipped name are the engine's own
and can be measured; one that does fails when it is used, as any missing name would.
"""

from __future__ import annotations
import __future__

import ast
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType


def import_tolerant(name: str) -> tuple[ModuleType, list[str]]:
    """Module ``name`` (imported normally when that works) and the statements skipped."""
    try:
        return importlib.import_module(name), []
    except Exception:  # noqa: BLE001 - the statement-by-statement import below says what failed
        sys.modules.pop(name, None)
    parent = name.rpartition(".")[0]
    if parent:
        importlib.import_module(parent)
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"no module {name}", name=name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    return module, exec_tolerant(module, spec.origin)


def exec_tolerant(module: ModuleType, origin: str) -> list[str]:
    """Run the source at ``origin`` in ``module`` one top-level statement at a time (see the
    module note); the statements skipped, each as ``file:line: error``."""
    tree = ast.parse(Path(origin).read_text(encoding="utf-8"))
    flags = 0
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            for alias in node.names:
                flags |= getattr(__future__, alias.name).compiler_flag
    imported_under_guards = _guarded_imports(tree)
    skipped = []
    for node in tree.body:
        code = compile(ast.Module(body=[node], type_ignores=[]), origin, "exec", flags=flags, dont_inherit=True)
        for _ in range(8):  # each retry resolves one more name the statement needs
            try:
                exec(code, module.__dict__)  # noqa: S102 - the engine's own module, one statement at a time
                break
            except NameError as error:
                if not _resolve(module, getattr(error, "name", None), imported_under_guards):
                    skipped.append(_skip_note(origin, node, error))
                    break
            except Exception as error:  # noqa: BLE001 - skipped and recorded
                skipped.append(_skip_note(origin, node, error))
                break
    return skipped


class TolerantFinder(importlib.abc.MetaPathFinder):
    """Every module of the engine's package loaded by ``exec_tolerant`` (a release whose import
    chain meets a statement this torch or this machine cannot run: 0.5.0rc2 asks torch for
    ``_is_amx_tile_supported`` at import); ``skipped`` collects what was left out, everywhere."""

    def __init__(self, package_dir: Path) -> None:
        self.package_dir = str(package_dir)
        self.skipped: list[str] = []

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None,
                  ) -> importlib.machinery.ModuleSpec | None:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec") or isinstance(finder, TolerantFinder):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.origin and spec.origin.startswith(self.package_dir) and spec.origin.endswith(".py"):
                    spec.loader = _TolerantLoader(spec.origin, self.skipped)
                return spec
        return None


class _TolerantLoader(importlib.abc.Loader):
    def __init__(self, origin: str, skipped: list[str]) -> None:
        self.origin, self.skipped = origin, skipped

    def exec_module(self, module: ModuleType) -> None:
        self.skipped.extend(exec_tolerant(module, self.origin))


def _skip_note(origin: str, node: ast.stmt, error: BaseException) -> str:
    text = str(error).splitlines()[0][:120] if str(error) else ""
    return f"{Path(origin).name}:{node.lineno}: {type(error).__name__}: {text}"


def _guarded_imports(tree: ast.Module) -> dict[str, str]:
    """Names the module imports at its top level, under a guard too (``if is_flashinfer_available():
    from ...flashinfer_backend import FlashInferAttnBackend``): name -> the module imported from.
    Where that import was skipped (a guard false on a CPU, a module failing at import), the name
    is taken from its module loaded statement by statement."""
    found: dict[str, str] = {}
    for node in tree.body:
        if not isinstance(node, ast.If | ast.Try | ast.ImportFrom):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom) and inner.module and not inner.level:
                for alias in inner.names:
                    found[alias.asname or alias.name] = f"{inner.module}:{alias.name}"
    return found


def _resolve(module: ModuleType, name: str | None, guarded: dict[str, str]) -> bool:
    """Give ``module`` the name a statement lacks where the module imports it under a guard that
    is false on a CPU (a base class from another module of the wheel): True when given."""
    if not name or name not in guarded or name in module.__dict__:
        return False
    source, attribute = guarded[name].split(":")
    try:
        value = getattr(import_tolerant(source)[0], attribute)
    except Exception:  # noqa: BLE001 - the name stays missing; the statement is skipped
        return False
    module.__dict__[name] = value
    return True
