"""``workbench engines learn vllm-ascend==X``: what a vllm-ascend release's drafters do, read from their code.

vllm-ascend's drafter runs its steps through an ACL graph with ``torch_npu`` kernels, so its code
cannot run on a CPU; it is read, with the AST (``drafter_reading``: a statement split over lines
is one statement there), proposer class by proposer class. The fact the ``vllm-ascend-block-table``
backend needs is whether a draft step that carries a ``seq_len`` past ``max_model_len`` resets it
(PR 10117: ``seq_lens.masked_fill_(seq_lens > max_model_len, 1)``, the ``reset`` drafter) or leaves
it to read past the block table's row (``no-reset``, the state of issue 9098). Each drafter class
has its value under ``proposers``; the fact's ``value`` is theirs where they all agree, and None
with a ``finding`` naming each class's value where they differ (0.13.0: the MTP proposer resets,
EAGLE's does not): no one class stands for the others. Every reason is written from the statements
found, with their files and lines. A release without a drafter class has the buffer ``absent``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from workbench.engines.learning import rules as lr
from workbench.engines.learning.learn import LearnError
from workbench.engines.store import learned, wheels
from workbench.engines.vllm_ascend import drafter_reading

LEARNER = "vllm-ascend-drafter 2"
COMPONENT = "vllm-ascend-block-table"
Progress = Callable[[str], None]
READ = "read, not run: the drafter runs through torch_npu and an ACL graph, which a CPU cannot run"


def drafter_fact(package_dir: Path) -> dict[str, Any]:
    """``reset`` or ``no-reset`` where every drafter class agrees, read from their source."""
    return fact_from_classes(drafter_reading.drafters(drafter_reading.read_package(package_dir)),
                             f"{package_dir.name}/spec_decode/*proposer*.py")


def fact_from_classes(classes: Mapping[str, Mapping[str, Any]], searched: str) -> dict[str, Any]:
    """The release's fact from its drafter classes' (``drafter_reading.drafters``)."""
    if not classes:
        return lr.absent_fact("the release has no drafter class whose methods read max_model_len and seq_lens", searched)
    values = {name: str(fact["value"]) for name, fact in classes.items()}
    resets = {r["source"]: r for fact in classes.values() for r in fact["resets"]}
    keyed = sorted(s for s, r in resets.items() if r["kind"] == "seq-len")
    found = "; ".join(f"{drafter_reading.KINDS[r['kind']]} ({s})" for s, r in sorted(resets.items())) or \
        "no masked_fill_(..., 1) of seq_lens"
    fact: dict[str, Any] = {"how": "read", "proposers": {name: dict(f) for name, f in classes.items()}}
    if len(set(values.values())) == 1:
        value = next(iter(values.values()))
        fact["value"] = value
        fact["source"] = ", ".join(keyed) if value == "reset" else \
            ", ".join(sorted({str(f["file"]) for f in classes.values()}))
        verdict = ("reset a seq_len past max_model_len to 1" if value == "reset"
                   else "reset no seq_len on seq_lens > max_model_len")
        fact["reason"] = f"{READ}; every drafter class ({', '.join(values)}) {verdict}; found: {found}"
    else:
        fact["value"] = None
        fact["source"] = ", ".join(sorted({str(f["file"]) for f in classes.values()}))
        fact["finding"] = "the drafter classes differ: " + ", ".join(f"{name} {value}" for name, value in values.items())
        fact["reason"] = f"{READ}; found: {found}"
    return fact


def learn_release(engine: str, *, progress: Progress, root: Path) -> Path:
    say: Progress = lambda line: progress(f"{engine}: {line}")  # noqa: E731
    say("fetching the release (its Python files)")
    try:
        install = wheels.fetch(engine, progress=say)
    except wheels.FetchError as error:
        raise LearnError(str(error)) from None
    wheel = install.wheel
    if learned.is_current(engine, ("buffers",), LEARNER, wheel.get("sha256", ""), root=root):
        say(f"already learned from this wheel by {LEARNER}: skipped")
        return learned.shipped_path(engine, root)
    if not install.package_dir.is_dir():
        raise LearnError(f"the wheel has no {install.package_dir.name} package")
    fact = drafter_fact(install.package_dir)
    say(f"drafter: {fact['value'] or fact.get('finding') or 'absent'} ({fact.get('source') or fact.get('searched')})")
    section = {"learner": LEARNER, "backends": {COMPONENT: {"drafter": fact}}}
    return learned.write_section(engine, "buffers", section, root=root, wheel=wheel)
