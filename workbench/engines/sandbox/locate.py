"""Finding an engine's classes and functions in an unpacked wheel, by name, whatever file holds them.

Releases move code: SGLang's DSA backend is ``layers/attention/nsa_backend.py``'s
``NativeSparseAttnBackend`` up to 0.5.12 and ``dsa_backend.py``'s ``DeepseekSparseAttnBackend``
after; the NPU allocator is ``mem_cache/allocator_ascend.py``'s ``AscendPagedTokenToKVPoolAllocator``
before it became ``hardware_backend/npu/allocator_npu.py``'s ``NPUPagedTokenToKVPoolAllocator``.
So a learner never names a file or a version: it asks for the names it knows and this module
searches every ``.py`` of the wheel for a top-level ``class NAME`` or ``def NAME`` (first by a
text scan, then confirmed by parsing the file), and says where it found it (``Found.where``:
``sglang/srt/layers/attention/dsa_backend.py:1504``) or that it did not.

Worked example: ``Wheel(src).find_class(("DeepseekSparseAttnBackend", "NativeSparseAttnBackend"),
method="init_cuda_graph_state")`` in 0.5.10 finds ``sglang.srt.layers.attention.nsa_backend``,
class ``NativeSparseAttnBackend``, its ``init_cuda_graph_state`` at line 756.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Found:
    module: str  # "sglang.srt.layers.attention.dsa_backend"
    path: str  # "sglang/srt/layers/attention/dsa_backend.py", relative to the wheel's root
    name: str  # the class or function found
    line: int  # the line of the class, or of ``method`` in it
    end_line: int
    owner: str | None = None  # the class of a method found by ``find_keyword``

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.end_line <= self.line else f"{self.path}:{self.line}-{self.end_line}"


class Wheel:
    """The ``.py`` files of an unpacked wheel (``src`` holds the top-level package folder)."""

    def __init__(self, src: Path, package: str) -> None:
        self.src = src
        self.package = package

    @functools.cached_property
    def _files(self) -> list[Path]:
        # Shortest paths first: a name defined in a module and again in a test or an example is
        # the module's.
        return sorted((self.src / self.package).rglob("*.py"), key=lambda p: (len(p.parts), str(p)))

    @functools.cache  # noqa: B019 - one Wheel per learning run
    def _text(self, path: Path) -> str:
        return path.read_text(encoding="utf-8", errors="replace")

    def _candidates(self, keyword: str, name: str) -> Iterator[Path]:
        pattern = re.compile(rf"^{keyword} {re.escape(name)}\b", re.MULTILINE)
        return (p for p in self._files if pattern.search(self._text(p)))

    def _found(self, path: Path, node: ast.AST, name: str) -> Found:
        relative = path.relative_to(self.src)
        module = ".".join(relative.with_suffix("").parts)
        line, end = getattr(node, "lineno", 0), getattr(node, "end_lineno", 0) or 0
        return Found(module.removesuffix(".__init__"), relative.as_posix(), name, line, end)

    def find_class(self, names: Sequence[str], *, method: str | None = None) -> Found | None:
        """The first of ``names`` defined as a top-level class (with ``method`` defined in its
        body, when given: ``line`` is then the method's)."""
        for name in names:
            for path in self._candidates("class", name):
                for node in ast.parse(self._text(path)).body:
                    if not (isinstance(node, ast.ClassDef) and node.name == name):
                        continue
                    if method is None:
                        return self._found(path, node, name)
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == method:
                            return self._found(path, item, name)
        return None

    def find_function(self, names: Sequence[str]) -> Found | None:
        """The first of ``names`` defined as a top-level function (a ``@triton.jit`` kernel too)."""
        for name in names:
            for path in self._candidates("def", name):
                for node in ast.parse(self._text(path)).body:
                    if isinstance(node, ast.FunctionDef) and node.name == name:
                        return self._found(path, node, name)
        return None

    def find_keyword(self, callee_suffix: str, keyword: str) -> Found | None:
        """The first function or method with a call to something named ``...<callee_suffix>``
        given ``keyword=`` (``ReqToTokenPool(..., max_context_len=...)``); ``line`` is the keyword's."""
        pattern = re.compile(rf"\b{re.escape(keyword)}=")
        for path in (p for p in self._files if callee_suffix in self._text(p) and pattern.search(self._text(p))):
            tree = ast.parse(self._text(path))
            for owner in [tree, *(n for n in tree.body if isinstance(n, ast.ClassDef))]:
                for node in getattr(owner, "body", []):
                    if not isinstance(node, ast.FunctionDef):
                        continue
                    for call in ast.walk(node):
                        name = getattr(getattr(call, "func", None), "id", None) or getattr(getattr(call, "func", None), "attr", "")
                        if isinstance(call, ast.Call) and str(name).endswith(callee_suffix):
                            hit = next((k for k in call.keywords if k.arg == keyword), None)
                            if hit is not None:
                                found = self._found(path, hit.value, node.name)
                                return Found(found.module, found.path, node.name, found.line, found.end_line,
                                             owner.name if isinstance(owner, ast.ClassDef) else None)
        return None

    def lines_of(self, found: Found, needle: str) -> list[int]:
        """Lines of ``found``'s body (class or function) that contain ``needle``."""
        text = self._text(self.src / found.path).splitlines()
        return [i for i in range(found.line, max(found.end_line, found.line) + 1)
                if needle in text[i - 1]]
