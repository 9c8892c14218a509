"""An SGLang launch as the release resolved it (``launch_adapters.sglang``), made into a deployment.

Every value the tables are sized by comes from the release's own resolution: the device, the
speculative algorithm and its steps, topk and draft tokens (NGRAM's and EAGLE's defaults, the
topk-1 rule), the attention backend the engine picks for the model and GPU, the page size, the
CUDA-graph batch limit, whether graphs are on, and the context length its ``ModelConfig`` derives
from the model's config (rope scaling, ``--context-length``). What only the running engine
decides (whether the draft keeps KV, which allocator a page size takes) is read from its source
(``data/launch_defaults.json``); the width generation and rules are the buffer release's data.
"""

from __future__ import annotations

from typing import Any

from workbench.analysis.reach import Conditions, reach_rule
from workbench.engines.commands.adapters import ENGINE, READ, WORKBENCH, ModelFacts, Resolution
from workbench.model.geometry import Mode
from workbench.preflight import pool as kv_pool
from workbench.preflight.deployment import Deployment, ResolveContext, Settings, check_geometry, gpu_setting

# Algorithms whose graphs the workbench models, and the graphs each captures (Mode, step).
MODELLED_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
# The engine's settings the deployment is built from (a flag writing one of them is "modelled").
READS = {
    "model_path", "device", "context_length", "page_size", "attention_backend", "decode_attention_backend",
    "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
    "speculative_ngram_max_bfs_breadth", "cuda_graph_max_bs", "cuda_graph_max_bs_decode", "cuda_graph_bs",
    "cuda_graph_bs_decode", "cuda_graph_config", "disable_cuda_graph", "cuda_graph_backend_decode",
    "disable_overlap_schedule", "kv_cache_dtype", "model_config.context_len", "mem_fraction_static", "tp_size",
    "max_total_tokens",
}


def _modes(algorithm: str | None, steps: int) -> tuple[tuple[Mode, int], ...]:
    """The graphs the deployment captures: decode without speculation; verify for NGRAM; verify,
    the drafter's last (widest) step and draft-extend for the EAGLE family."""
    if algorithm is None:
        return ((Mode.DECODE, 0),)
    if algorithm == "NGRAM":
        return ((Mode.TARGET_VERIFY, 0),)
    return ((Mode.TARGET_VERIFY, 0), (Mode.DRAFT_DECODE, steps - 1), (Mode.DRAFT_EXTEND, 0))


def _decode_graph(s: Settings) -> tuple[int | None, bool]:
    """(largest decode-graph batch, graphs on) from the release's own fields: ``cuda_graph_max_bs``
    and ``disable_cuda_graph``, or the per-phase ``cuda_graph_config`` of the releases that have it."""
    config = s.engine.get("cuda_graph_config")
    disabled = bool(s.take("disable_cuda_graph"))
    if config is not None and isinstance(config.value, dict) and isinstance(config.value.get("decode"), dict):
        decode: dict[str, Any] = config.value["decode"]
        s.add("cuda_graph_max_bs", decode.get("max_bs"), config.origin, f"cuda_graph_config.decode.max_bs: {config.source}")
        return decode.get("max_bs"), not disabled and decode.get("backend") != "disabled"
    max_bs = s.take("cuda_graph_max_bs")
    return (int(max_bs) if isinstance(max_bs, int) else None), not disabled


def _speculative(s: Settings, context: ResolveContext) -> tuple[str | None, int, int, int, bool]:
    """(algorithm, draft tokens D, steps, topk, draft keeps KV) as the release resolved them."""
    algorithm = s.take("speculative_algorithm")
    if algorithm is None:
        return None, 0, 1, 1, True
    steps = int(str(s.take("speculative_num_steps") or 1))
    topk = s.take("speculative_eagle_topk")
    draft = int(str(s.take("speculative_num_draft_tokens") or steps + 1))
    if algorithm == "NGRAM":
        if topk is None:  # releases that leave it unset use the BFS breadth
            topk = s.take("speculative_ngram_max_bfs_breadth", "speculative_eagle_topk")
        has_kv = bool(s.read("draft_has_kv", context.version, "ngram_draft_has_kv", "NGRAM keeps no draft KV"))
        return "NGRAM", draft, steps, int(str(topk or 1)), has_kv
    return str(algorithm), draft, steps, int(str(topk or 1)), True


