"""A vLLM launch as the release resolved it (``launch_adapters.vllm``), made into a deployment.

Every value the vLLM tables are sized by comes from the release's own resolution of the command
(its parser, ``create_engine_config`` on the stand-in GPU): the model length its ``ModelConfig``
derives or takes (``model_config.max_model_len``), the KV block size (the attention backends' own
choice where the release makes it per backend), the speculative method and its token count, the
KV slots its scheduler reserves past a request (``num_lookahead_tokens``), the decode
context-parallel size, the batch limits, whether graphs are on, and, for the V0 engine, its
capture length and the attention backend its model runner selects. The reach near the length
limit is the release's own, measured: where the step stops (``check_stop``) and how its scheduler
caps a running request's drafts (section ``kv``, ``vllm.learn_kv``; its ``AsyncScheduler`` where the
launch schedules asynchronously, section ``async``); a V0 launch's, where its scheduler and stop
checker end a request (section ``v0-stop``). A platform plugin's launch takes the constant read
from the source (``data/launch_defaults.json``).

What sets tables up (``launch_names``): a DSA model has the sparse indexer's expanded block table
(``"dsa-indexer"``), the V0 engine its graph block tables (``"v0-graph-block-tables"``), a drafter of
more than one step its draft steps' table (``"draft-steps"``: on an Ascend NPU, where the
vllm-ascend plugin's platform resolved the command, ``platform_plugin``, its drafter replays them
through the graph). The vLLM backends declare those names for their device family; the registry
picks them (``workbench.preflight.vllm_backends``).
Every V1 launch on a CUDA GPU sets up the worker's block table (``"v1-block-table"``): its row
against the blocks the release's KV cache manager gives a request verifying its drafts near
``max_model_len`` (docs/engine-facts.md#vllm-v1-block-table). One with speculative decoding,
asynchronous scheduling and prefix caching also gets the scheduler's padding of a prompt sent again
(``"v1-waiting-pad"``, docs/engine-facts.md#vllm-v1-waiting-pad).
A hybrid model (the release's ``ModelConfig.is_hybrid``) sets up its state layers' buffers, those
the layer type's metadata builder allocates for the launch: with Gated-DeltaNet layers and
speculative decoding, ``spec_state_indices_tensor`` (``"gdn-spec-state-indices"``); every other
one is named as a part no backend models, and the verdict says so instead of SAFE.
"""

from __future__ import annotations

from workbench.analysis.reach import ReachRule, reach_rule
from workbench.backends.vllm import gdn_state_indices as gdn_state
from workbench.backends.vllm import v0_graph_block_tables as v0_graphs
from workbench.backends.vllm import v1_block_table as v1_table
from workbench.engines.commands.adapters import ENGINE, Resolution
from workbench.engines.store import vllm_releases
from workbench.model.geometry import Mode
from workbench.preflight.deployment import Deployment, ResolveContext, Settings, check_geometry, gpu_setting

DSA_INDEXER = "dsa-indexer"  # the sparse indexer's expanded block table, DSA models only
V0_GRAPHS = "v0-graph-block-tables"  # the V0 model runner's captured block table
V1_TABLE = "v1-block-table"  # the V1 worker's block table, filled from the KV cache manager
WAITING_PAD = "v1-waiting-pad"  # the V1 scheduler's padding of a waiting request to 1 + k tokens
DRAFT_STEPS = "draft-steps"  # a drafter that runs more than one step on the platform's graph
# The parser destinations whose values the settings below are resolved from: a flag writing one
# of them is "modelled" (shown as given, beside the value the engine resolved).
MODELLED_FLAGS = {
    "model", "model_tag", "max_model_len", "block_size", "speculative_config", "num_speculative_tokens",
    "speculative_model", "max_num_seqs", "max_num_batched_tokens", "decode_context_parallel_size",
    "prefill_context_parallel_size", "enforce_eager", "max_seq_len_to_capture", "num_scheduler_steps",
    "async_scheduling", "enable_prefix_caching",
}
# The engine's settings the deployment is built from.
READS = MODELLED_FLAGS | {
    "model_config.max_model_len", "cache_config.block_size", "speculative_config.method",
    "speculative_config.num_speculative_tokens", "scheduler_config.max_num_seqs", "scheduler_config.max_num_batched_tokens",
    "parallel_config.decode_context_parallel_size", "parallel_config.prefill_context_parallel_size",
    "model_config.enforce_eager", "model_config.max_seq_len_to_capture",
    "scheduler_config.num_lookahead_slots", "num_lookahead_tokens", "v0_attention_backend", "platform_plugin",
    "scheduler_config.async_scheduling", "cache_config.enable_prefix_caching", "model_config.use_async_output_proc",
    "recurrent_state", "recurrent_state.buffers", "recurrent_state.accepted_index",
}


def _first(s: Settings, *names: str) -> object:
    """The engine's value of the first of ``names`` it has (recorded under that name)."""
    for name in names:
        if name in s.engine:
            return s.take(name)
    return None


