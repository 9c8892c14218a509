"""A finding rendered as one standalone Python script (no workbench import).

The script is the shared prelude (``templates/prelude.py.tmpl``: the bare engine package, the
stand-ins for accelerator libraries, source edits with their unified diff, buffers with guard
space, the claims and the summary line), the finding's numbers as constants, and the template of
its kind (``templates/<kind>.py.tmpl``: which engine objects to build and call, and how to read
the outcome). What a kind needs of an engine version (its module and class, the one-line fix, a
pseudo-version's revert) is data: ``data/repro.json``.
"""

from __future__ import annotations

import pprint
import textwrap
from dataclasses import dataclass
from pathlib import Path

from workbench import backends
from workbench.engines.store.launch_defaults import load_launch_data
from workbench.engines.store.wheels import PINNED_FROM_WHEEL, SMALL_DEPS, cached
from workbench.model.geometry import Mode, ServingGeometry
from workbench.repro.conditions import Conditions, backend_entry, conditions, needs_torchvision
from workbench.repro.findings import Finding

TEMPLATES = Path(__file__).resolve().parent / "templates"
PIP_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
# Imported at the top of the engine's modules and present in the workbench's own environment, so the
# cached-wheel runs never miss them; a fresh environment does (found by the repro_venv test).
FRESH_VENV_DEPS = ("numpy", "requests")


@dataclass(frozen=True)
class Plan:
    """What one finding's script is made of."""

    kind: str
    params: dict[str, object]
    needs_triton: bool
    fix_source: str
    conditions: Conditions


def _mode_entry(finding: Finding) -> dict[str, object]:
    modes = backend_entry(finding.backend).get("modes", {})
    assert isinstance(modes, dict)
    if finding.mode not in modes:
        raise ValueError(f"{finding.id}: no reproducer template for {finding.backend} in {finding.mode} "
                         f"(data/repro.json has: {', '.join(modes) or 'none'})")
    entry = modes[finding.mode]
    assert isinstance(entry, dict)
    return entry


def _per_version(entry: dict[str, object], key: str, engine: str) -> dict[str, object]:
    table = entry.get(key, {})
    assert isinstance(table, dict)
    if engine not in table:
        raise ValueError(f"no {key} for {engine} in data/repro.json (has: {', '.join(table) or 'none'})")
    found = table[engine]
    assert isinstance(found, dict)
    return found


def _geometry(finding: Finding) -> ServingGeometry:
    s = finding.setting
    return ServingGeometry(context_len=int(s["context_len"]), page_size=int(s["page_size"]),  # type: ignore[call-overload]
                           draft_tokens=int(s["draft_tokens"]), spec_steps=int(s["spec_steps"]),  # type: ignore[call-overload]
                           spec_topk=int(s["spec_topk"]), draft_has_kv=bool(s["draft_has_kv"]),  # type: ignore[call-overload]
                           max_bs=int(s["max_bs"]), width_gen=str(s["width_gen"]))  # type: ignore[call-overload]


def safe_width(finding: Finding) -> int | None:
    """The width the workbench models as safe for the finding's buffer, in its unit (entries of one
    row for a pooled buffer: the worst batch at the reachable length; pages or tokens for a table:
    its ``req-to-token`` rule), or None where it models none."""
    if finding.reachable_len is None or not finding.setting.get("context_len"):
        return None
    g = _geometry(finding)
    if backends.is_pooled_backend(finding.backend):
        buffer = backends.pooled_backend_of(finding.backend).buffer(finding.mode)
        return finding.batch * buffer.per_request(g, finding.reachable_len, buffer.rows(g) - 1)
    backend = backends.backend_of(finding.backend)
    rule = "req-to-token" if "req-to-token" in backend.rules else None
    return backend.width(g, rule) if rule else None


def plan(finding: Finding) -> Plan:
    entry = _mode_entry(finding)
    kind = str(entry["kind"])
    fix = _per_version(entry, "fix", finding.release)
    params: dict[str, object] = dict(entry.get("params", {}))  # type: ignore[call-overload]
    s = finding.setting
    params.update(
        id=finding.id, mode=finding.mode, outcome=finding.outcome, first_failing=finding.first_failing,
        reachable_len=finding.reachable_len, batch=finding.batch,
        context_len=s.get("context_len"), page_size=s.get("page_size"), draft_tokens=s.get("draft_tokens"),
        steps=s.get("spec_steps"), topk=s.get("spec_topk"), max_bs=s.get("max_bs"), step_id=s.get("step_id"),
        request_table_width=s.get("request_table_width"), safe_width=safe_width(finding),
        fix_edits=fix["edits"], fix=str(fix["what"]) if "what" in fix else _fix_words(finding, fix),
        **{k: v for k, v in finding.extra.items()})
    if "+" in finding.engine:
        revert = _per_version(entry, "revert", finding.engine)
        params["revert_edits"] = revert["edits"]
    elif "revert" in entry:  # a seed's template: it reverts the fix at run time, so it needs the pseudo-version
        raise ValueError(f"{finding.id}: the {kind} template reproduces the seed's pseudo-version only "
                         f"({', '.join(entry['revert'])})")  # type: ignore[arg-type]
    for key in ("seq_lens", "last_loc", "free_pages"):  # the allocator's step, where the finding is one
        if key in finding.setting:
            params[key] = finding.setting[key]
    if params.pop("reads_past_seq_lens_is_draft", False):  # a verify's kernel reads s + D, its bound not kept
        params["reads_past_seq_lens"] = finding.setting.get("draft_tokens") or 0
    needs_triton = bool(entry.get("triton", False))
    params["run_kernel"] = needs_triton  # a kind whose kernel launch is not the finding records it instead
    params["draft_has_kv"] = bool(s.get("draft_has_kv", True))
    return Plan(kind, params, needs_triton=needs_triton,
                fix_source=str(fix.get("source", "")), conditions=conditions(finding))


