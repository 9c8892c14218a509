"""What conformance runs the models with for a release, and how it loads the release: from its learned data.

``behaviour(engine)`` gives the model settings that stand for the release (its learned
``buffers`` section, ``versions.py``) and how conformance loads it: the module paths where the
learner found each module (by what the module defines, so a release that moved a file needs no
entry of its own), whether its modules import only with torchvision, and for a pseudo-version
the released wheel it loads and the one-line patch applied to it. A setting the learner could not
measure is None, with why (``unlearned``): conformance then skips the rows that need it, saying so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench.engines.sglang.learn_buffers import MODULE_KEYS
from workbench.engines.store.versions import EngineVersion, engine_version

# The settings each conformance row's model needs, by the start of the row's function name.
NEEDS = {
    "allocation_sizing.get_req_to_token_extra_context_len": ("width_gen",),
    "allocation_sizing.get_alloc_len_per_decode": ("width_gen",),
    "AscendAttnBackend.replay[mirror]": ("ascend_rule", "ascend_spec_fill"),
    "AscendAttnBackend": ("ascend_rule",),
    "DeepseekSparseAttnBackend.init_cuda_graph_state": ("dsa_rule", "dsa_rows"),
    "DeepseekSparseAttnBackend.replay[draft-extend]": ("dsa_rule", "dsa_replay", "dsa_draft_extend_rows"),
    "DeepseekSparseAttnBackend.replay": ("dsa_rule", "dsa_replay"),
    "NPUPagedTokenToKVPoolAllocator.alloc_decode": ("npu_gather",),
    "NPUPagedTokenToKVPoolAllocator.alloc_extend": ("npu_extend_tail", "npu_extend_dtype"),
    "PagedTokenToKVPoolAllocator": ("cuda_gather", "cuda_merge_bound"),
    "trtllm_mha_graph_metadata.update_trtllm_mha_graph_metadata": ("trtmha_graph_fill",),
    "kv_indices.create_flashmla_kv_indices_triton[flashmla]": ("flashmla_grid",),
    "kv_indices.create_flashmla_kv_indices_triton[trtllm-mla]": ("trtmla_grid",),
}
# setting -> (component, field) of the learned section
WHERE = {"ascend_rule": ("sglang-ascend-block-tables", "rule"), "dsa_rule": ("sglang-dsa-page-table", "rule"),
         "dsa_replay": ("sglang-dsa-page-table", "replay"), "dsa_rows": ("sglang-dsa-page-table", "rows"),
         "dsa_draft_extend_rows": ("sglang-dsa-page-table", "draft_extend_rows"),
         "npu_gather": ("allocator", "gather"), "npu_extend_tail": ("allocator", "extend_tail"),
         "npu_extend_dtype": ("allocator", "extend_dtype"),
         "trtmha_graph_fill": ("sglang-trtllm-mha-page-table", "graph_fill"),
         "ascend_spec_fill": ("sglang-ascend-block-tables", "spec_fill"),
         "flashmla_grid": ("sglang-flashmla-page-table", "grid"), "trtmla_grid": ("sglang-trtllm-mla-page-table", "grid")}


def _fact_value(version: EngineVersion, setting: str) -> tuple[Any, str | None]:
    """A setting's value and, where there is none, why (the fact's finding or reason)."""
    facts = version.facts
    if setting == "width_gen":
        fact = facts.get("width_gen")
    elif setting in WHERE:
        component, name = WHERE[setting]
        fact = facts.get("backends", {}).get(component, {}).get(name)
        if component in version.fields and name in version.fields[component]:  # a pseudo-version's own
            return version.fields[component][name], None
    else:
        fact = facts.get("conformance", {}).get(setting)
    if not isinstance(fact, Mapping):
        return None, "not learned"
    if fact.get("value") is None:
        return None, str(fact.get("finding") or fact.get("reason") or "not measured")
    return fact["value"], None


def behaviour(engine: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model settings (``backends`` among them: the backends the release's data lists, each
    with its fields) and how to load the release (``module_paths``, ``wheel``, ``patch``,
    ``torchvision``, and ``unlearned``: setting -> why it has no value)."""
    if not engine.startswith("sglang=="):  # the worker loads SGLang's functions; vLLM's run elsewhere
        raise ValueError(f"engine: {engine!r} is not an SGLang version: this command runs SGLang's functions; "
                         "vLLM's own code is checked by tests/test_vllm.py (tests/vllm_released.py, cached wheels)")
    from workbench.engines.store import learned, releases, versions

    # what the scheduler rows need, for every release (``reach_facts``: its learned reach section)
    reach = {"engine": engine, "reach_facts": learned.section(engine.split("+", 1)[0], "reach")}
    if engine not in versions.load_versions():
        if not releases.is_listed(engine):
            engine_version(engine)  # raises, naming the modelled versions
        # a listed release without buffer data: only the rows whose model needs none run
        return {**reach, "backends": {}, "unmodelled": f"{engine} has no learned buffer data "
                "(only the rows whose model needs none run)"}, read_load(engine)
    version = engine_version(engine)
    settings: dict[str, Any] = dict(reach)
    unlearned: dict[str, str] = {}
    for setting in ("width_gen", *WHERE, "cuda_gather", "cuda_merge_bound"):
        settings[setting], why = _fact_value(version, setting)
        if why is not None:
            unlearned[setting] = why
    settings["backends"] = {component: dict(fields) for component, fields in version.fields.items()}
    conformance = version.facts.get("conformance", {})
    found = conformance.get("module_paths", {})
    load: dict[str, Any] = {
        "absent_modules": {key: " or ".join(names) for key, (_, names) in MODULE_KEYS.items() if key not in found},
        "module_paths": {key: entry["module"] for key, entry in conformance.get("module_paths", {}).items()},
        "names": {key: entry["name"] for key, entry in conformance.get("module_paths", {}).items() if "name" in entry},
        "torchvision": bool(conformance.get("torchvision", {}).get("value")),
        "tolerant": bool(conformance.get("tolerant", {}).get("value")),
        "unlearned": unlearned,
    }
    pseudo = version.facts.get("pseudo")
    if pseudo is not None:
        if not pseudo.get("patch"):
            raise ValueError(f"engine: {engine} is a pseudo-version without a patch (data/engines/pseudo.json): its "
                             f"change is not in any code conformance can run; check its base, {pseudo['base']}")
        load["wheel"] = pseudo["base"]
        load["patch"] = pseudo["patch"]["value"]
    return settings, load


def read_load(engine: str) -> dict[str, Any]:
    """How a release without learned buffer data loads, as its reach facts were learned
    (``reach_read.json``: ``torchvision`` true, or ``"stand-in"``: metadata from the cache's folder,
    code stood in; ``triton``: triton's own decorators at import, its kernels never interpreted)."""
    import json

    from workbench.engines.sglang.reach_learn import READ_FACTS

    read = json.loads(READ_FACTS.read_text())["releases"].get(engine, {})
    return dict(read.get("load", {}))


def unlearned_reason(engine: str, function: str, unlearned: Mapping[str, str]) -> str | None:
    """Why the row ``function`` cannot run for ``engine`` (a setting its model needs was not
    learned), or None."""
    for prefix, needs in NEEDS.items():
        if function.startswith(prefix):
            missing = [f"{need} ({unlearned[need]})" for need in needs if need in unlearned]
            if missing:
                return f"{engine}'s learned data has no {'; no '.join(missing)}"
    return None