def _lookahead(s: Settings) -> int:
    """KV slots past a request: the v1 scheduler's ``num_lookahead_tokens``, else V0's lookahead slots."""
    found = _first(s, "num_lookahead_tokens", "scheduler_config.num_lookahead_slots")
    return int(str(found)) if found is not None else 0


def deployment(resolution: Resolution, context: ResolveContext) -> Deployment:
    """The deployment the rows check, from the release's own resolution of the command."""
    s = Settings(resolution, READS)
    model = resolution.model
    assert model is not None  # a resolved answer carries the model the engine loaded
    s.items["gpu"] = gpu_setting(context)
    max_model_len = int(str(s.take("model_config.max_model_len")))
    block_size = int(str(s.take("cache_config.block_size")))
    method = _first(s, "speculative_config.method")
    k = int(str(_first(s, "speculative_config.num_speculative_tokens") or 0))
    lookahead = _lookahead(s)
    # The v1 scheduler reserves KV slots for the drafts only where the drafter runs a model over them
    # (its speculative config's use_eagle, uses_draft_model): ngram, ngram_gpu and suffix match text.
    drafter_runs_model = "num_lookahead_tokens" in s.engine and lookahead > 0
    max_num_seqs = int(str(s.take("scheduler_config.max_num_seqs")))
    batched = _first(s, "scheduler_config.max_num_batched_tokens")
    dcp = int(str(_first(s, "parallel_config.decode_context_parallel_size") or 1))
    pcp = int(str(_first(s, "parallel_config.prefill_context_parallel_size") or 1))
    eager = bool(_first(s, "model_config.enforce_eager"))
    capture = _first(s, "model_config.max_seq_len_to_capture")
    v0_backend = _first(s, "v0_attention_backend")  # not the V1 parser's --attention-backend
    plugin = _first(s, "platform_plugin")  # vllm-ascend==X on an NPU: its platform resolved the command
    asynchronous = bool(_first(s, "scheduler_config.async_scheduling"))  # None (not resolved) is off
    prefix_caching = bool(_first(s, "cache_config.enable_prefix_caching"))
    for flag in resolution.flags:  # what the command gave for them, beside what the engine made of it
        if flag.dest in MODELLED_FLAGS and flag.dest not in s.items:
            s.take(flag.dest)
    v1 = v0_backend is None and plugin is None
    measured = v1_table.bracketing_release(context.choice.release) if v1 else None
    stopped = vllm_releases.bracketing(v0_graphs.stop_forms(), context.choice.release) if v0_backend else None
    if measured is not None:
        rule = _measured_reach(measured, context.choice.release, max_model_len, k, asynchronous and k > 0)
    elif stopped is not None:
        rule = _v0_reach(stopped, context.choice.release, max_model_len, bool(_first(s, "model_config.use_async_output_proc")))
    else:
        rule = reach_rule(context.version)
    cap = v1_table.releases()[measured].scheduler_cap if measured else None
    if cap == "uncapped":
        s.notes.append(f"{measured}'s Scheduler.schedule caps no running request's step by max_model_len (measured): "
                       "a step's drafts reach past it; the vllm-v1-block-table row models that step")
    if context.overshoot is not None and context.overshoot != rule.overshoot:
        why = "the vllm-v1-block-table row models its steps" if cap == "uncapped" else \
            f"its scheduler carries no committed token past its cap ({rule.sources['overshoot']})"
        s.notes.append(f"--overshoot {context.overshoot} ignored: {context.choice.release}: {why}")
    s.add("overshoot", rule.overshoot, ENGINE if measured or stopped else "read", rule.sources["overshoot"])
    geometry = check_geometry(context_len=max_model_len, page_size=block_size, draft_tokens=k, spec_steps=max(k, 1),
                              spec_topk=1, max_bs=max_num_seqs, width_gen="g1")
    names: tuple[str, ...] = ()
    if model.dsa:
        if plugin is None:  # the CUDA indexer's builder; a plugin's platform brings its own sparse attention
            names += (DSA_INDEXER,)
        s.add("dsa", True, ENGINE, f"the model's config ({model.architecture}: index_topk set), as the release loaded it")
    if v0_backend is not None:
        names += (V0_GRAPHS,)
    elif v1:  # a platform plugin's model runner keeps its own tables
        names += (V1_TABLE,)
        if k and asynchronous and prefix_caching:  # a prompt sent again is padded and scheduled ahead of its output
            names += (WAITING_PAD,)
            s.notes.append("v1-waiting-pad: its lengths are prompts sent again with all but their last token in the "
                           "prefix cache (or resumed after preemption) while another request decodes; the scheduler "
                           f"may pad such a prompt to 1 + {k} tokens (docs/engine-facts.md#vllm-v1-waiting-pad)")
    if k > 1 and plugin is not None and drafter_runs_model:  # the plugin's drafter steps through its graph
        names += (DRAFT_STEPS,)
    state_names, state_extra = _recurrent_state(s, k, plugin)
    names += state_names
    modes = ((Mode.TARGET_VERIFY, 0),) if k else ((Mode.DECODE, 0),)
    extra = {"method": method, "lookahead": lookahead, "dcp_size": dcp, "pcp_size": pcp, "max_num_batched_tokens": batched,
             "max_seq_len_to_capture": capture, "attention_backend": v0_backend, "num_speculative_tokens": k,
             "platform_plugin": plugin, "graphs": not eager, **state_extra}
    family = "ascend-npu" if context.gpu.platform == "npu" else "cuda"
    return Deployment(context.version, context.command, context.choice, model.path, model, family, geometry, names, modes,
                      not eager, rule, s.rest(resolution.flags), resolution.flags, (*resolution.notes, *s.notes), extra)