def _fix_words(finding: Finding, fix: dict[str, object]) -> str:
    edits = fix["edits"]
    assert isinstance(edits, list)
    return "; ".join(f"{edit[0].strip()} -> {edit[1].strip()}" for edit in edits)


def _deps(finding: Finding, needs_triton: bool) -> list[str]:
    """The pip commands for a fresh environment: torch, the engine without its dependencies, the small
    packages its modules import (transformers and tokenizers at the wheel's pins where the cached wheel says)."""
    release = finding.release
    pins = list(PINNED_FROM_WHEEL)
    install = cached(release)
    if install is not None:
        from workbench.engines.store.wheels import _pins

        pins = _pins(install.src, PINNED_FROM_WHEEL)
    lines = [PIP_TORCH, f"pip install --no-deps {release}", "pip install " + " ".join([*SMALL_DEPS, *FRESH_VENV_DEPS, *pins])]
    if needs_torchvision(release):
        lines.append("pip install --no-deps torchvision   # the build that matches your torch: this release's "
                     "transformers registers image processors only with it present")
    if needs_triton:
        lines.append("pip install triton   # its kernels run interpreted on the CPU (TRITON_INTERPRET=1)")
    return lines


def title(finding: Finding) -> str:
    where = f"committed length {finding.first_failing}" if finding.setting.get("context_len") else \
        f"an exactly full free pool ({finding.first_failing} free page{'s' if finding.first_failing > 1 else ''})"
    return f"{finding.engine} {finding.backend} {finding.mode}: {finding.outcome} at {where}"


def _header(finding: Finding, p: Plan) -> str:
    c = p.conditions
    pseudo = ""
    if "+" in finding.engine:
        version = load_launch_data().versions.get(finding.engine)
        said = (version.pseudo if version and version.pseudo else
                f"not a release: {finding.release} with its fix's line reverted").rstrip(".")
        pseudo = "\n" + textwrap.fill(f"{finding.engine} is {said}. The script reverts that line at run time and "
                                      "says so.", 100, subsequent_indent="    ")

    def wrap(text: str) -> str:
        return textwrap.fill(text, 100, subsequent_indent="    ")

    lines = [
        title(finding), "",
        wrap(f"Finding {finding.id}. {finding.story or ''}".strip()) + pseudo, "",
        "Reached by:", wrap("    " + c.launch_command), *([wrap("Note: " + c.caveat)] if c.caveat else []), "",
        wrap(f"Recipe: {c.recipe or 'as in the command'}"),
        wrap(f"Scheduler: {c.scheduler}"),
        wrap(f"Batch: {c.batch}"),
        wrap(f"KV pool: {c.kv_pool}"),
        wrap(f"Releases affected: {c.releases}"), "",
        wrap(f"Fix: {p.params['fix']} ({p.fix_source})"), "",
        "Run it (CPU only; a fresh virtual environment):", "",
        *["    " + line for line in _deps(finding, p.needs_triton)],
        f"    python {script_name(finding)}            # or: --engine-dir /path/to/sglang/python (your checkout)", "",
        "Exit status 0: every claim it prints was reproduced; 1: one was not.",
    ]
    return "\n".join(lines)


def script_name(finding: Finding) -> str:
    return "repro_" + finding.id.replace("/", "_").replace(".", "_").replace("-", "_") + ".py"


def script(finding: Finding) -> str:
    """The finding's standalone script."""
    p = plan(finding)
    prelude = (TEMPLATES / "prelude.py.tmpl").read_text()
    body = (TEMPLATES / f"{p.kind}.py.tmpl").read_text()
    name, _, version = finding.release.partition("==")
    constants = "\n".join([
        f"NAME = {name!r}",
        f"ENGINE = {finding.engine!r}",
        f"VERSION = {version!r}",
        f"NEEDS_TRITON = {p.needs_triton!r}",
        f"FINDING = {{'id': {finding.id!r}, 'title': {title(finding)!r}}}",
        "P = " + pprint.pformat(p.params, width=110, sort_dicts=True),
    ])
    header = '#!/usr/bin/env python3\n"""' + _header(finding, p).replace('"""', "'''").replace("\\", "\\\\") + '\n"""\n'
    text = header + prelude.replace("# @@CONSTANTS@@", constants, 1) + body
    return text.rstrip("\n") + '\n\n\nif __name__ == "__main__":\n    main()\n'


def write(finding: Finding, out_dir: str | Path) -> Path:
    from workbench.files import atomic_write_text

    path = Path(out_dir) / script_name(finding)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, script(finding))
    path.chmod(0o755)
    return path


__all__ = ["Mode", "Plan", "plan", "safe_width", "script", "script_name", "title", "write"]
