"""Reading a vllm-ascend release's drafters with the AST: which of them resets a ``seq_len`` past
``max_model_len``, proposer class by proposer class.

A line-by-line reading misses a statement split over lines (0.13.0's MTP proposer writes
``exceeds_mask = attn_metadata_i.seq_lens[:batch_size] > \\`` on one line and
``self.runner.model_config.max_model_len`` on the next, ``mtp_proposer.py:498-500``), so each
``spec_decode/*proposer*.py`` is parsed and every call ``<...seq_lens...>.masked_fill_(mask, 1)`` is
found in each class's methods, its own and those it inherits from the package's other proposer
classes. The mask is the comparison given in the call, or the one assigned to the mask's name
before the call in the same method. Each reset found is classified by what it compares with
``max_model_len`` and what it writes:

* ``seq-len``: the device ``seq_lens`` set to 1 where ``seq_lens > max_model_len`` (or ``>=``: a
  length at the limit too), the reset of PR 10117 that the ``vllm-ascend-block-table`` backend
  calls ``reset``;
* ``position``: ``seq_lens`` set to 1 where a *position* is ``>= max_model_len`` (vLLM's own
  EAGLE form, kept by vllm-ascend up to 0.20.2rc1): not the seq_len-keyed reset, recorded beside it;
* ``host-copy``: a host copy (``seq_lens_cpu``, ``_seq_lens_cpu``) reset on its own lengths: the
  device lengths the kernel reads are not changed by it.

A class is a drafter when its methods read ``max_model_len`` and ``seq_lens``. Its value is
``reset`` when one of its resets is ``seq-len``, else ``no-reset``; every reason is written from
what was found (``reason``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEVICE = "seq_lens"
HOST_COPIES = ("seq_lens_cpu", "_seq_lens_cpu")
LIMIT = "max_model_len"


@dataclass(frozen=True)
class Reset:
    """One ``masked_fill_(mask, 1)`` of a ``seq_lens`` tensor: its kind, the file and lines of
    the mask's comparison through the call, and the statement's text, whitespace folded."""

    kind: str  # "seq-len", "position", "host-copy" or "other"
    source: str  # "vllm_ascend/spec_decode/mtp_proposer.py:498-500"
    text: str


@dataclass(frozen=True)
class ProposerClass:
    name: str
    file: str  # relative: "vllm_ascend/spec_decode/mtp_proposer.py"
    bases: tuple[str, ...]
    methods: dict[str, ast.FunctionDef]
    text: str  # the file's source, for the statements' text


def _names(node: ast.AST) -> set[str]:
    """Every name and attribute name inside ``node``."""
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
    return found


def _written(receiver: ast.expr) -> str | None:
    """The tensor a ``masked_fill_`` writes: the attribute or name under any subscripts
    (``a.seq_lens[:n]`` -> ``seq_lens``)."""
    while isinstance(receiver, ast.Subscript):
        receiver = receiver.value
    if isinstance(receiver, ast.Attribute):
        return receiver.attr
    if isinstance(receiver, ast.Name):
        return receiver.id
    return None


def _compared(compare: ast.Compare) -> tuple[set[str], set[str]] | None:
    """(names on the side below, names on the side above the limit) of a one-operator comparison
    with ``max_model_len`` on one side: ``x > L`` and ``L < x`` both give x's names as the side that
    passes the limit; None when it is no such comparison."""
    if len(compare.ops) != 1:
        return None
    left, right, op = compare.left, compare.comparators[0], compare.ops[0]
    if LIMIT in _names(right) and isinstance(op, (ast.Gt, ast.GtE)):
        return _names(left), _names(right)
    if LIMIT in _names(left) and isinstance(op, (ast.Lt, ast.LtE)):
        return _names(right), _names(left)
    return None


def _assigned(function: ast.FunctionDef, name: str, before: int) -> ast.Assign | None:
    """The last assignment to ``name`` in ``function`` before line ``before``."""
    found = [node for node in ast.walk(function) if isinstance(node, ast.Assign) and node.lineno < before
             and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)]
    return max(found, key=lambda node: node.lineno) if found else None


def _moved(value: ast.expr) -> str | None:
    """The name a value only moves (``mask.to(device)``, or the name itself), else None."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "to":
        value = value.func.value
    return value.id if isinstance(value, ast.Name) else None


def _mask(function: ast.FunctionDef, call: ast.Call) -> tuple[ast.Compare | None, list[ast.Assign]]:
    """The comparison a ``masked_fill_`` call's mask is, and the statements that make it: the
    mask itself, or the last assignment to its name before the call, followed through names that
    only move it (0.11.0: ``exceeds_max_model_len_cpu = exceeds_max_model_len.to(...)``)."""
    mask: ast.expr = call.args[0]
    chain: list[ast.Assign] = []
    for _ in range(4):  # a mask moved through a few names at most
        if isinstance(mask, ast.Compare):
            return mask, chain
        name = _moved(mask)
        assigned = _assigned(function, name, (chain[0] if chain else call).lineno) if name else None
        if assigned is None:
            return None, chain
        chain.insert(0, assigned)
        mask = assigned.value
    return None, chain


def _kind(written: str, compare: ast.Compare | None) -> str:
    sides = _compared(compare) if compare is not None else None
    if sides is None:
        return "other"
    passing = sides[0]
    if written in HOST_COPIES:
        return "host-copy"
    if written == DEVICE and DEVICE in passing:
        return "seq-len"
    if any("position" in name for name in passing):
        return "position"
    return "other"


