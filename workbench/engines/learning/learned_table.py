"""The tables of learned releases: per release, every buffer's value and how it was obtained.

``workbench engines releases NAME --table`` prints the page ``docs/releases-NAME-table.md`` from the
learned files (``page``), so the table in ``docs/`` is the data's, regenerated, never edited by hand
(``tests/test_learned.py`` checks that each page is the one the files give).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench.engines.docs_pages import generated_page, page_path
from workbench.engines.store import learned
from workbench.engines.store.releases import releases

# column -> (path in the buffers section, short title)
COLUMNS: tuple[tuple[str, str], ...] = (
    ("width_gen", "W gen"),
    ("backends.sglang-ascend-block-tables.rule", "Ascend"),
    ("backends.sglang-ascend-block-tables.spec_fill", "Ascend fill"),
    ("backends.sglang-dsa-page-table.rule", "DSA"),
    ("backends.sglang-dsa-page-table.replay", "DSA replay"),
    ("backends.sglang-dsa-page-table.rows", "DSA rows"),
    ("backends.allocator.gather", "NPU gather"),
    ("backends.allocator.extend_tail", "NPU tail"),
    ("backends.sglang-fa3-page-table.rule", "FA3"),
    ("backends.sglang-xpu-page-table.rule", "XPU"),
    ("backends.sglang-trtllm-mha-page-table.rule", "TRT MHA"),
    ("backends.sglang-trtllm-mha-page-table.graph_fill", "TRT MHA fill"),
    ("backends.sglang-flashmla-page-table.rule", "FlashMLA"),
    ("backends.sglang-flashmla-page-table.grid", "FlashMLA grid"),
    ("backends.sglang-trtllm-mla-page-table.rule", "TRT MLA"),
    ("backends.sglang-trtllm-mla-page-table.grid", "TRT MLA grid"),
    ("backends.sglang-aiter-page-table.rule", "AITER"),
    ("backends.sglang-flashinfer-kv-indices.draft-decode", "FI draft"),
    ("backends.sglang-flashinfer-mla-kv-indices.draft-decode", "FI-MLA draft"),
    ("backends.sglang-triton-kv-indices.draft-decode", "Triton draft"),
    ("backends.sglang-aiter-kv-indices.draft-decode", "AITER draft"),
    ("backends.sglang-flashinfer-kv-indices.target-verify", "FI verify"),
    ("backends.sglang-flashinfer-mla-kv-indices.target-verify", "FI-MLA verify"),
    ("backends.sglang-aiter-kv-indices.target-verify", "AITER verify"),
    ("conformance.cuda_gather", "CUDA alloc"),
)
# vllm-ascend's learned files hold the one buffer its code adds over vLLM's
ASCEND_COLUMNS: tuple[tuple[str, str], ...] = (("backends.vllm-ascend-block-table.drafter", "drafter's block table"),)
SHORT = {"context": "ctx", "context-plus-draft": "ctx+D", "req-to-token": "W", "npu-legacy": "legacy",
         "npu-clamped": "clamped", "dynamic": "dyn", "static": "static", "max-bs-topk-ctx": "bs·k·ctx",
         "max-bs-ctx": "bs·ctx", "batch-topk-ctx": "b·k·ctx", "max-tokens-ctx": "tok·ctx", "paged-ctx": "pg·ctx",
         "paged-ctx-plus-draft": "pg·ctx+D", "cuda-masked": "after", "cuda-checked": "before",
         "max-num-tokens": "tok", "max-bs": "bs", "guarded": "guard", "unguarded": "unguard",
         "context-floor": "⌊ctx⌋", "step-reads": "reads", "verify-reads": "verify", "committed": "s",
         "live-pages": "live", "row-width": "row", "row-blocks": "blocks", "per-request": "req"}


def _fact(section: Mapping[str, Any], path: str) -> Mapping[str, Any] | None:
    node: Any = section
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None


def cell(fact: Mapping[str, Any] | None) -> str:
    """``ctx+D`` measured, ``ctx+D (r)`` read, ``-`` absent, ``?`` not modelled (a finding),
    ``undetermined: a / b`` where the states measured do not tell forms apart, and each class's
    value where a release's drafter classes differ."""
    if fact is None:
        return " "
    if fact.get("how") == "absent":
        return "-"
    value = fact.get("value")
    if value is None and fact.get("undetermined"):  # several forms agree on every state measured
        return "undetermined: " + " / ".join(SHORT.get(str(f), str(f)) for f in fact["undetermined"])
    if value is None and isinstance(fact.get("proposers"), Mapping):  # the drafter classes differ
        shown = ", ".join(f"{name} {SHORT.get(str(p.get('value')), p.get('value'))}"
                          for name, p in fact["proposers"].items())
        return shown + (" (r)" if fact.get("how") == "read" else "")
    if value is None:
        return "?"
    if isinstance(value, Mapping):
        text = f"{SHORT.get(str(value['rule']), value['rule'])} {value['check']}"
    else:
        text = SHORT.get(str(value), str(value))
    return text + (" (r)" if fact.get("how") == "read" else "")


def table(name: str = "sglang") -> str:
    """The markdown table: one row per listed release with a learned ``buffers`` section."""
    if name == "vllm":  # vLLM's learner has its own table (parser, resolution, buffers, conformance)
        from workbench.engines.vllm.learn import table as vllm_table

        return vllm_table(list(releases(name)))
    columns = ASCEND_COLUMNS if name == "vllm-ascend" else COLUMNS
    head = "| release | " + " | ".join(title for _, title in columns) + " |"
    lines = [head, "|" + "---|" * (len(columns) + 1)]
    for engine in releases(name):
        data = learned.load(engine)
        section = (data or {}).get("sections", {}).get("buffers")
        if section is None:
            continue
        cells = [cell(_fact(section, path)) for path, _ in columns]
        lines.append(f"| {engine.split('==', 1)[1]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# engine -> (the page's title, what its table holds; links are relative to docs/)
PAGES: dict[str, tuple[str, str]] = {
    "sglang": ("SGLang releases: what each one's own code gave, per buffer",
               "What the cells and abbreviations mean: [releases.md](releases.md#engine-releases-learned-from-their-own-code)."),
    "vllm": ("vLLM releases: parser, resolution, buffers and conformance, per release",
             "What each column means: [releases.md](releases.md#vllm-release-by-release-its-own-parser-defaults-and-buffers)."),
    "vllm-ascend": ("vllm-ascend releases: the one buffer its code adds",
                    "Which releases are listed and how they are read: "
                    "[releases.md](releases.md#vllm-release-by-release-its-own-parser-defaults-and-buffers)."),
}


def page(name: str = "sglang") -> str:
    """The docs page of engine ``name``'s table (``page_path(name)``), as ``--table`` prints it."""
    rows = table(name)  # first: an engine that is not listed is refused there, with the listed ones
    title, about = PAGES[name]
    return generated_page(title=title, command=f"workbench engines releases {name} --table > {page_path(name)}",
                          source=f"the learned files, `data/engines/{name}/`", about=about, table=rows)