def deployment(resolution: Resolution, context: ResolveContext) -> Deployment:
    """The deployment the rows check, from the release's own resolution of the command."""
    s = Settings(resolution, READS)
    model = resolution.model
    assert model is not None  # a resolved answer carries the model the engine loaded
    s.take("model_path")
    s.items["gpu"] = gpu_setting(context)
    device = str(s.take("device") or context.gpu.platform)
    if device == "cuda" and context.gpu.platform == "rocm":  # SGLang calls a ROCm GPU "cuda"; its backends are ROCm's
        device = "rocm"
    algorithm, draft, steps, topk, has_kv = _speculative(s, context)
    backend = s.take("decode_attention_backend") or s.take("attention_backend")
    if s.engine.get("decode_attention_backend") and s.engine["decode_attention_backend"].value is not None:
        s.take("attention_backend")
    page_size = int(str(s.take("page_size") or 1))
    if "context_length" in {f.dest for f in resolution.flags}:
        s.take("context_length")
    context_len = int(str(s.take("model_config.context_len", "context_len")))
    max_bs, graphs = _decode_graph(s)
    width_gen = str(context.version.backend_fields("*").get("width_gen", "g1"))
    s.add("width_gen", width_gen, READ, context.version.backend_source("*", "width_gen") or "g1")
    geometry = check_geometry(context_len=context_len, page_size=page_size, draft_tokens=draft, spec_steps=steps,
                              spec_topk=topk, draft_has_kv=has_kv, max_bs=max_bs or 1, width_gen=width_gen)
    s.add("request_table_width", geometry.request_table_width, WORKBENCH,
          f"W = ctx + extra under {width_gen} (the request table's width)")
    rule = reach_rule(context.version).with_overshoot(context.overshoot)
    if rule.overshoot is not None:
        source = rule.sources.get("overshoot", "")
        s.add("overshoot", rule.overshoot, "given" if context.overshoot is not None else WORKBENCH if source.startswith("workbench")
              else READ, "--overshoot (a what-if: the reach is ctx - 1 plus it)" if context.overshoot is not None else source)
    overlap = _overlap(s)
    found = _pool(s, context, model)
    # A given pool bounds every request (max_req_len); an estimated one only the batches it must hold.
    given = None if found.estimated else found.tokens
    conditions = Conditions(overlap=overlap[0], overlap_source=overlap[1], pool_tokens=given,
                            pool_source=found.source if given else "assumed larger than the context", algorithm=algorithm)
    names: tuple[str, ...] = (str(backend),)
    # The paths the release decided on its platform (decode graphs, a backend's verify path: the
    # adapter's "path." settings) are shown with their origins; what they set up joins the names.
    for name in [n for n in s.engine if n.startswith("path.")]:
        s.take(name)
    features = s.take("launch_features")
    names += tuple(str(f) for f in features) if isinstance(features, list) else ()
    if algorithm is not None and algorithm not in MODELLED_ALGORITHMS:
        names += (f"speculative {algorithm}",)  # no backend models its graphs: the check is undecided
    state = s.take("recurrent_state")
    if state is not None:  # a hybrid model's state pool and indices: no SGLang backend models them yet
        names += (f"linear-attention state ({state})",)
    if model.dsa:
        s.add("dsa", True, ENGINE, f"the release's DSA predicate on {model.architecture}")
    return Deployment(context.version, context.command, context.choice, model.path, model, device, geometry, names,
                      _modes(algorithm, steps), graphs and max_bs is not None, rule, s.rest(resolution.flags),
                      resolution.flags, tuple(resolution.notes), {"algorithm": algorithm}, conditions, found.estimated,
                      found.tokens)


def _overlap(s: Settings) -> tuple[bool | None, str]:
    """Overlap scheduling, as the release's own resolution left it (``disable_overlap_schedule``:
    given, or set by the engine, e.g. off for a speculative worker without spec v2)."""
    disabled = s.engine.get("disable_overlap_schedule")
    if disabled is None:
        return None, ""
    s.take("disable_overlap_schedule")
    return not bool(disabled.value), disabled.source  # the flag as given, or the engine function that set it


def _pool(s: Settings, context: ResolveContext, model: ModelFacts) -> kv_pool.Pool:
    """The KV pool: --max-total-tokens, else estimated from the GPU, the engine's memory fraction,
    the model's weights (a dense config's count) and its KV bytes per token."""
    fraction = s.take("mem_fraction_static")
    tp = s.take("tp_size")
    total = s.take("max_total_tokens")
    weights = kv_pool.dense_weights_bytes(model.config) if model.config else None
    found = kv_pool.estimate(max_total_tokens=int(str(total)) if total is not None else None, gpu=context.gpu.name,
                             gpu_memory_gib=context.gpu.memory_mib / 1024,
                             mem_fraction=float(str(fraction)) if fraction is not None else None, weights_bytes=weights,
                             kv_bytes_per_token=model.kv_bytes_per_token, tp=int(str(tp or 1)), mla=model.attention == "mla")
    s.add("kv_pool_tokens", found.tokens if found.tokens is not None else "unknown",
          "given" if not found.estimated else WORKBENCH, found.source)
    return found
