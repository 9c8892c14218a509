"""``workbench engines learn vllm-ascend==X``: what a vllm-ascend release's drafter does, read from its code.

vllm-ascend's drafter runs its steps through an ACL graph with ``torch_npu`` kernels, so its code
cannot run on a CPU; it is read. The multi-step drafter (``spec_decode/*proposer*.py``) is found
by what it defines, and the fact the ``vllm-ascend-block-table`` backend needs is whether a draft
step that carries a ``seq_len`` past ``max_model_len`` resets it (PR 10117:
``seq_lens.masked_fill_(seq_lens > max_model_len, 1)``, the ``reset`` drafter) or leaves it to read
past the block table's row (``no-reset``, the state of issue 9098). The fact says the file and
lines it was read from. A release without a multi-step drafter has the buffer ``absent``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.engines.learning import rules as lr
from workbench.engines.learning.learn import LearnError
from workbench.engines.store import learned, wheels

LEARNER = "vllm-ascend-drafter 1"
COMPONENT = "vllm-ascend-block-table"
Progress = Callable[[str], None]
_RESET = re.compile(r"seq_lens\S*\.masked_fill_\(")
_EXCEEDS = re.compile(r"seq_lens\S*\s*>\s*self\.max_model_len")
REASON = "the drafter runs through torch_npu and an ACL graph: it cannot run on a CPU"


def drafter_fact(package_dir: Path) -> dict[str, Any]:
    """``reset`` or ``no-reset``, read from the multi-step drafter's source."""
    relative = f"{package_dir.name}/spec_decode"
    proposers = sorted((package_dir / "spec_decode").glob("*proposer*.py"))
    drafters = [p for p in proposers if "max_model_len" in p.read_text(errors="replace")]
    if not drafters:
        return lr.absent_fact("the release has no multi-step drafter that reads max_model_len",
                              f"{relative}/*proposer*.py")
    for path in drafters:
        lines = path.read_text(errors="replace").splitlines()
        for number, line in enumerate(lines, 1):
            window = " ".join(lines[max(0, number - 3):number])
            if _RESET.search(line) and _EXCEEDS.search(window) and ", 1)" in line:
                return {"value": "reset", "how": "read", "source": f"{relative}/{path.name}:{number}", "reason": REASON}
    shown = ", ".join(f"{relative}/{p.name}" for p in drafters)
    return {"value": "no-reset", "how": "read", "source": shown,
            "reason": f"{REASON}; no seq_len past max_model_len is reset to 1 in the drafter"}


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
    say(f"drafter: {fact['value'] or 'absent'} ({fact.get('source') or fact.get('searched')})")
    section = {"learner": LEARNER, "backends": {COMPONENT: {"drafter": fact}}}
    return learned.write_section(engine, "buffers", section, root=root, wheel=wheel)
