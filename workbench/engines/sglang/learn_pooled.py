"""The pooled ``kv_indices`` buffers of an SGLang release: each one's capacity rule and host check.

For every pooled backend and buffer key (``sglang_pooled_widths.POOLED_PROBES``): the width its
sizing code gives over the measuring grid, named among the buffer's capacity rules
(``PooledBuffer.capacity``), and the check a step makes before it writes:

* a drafter's (``draft-decode``, ``draft-decode-eager``: one ``common_template`` for both) is
  measured: the release's ``common_template`` on a batch that does not fit (``draft_check``);
* a verify's is read: the verify metadata is built inside the attention library's planner
  (flashinfer, aiter), which needs a device. What is read is found in the source, by name: an
  ``assert_buffer_fits`` call in the verifier's module outside its drafter (``assert``), a
  ``fast_mla_prefill_plan`` call in the verifier's class (``copy``: the plan copies into a
  slice of the buffer), neither (``none``), each fact with the file and line of what was found.

A buffer's fact is ``{"rule": ..., "check": ...}`` as the pooled backends read it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

from workbench.backends import pooled_backend_of
from workbench.backends.pooled import multi_step_draft
from workbench.engines.checking.states import geometry_of
from workbench.engines.learning import rules as lr
from workbench.engines.sandbox.locate import Found, Wheel
from workbench.engines.sandbox.session import Sessions
from workbench.engines.sglang import pooled_widths as spw
from workbench.engines.sglang.learn_buffers import ask_width, not_made
from workbench.engines.sglang.widths import WidthProbe

Progress = Callable[[str], None]
KEYS = ("context_len", "page_size", "draft_tokens", "spec_steps", "spec_topk", "max_bs")
# A verify buffer with neither a host check nor SGLang's own copy: FlashInfer's (MHA) and AITER's
# are written unchecked; FlashInfer MLA's is copied inside flashinfer's plan (not modelled).
UNCHECKED: dict[str, str | None] = {"sglang-flashinfer-kv-indices": "none", "sglang-aiter-kv-indices": "none",
                                    "sglang-flashinfer-mla-kv-indices": None}
VERIFY_REASON = "the verify metadata is built inside the attention library's planner, which needs a device"


def _capacity(component: str, key: str, rule: str) -> Callable[[Mapping[str, Any]], int]:
    buffer = pooled_backend_of(component).buffer(key)
    return lambda state: buffer.capacity(geometry_of(dict(state)), rule, state["max_bs"])


def _applies(component: str, key: str) -> Callable[[Mapping[str, Any]], bool]:
    """The grid points the rules are named on: a verify buffer's where speculation is on, a
    drafter's where its multi-step drafter runs (a drafter the deployment rules refuse at topk > 1,
    FlashInfer MLA's, still sizes its buffer by its code: those points tell the rules apart)."""
    buffer = pooled_backend_of(component).buffer(key)
    if key == "target-verify":
        return lambda state: buffer.applies(geometry_of(dict(state))) is None
    return lambda state: multi_step_draft(geometry_of(dict(state))) is None


def learn_pooled(session: Sessions, wheel: Wheel, progress: Progress) -> dict[str, dict[str, Any]]:
    """``{backend: {key: fact}}``; a fact's value is ``{"rule", "check"}`` or None."""
    found: dict[str, dict[str, Any]] = {}
    checks: dict[str, dict[str, Any]] = {}
    for probe in spw.POOLED_PROBES:
        assert probe.key is not None
        where = wheel.find_class(probe.classes, method=probe.method)
        if where is None:
            searched = " or ".join(f"{c}.{probe.method}" for c in probe.classes)
            found.setdefault(probe.component, {})[probe.key] = lr.absent_fact(f"no class {searched} in the wheel", searched)
            continue
        rule = _rule(session, wheel, probe, where)
        if probe.key == "target-verify":
            check = _verify_check(wheel, probe, where)
        else:
            if probe.component not in checks:
                checks[probe.component] = _draft_check(session, wheel, probe, where)
            check = checks[probe.component]
        found.setdefault(probe.component, {})[probe.key] = _combined(rule, check)
        progress(f"{probe.name}: {found[probe.component][probe.key]['value']}")
    return found