def _recurrent_state(s: Settings, k: int, plugin: object) -> tuple[tuple[str, ...], dict[str, object]]:
    """What a hybrid model's state layers set up, as the release's own builder allocated it
    (``engines/vllm/recurrent_state.py``): the GDN speculative state indices where they are modelled
    (``"gdn-spec-state-indices"``), and every other buffer named as a part no backend models, so that
    the verdict cannot be SAFE about it."""
    kind = _first(s, "recurrent_state")
    if kind is None:  # not a hybrid model, by the release's ModelConfig.is_hybrid
        return (), {}
    buffers = _first(s, "recurrent_state.buffers")
    index = _first(s, "recurrent_state.accepted_index")
    if plugin is not None:  # the plugin's platform brings its own state layers' metadata: not vLLM's builder
        return (f"linear-attention state ({kind}) on {plugin}'s platform",), {}
    if not isinstance(buffers, dict):
        return (f"linear-attention state ({kind}): its buffers ({buffers}) not observed",), {}
    shape = buffers.get("spec_state_indices_tensor")
    modelled = kind == "GDN_ATTN" and k > 0 and isinstance(shape, list) and index in gdn_state.INDEX_FORMS
    rest = sorted(name for name in buffers if not (modelled and name == "spec_state_indices_tensor"))
    names: tuple[str, ...] = (gdn_state.LAUNCH_NAME,) if modelled else ()
    if rest:
        names += (f"linear-attention state ({kind}): {', '.join(rest)}",)
    return names, ({"gdn_spec_state_shape": shape, "gdn_accepted_index": index} if modelled else {})


def _measured_reach(release: str, launched: str, max_model_len: int, drafts: int, asynchronous: bool) -> ReachRule:
    """The reach of a V1 launch of ``launched`` from ``release``'s measured scheduler (its own, or
    the measured neighbour that stands in for it): the last committed length at which its
    ``decode_step`` still runs a step (the request stops on holding ``max_model_len`` tokens), no
    committed token past it, and reads clamped where the KV manager caps the slots. A launch that
    schedules its drafts asynchronously takes the cap measured on the release's ``AsyncScheduler``
    (section ``async``); where that was not measured, the synchronous one, and the rule says so."""
    kv = v1_table.releases()[release]
    how = f"measured: {release}'s Scheduler.schedule and update_from_output (its kv section)"
    cap, assumed = kv.scheduler_cap, None
    if asynchronous and kv.async_cap is not None:
        cap = kv.async_cap
        how = f"measured: {release}'s AsyncScheduler driven as the engine core's batch queue (its async section)"
    elif asynchronous:
        assumed = (f"the asynchronous scheduler caps as {release}'s synchronous one ({cap}): "
                   f"its AsyncScheduler was not measured (workbench engines learn {release})")
    last = v1_table.last_step(cap, max_model_len, drafts)
    return ReachRule(engine=launched, cap_offset=max_model_len - last, overshoot=0, clamps_reads=kv.slots == "capped",
                     sources={"committed_cap": f"{how}: the last step runs at max_model_len - {max_model_len - last}",
                              "overshoot": how, "lookahead_clamp": f"measured: {release}'s allocate_slots ({kv.slots})"},
                     substituted=release if release != launched else None, assumed=assumed)


def _v0_reach(release: str, launched: str, max_model_len: int, async_output: bool) -> ReachRule:
    """The reach of a V0 launch from ``release``'s measured scheduler and stop checker (its own, or
    the measured neighbour that stands in for it): the largest committed length at which a request
    still gets a decode step, with or without asynchronous output processing as the launch has it."""
    plain, asynchronous = v0_graphs.stop_forms()[release]
    form = asynchronous if async_output else plain
    last = v0_graphs.last_step(form, max_model_len)
    mode = "asynchronous output processing" if async_output else "the stop check before each schedule"
    how = f"measured: {release}'s Scheduler.schedule and StopChecker, with {mode} ({form}; its v0-stop section)"
    return ReachRule(engine=launched, cap_offset=max_model_len - last, overshoot=0, clamps_reads=False,
                     sources={"committed_cap": f"{how}: the last step runs at max_model_len - {max_model_len - last}",
                              "overshoot": how, "lookahead_clamp": "none: the V0 block manager gives the lookahead "
                              "slots past a sequence as they are (vllm-v0-graph-block-tables models them)"},
                     substituted=release if release != launched else None)