def resets(function: ast.FunctionDef, file: str, text: str) -> list[Reset]:
    """Every ``<seq_lens tensor>.masked_fill_(mask, 1)`` in ``function``, in source order."""
    found = []
    for node in ast.walk(function):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "masked_fill_"
                and len(node.args) == 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == 1):
            continue
        written = _written(node.func.value)
        if written not in (DEVICE, *HOST_COPIES):
            continue
        compare, chain = _mask(function, node)
        first, last = (chain[0] if chain else node).lineno, node.end_lineno or node.lineno
        statements: list[ast.AST] = [*chain, node]
        shown = "; ".join(" ".join((ast.get_source_segment(text, s) or "").replace("\\", " ").split())
                          for s in statements)
        found.append(Reset(_kind(written, compare), f"{file}:{first}" + (f"-{last}" if last != first else ""), shown))
    return sorted(found, key=lambda r: int(r.source.rsplit(":", 1)[1].split("-")[0]))


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def proposer_classes(sources: Mapping[str, str]) -> dict[str, ProposerClass]:
    """Every class of ``sources`` (relative file -> its text), by name."""
    found = {}
    for file, text in sorted(sources.items()):
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef):
                methods = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
                found[node.name] = ProposerClass(node.name, file, tuple(_base_name(b) for b in node.bases), methods, text)
    return found


def _calls_super(node: ast.FunctionDef) -> bool:
    """Whether ``node`` calls ``super().<its own name>(...)``."""
    return any(isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == node.name
               and isinstance(sub.func.value, ast.Call) and isinstance(sub.func.value.func, ast.Name)
               and sub.func.value.func.id == "super" for sub in ast.walk(node))


def effective_methods(name: str, classes: Mapping[str, ProposerClass]) -> list[tuple[ProposerClass, ast.FunctionDef]]:
    """A class's methods with the ones it inherits from the package's classes (depth first, left
    to right, a name defined nearer winning, and the next definition up as well where the nearer
    one calls ``super()``'s: 0.28.0rc1's Gemma4 drafter wraps its base's step update so). vLLM's own
    base classes are not in ``classes``."""
    definitions: dict[str, list[tuple[ProposerClass, ast.FunctionDef]]] = {}

    def visit(current: str, seen: frozenset[str]) -> None:
        cls = classes.get(current)
        if cls is None or current in seen:
            return
        for method, node in cls.methods.items():
            if all(c.name != cls.name for c, _ in definitions.get(method, [])):
                definitions.setdefault(method, []).append((cls, node))
        for base in cls.bases:
            visit(base, seen | {current})

    visit(name, frozenset())
    chosen = []
    for chain in definitions.values():
        for cls, node in chain:
            chosen.append((cls, node))
            if not _calls_super(node):
                break
    return chosen


def _reads(methods: Iterable[tuple[ProposerClass, ast.FunctionDef]], wanted: str) -> bool:
    return any(wanted in _names(node) for _, node in methods)


def class_fact(name: str, classes: Mapping[str, ProposerClass]) -> dict[str, Any] | None:
    """One drafter class's value, the resets found and a reason written from them; None when the
    class is no drafter (its methods do not read both ``max_model_len`` and ``seq_lens``)."""
    methods = effective_methods(name, classes)
    if not (_reads(methods, LIMIT) and _reads(methods, DEVICE)):
        return None
    found = [r for cls, node in methods for r in resets(node, cls.file, cls.text)]
    keyed = [r for r in found if r.kind == "seq-len"]
    fact: dict[str, Any] = {"value": "reset" if keyed else "no-reset", "file": classes[name].file}
    if keyed:
        fact["source"] = keyed[0].source
    fact["resets"] = [{"kind": r.kind, "source": r.source, "text": r.text} for r in found]
    fact["reason"] = reason(name, found)
    return fact


KINDS = {"seq-len": "the device seq_lens set to 1 where seq_lens pass max_model_len",
         "position": "the device seq_lens set to 1 where the position reaches max_model_len (keyed on the position, "
                     "not on seq_lens)",
         "host-copy": "a host copy of the lengths set to 1 on its own lengths (the device seq_lens unchanged)",
         "other": "seq_lens set to 1 on a mask that is no comparison with max_model_len"}


def reason(name: str, found: Sequence[Reset]) -> str:
    """What was found in ``name``'s methods, in words, each statement with its file and lines."""
    if not found:
        return f"{name}: no masked_fill_(..., 1) of seq_lens in its methods (its own and those it inherits in the package)"
    parts = [f"{KINDS[r.kind]}: `{r.text}` ({r.source})" for r in found]
    verdict = "resets" if any(r.kind == "seq-len" for r in found) else "no seq_len-keyed reset"
    return f"{name}: {verdict}; " + "; ".join(parts)


def read_package(package_dir: Path) -> dict[str, str]:
    """The proposer files of ``package_dir/spec_decode`` (relative path -> text)."""
    folder = package_dir / "spec_decode"
    return {f"{package_dir.name}/spec_decode/{p.name}": p.read_text(encoding="utf-8-sig", errors="replace")
            for p in sorted(folder.glob("*proposer*.py"))}


def drafters(sources: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Every drafter class of ``sources`` with its fact, by class name."""
    classes = proposer_classes(sources)
    found = {name: class_fact(name, classes) for name in sorted(classes)}
    return {name: fact for name, fact in found.items() if fact is not None}