def _rule(session: Sessions, wheel: Wheel, probe: WidthProbe, where: Found) -> dict[str, Any]:
    assert probe.key is not None
    answer = ask_width(session, probe.name, where, wheel)
    function = f"{where.module}.{where.name}.{probe.method}"
    applies = _applies(probe.component, probe.key)
    points = [(s, w) for s, w in answer.get("points", []) if applies(s)]
    if not points:
        error = answer.get("error") or (answer.get("first_error") or {}).get("error", "no point measured")
        return not_made(error, function, where) or lr.measured_fact(
            None, function, 0, found=where.where, finding=f"the engine's code did not run: {error}")
    rules = {rule: _capacity(probe.component, probe.key, rule) for rule in pooled_backend_of(probe.component).buffer(probe.key).rules}
    more: dict[str, Any] = {"found": where.where}
    if answer.get("notes"):
        more["settings"] = "; ".join(answer["notes"])
    return lr.name_rule(points, rules, function=function, keys=KEYS, **more)


def _draft_check(session: Sessions, wheel: Wheel, probe: WidthProbe, where: Found) -> dict[str, Any]:
    answer = session.ask({"name": f"{probe.component} draft check", "kind": "draft_check", "module": where.module,
                          "class": where.name})
    function = f"{where.module}.{where.name}.common_template"
    found = answer.get("checks") or {}
    if len(found) != 1:
        why = answer.get("error") or answer.get("first_error") or f"the grid gave {found}"
        return lr.measured_fact(None, function, sum(found.values()), finding=f"no single check: {why}")
    (check, states), = found.items()
    return lr.measured_fact(check, function, states, found=where.where)


def _calls(wheel: Wheel, found: Found, name: str, outside: str | None = None) -> list[int]:
    """Lines of calls to ``name``, or uses of it as a value (``partial(fast_mla_prefill_plan, ...)``),
    in ``found``'s class (or, with ``outside``, anywhere in its module but inside class ``outside``)."""
    tree = ast.parse((wheel.src / found.path).read_text(encoding="utf-8"))
    if outside is None:
        scopes: list[ast.AST] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == found.name]
        skip: set[int] = set()
    else:
        scopes = [tree]
        skip = {id(x) for n in tree.body if isinstance(n, ast.ClassDef) and n.name == outside for x in ast.walk(n)}
    return sorted({node.lineno for scope in scopes for node in ast.walk(scope) if id(node) not in skip
                   and ((isinstance(node, ast.Name) and node.id == name)
                        or (isinstance(node, ast.Attribute) and node.attr == name))})


def _verify_check(wheel: Wheel, probe: WidthProbe, where: Found) -> dict[str, Any]:
    drafter = wheel.find_class(spw.DRAFTERS[probe.component])
    asserts = _calls(wheel, where, "assert_buffer_fits", outside=drafter.name if drafter else "")
    copies = _calls(wheel, where, "fast_mla_prefill_plan")
    value: str | None
    if asserts:
        value, lines = "assert", asserts
    elif copies:
        value, lines = "copy", copies
    else:
        value, lines = UNCHECKED[probe.component], []
    source = f"{where.path}:{', '.join(map(str, lines))}" if lines else \
        f"{where.path} (no assert_buffer_fits or fast_mla_prefill_plan call outside the drafter)"
    if value is None:
        return {"value": None, "how": "read", "source": source, "reason": f"{VERIFY_REASON}; the copy into the "
                "buffer is inside flashinfer's own plan, which the workbench does not model"}
    return {"value": value, "how": "read", "source": source, "reason": VERIFY_REASON}


def _combined(rule: dict[str, Any], check: dict[str, Any]) -> dict[str, Any]:
    """One fact for the buffer: measured when both parts were, read when the check was read."""
    value = {"rule": rule["value"], "check": check["value"]} if rule["value"] and check["value"] else None
    fact = {**rule, "value": value, "rule": rule, "check": check}
    if value is None and rule["value"] is not None:  # the rule is known, the check is not: say why
        fact["finding"] = f"the check: {check.get('finding') or check.get('reason')}"
    if check.get("how") == "read" and value is not None:
        fact.update(how="read", source=check["source"], reason=f"the check: {check['reason']}; the rule: measured "
                    f"by {rule['function']} on {rule['states']} states")
    return fact
