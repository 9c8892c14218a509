"""A vLLM launch command, resolved as the engine version's configuration would.

``vllm serve MODEL --max-model-len N --block-size B --speculative-config JSON ...``: the model
length (given, or the model's), the block size (given, or 16), the speculative method and its
token count ``k`` (MTP's default is the model's MTP layer count), the lookahead the scheduler
reserves (k for EAGLE, MTP and draft models, k + 1 for DFlash, 0 for ngram), the batch limits
(by GPU memory), and the decode context-parallel size. The geometry takes ``block_size`` as its
page size and ``k`` as its draft tokens; what is vLLM's own (DCP, lookahead, batched tokens)
rides in ``Deployment.extra`` for the vLLM backends.

What sets tables up (``launch_names``): a DSA model has the sparse indexer's expanded block
table (``"dsa-indexer"``, vLLM's ``v1/attention/backends/mla/indexer.py``). The vLLM backends
declare that name in ``TableBackend.launch_names``; the registry picks them (``vllm_backends``).
The v1 block table itself leaves no room for drafts but is never read past its row (the
scheduler and the drafter clamp, docs/engine-facts.md#vllm-limits-near-max-model-len), so a deployment
without DSA sets up no table the workbench models.
"""

from __future__ import annotations

from collections.abc import Mapping

from workbench.analysis.reach import reach_rule
from workbench.engines.launch import LaunchVersion
from workbench.model.geometry import Mode
from workbench.preflight.command import LaunchCommand
from workbench.preflight.deployment import (
    DEFAULT,
    GIVEN,
    MODEL,
    WORKBENCH,
    Deployment,
    Settings,
    check_geometry,
    context_source,
    launch_data,
    resolve_model,
    unknown_model,
)
from workbench.preflight.flags import VLLM_SPECULATIVE_KEYS, PreflightError, nearest

DSA_INDEXER = "dsa-indexer"  # the sparse indexer's expanded block table, DSA models only
_SGLANG_CONTEXT_KEYS = ["max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings"]


def _gpu_class(gpu: Mapping[str, object], name: str) -> str:
    """vLLM's batch defaults by device memory: 160 GiB or more, 70 GiB or more and not an A100."""
    memory = float(str(gpu["memory_gib"]))
    if memory >= 160:
        return "huge_gpu"
    if memory >= 70 and name != "a100":
        return "large_gpu"
    return "other"


def _by_gpu(version: LaunchVersion, name: str, gpu_class: str) -> int:
    table = version.default(name).value
    assert isinstance(table, dict)
    value = table.get(gpu_class, table.get("large_gpu" if gpu_class == "huge_gpu" else "other"))
    return int(str(value))


def _speculative(config: object, version: LaunchVersion, mtp_layers: int, s: Settings) -> tuple[str | None, int, int]:
    """(method, k, lookahead) of a ``--speculative-config`` object."""
    if config is None:
        return None, 0, 0
    flag = "--speculative-config"
    if not isinstance(config, dict):
        raise PreflightError(f"{flag}: {type(config).__name__} is not a JSON object (write '{{\"method\": \"mtp\", ...}}')")
    for key in config:
        if key not in VLLM_SPECULATIVE_KEYS:
            raise PreflightError(f"{flag}: {key!r} is not a key of vLLM's SpeculativeConfig "
                                 f"(nearest: {nearest(key, VLLM_SPECULATIVE_KEYS)})")
    methods = version.default("speculative_methods").value
    assert isinstance(methods, list)
    method = config.get("method")
    if method not in methods:
        raise PreflightError(f"{flag}: method {method!r} is not one of {', '.join(map(str, methods))}")
    k = config.get("num_speculative_tokens")
    if k is None and (method == "mtp" or str(method).endswith("_mtp")) and mtp_layers > 0:
        k = s.add("num_speculative_tokens", mtp_layers, MODEL, version.default("mtp_num_speculative_tokens").source)
    elif isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 1024:
        raise PreflightError(f"{flag}: num_speculative_tokens {k!r} is out of range (allowed: an integer, 1 to 1024)")
    else:
        s.add("num_speculative_tokens", k, GIVEN, flag)
    s.add("speculative_method", method, GIVEN, flag)
    rules = version.default("lookahead").value
    assert isinstance(rules, dict)
    # eagle, eagle3 and every MTP model type are EAGLE-style drafters (use_eagle, config/speculative.py)
    kind = str(method) if method in rules else "eagle" if method in ("eagle", "eagle3") or "mtp" in str(method) else "other"
    k_int = int(str(k))
    lookahead = {"k": k_int, "k + 1": k_int + 1}.get(str(rules.get(kind, 0)), 0)
    s.add("lookahead", lookahead, DEFAULT, f"{rules.get(kind, 0)} for {method}: {version.default('lookahead').source}")
    return str(method), k_int, lookahead


def resolve_vllm(cmd: LaunchCommand, version: LaunchVersion, *, model_config: str | None, gpu: str,
                 overshoot: int | None) -> Deployment:
    data = launch_data()
    s = Settings()
    values, spelled = cmd.flags.values, cmd.flags.spelled
    positionals = cmd.flags.positionals
    model_path = values.get("model") or (positionals[0] if positionals else None)
    if len(positionals) > 1:
        raise PreflightError(f"command: unexpected argument {positionals[1]!r} (vllm serve takes one MODEL)")
    if not isinstance(model_path, str):
        raise PreflightError("MODEL: missing (write vllm serve MODEL, or --model MODEL)")
    model, preset, kv = resolve_model(model_path, model_config, data, _SGLANG_CONTEXT_KEYS, "MODEL")
    if model is None:
        raise unknown_model(model_path, "MODEL", data, " (whether the model has DSA's indexer decides its tables)")
    s.add("model", model_path, GIVEN, spelled.get("model", "vllm serve MODEL"))
    context = model.context_len or (preset.context_len if preset else None)
    if "max_model_len" not in values and context is None:
        raise PreflightError(f"--max-model-len: missing ({model_path!r} has no preset context length)")
    max_model_len = int(str(s.given_or("max_model_len", cmd, "max_model_len", context, context_source(model, preset), MODEL)))
    block = version.default("block_size")
    block_size = int(str(s.given_or("block_size", cmd, "block_size", block.value, block.source)))
    method, k, lookahead = _speculative(values.get("speculative_config"), version, model.num_nextn_predict_layers, s)
    gpu_class = _gpu_class(data.gpus[gpu], gpu)
    max_num_seqs = int(str(s.given_or("max_num_seqs", cmd, "max_num_seqs", _by_gpu(version, "max_num_seqs", gpu_class),
                                      f"{gpu_class} ({gpu}): {version.default('max_num_seqs').source}")))
    batched = int(str(s.given_or("max_num_batched_tokens", cmd, "max_num_batched_tokens",
                                 _by_gpu(version, "max_num_batched_tokens", gpu_class),
                                 f"{gpu_class} ({gpu}): {version.default('max_num_batched_tokens').source}")))
    dcp_default = version.default("decode_context_parallel_size")
    dcp = int(str(s.given_or("decode_context_parallel_size", cmd, "decode_context_parallel_size", dcp_default.value,
                             dcp_default.source)))
    tp = values.get("tensor_parallel_size", 1)
    if isinstance(tp, int) and tp % dcp:
        raise PreflightError(f"--decode-context-parallel-size: {dcp} does not divide --tensor-parallel-size {tp}")
    rule = reach_rule(version)
    if overshoot is not None and overshoot != rule.overshoot:
        s.notes.append(f"--overshoot {overshoot} ignored: {version.engine} schedules no position past max_model_len - 1 "
                       f"({rule.sources.get('overshoot', '')})")
    s.add("overshoot", rule.overshoot, DEFAULT, rule.sources.get("overshoot", ""))
    s.add("gpu", gpu, WORKBENCH, "--gpu (picks vLLM's batch defaults)")
    geometry = check_geometry(context_len=max_model_len, page_size=block_size, draft_tokens=k, spec_steps=max(k, 1),
                              spec_topk=1, max_bs=max_num_seqs, width_gen="g1")
    names = (DSA_INDEXER,) if model.dsa else ()
    modes = ((Mode.TARGET_VERIFY, 0),) if k else ((Mode.DECODE, 0),)
    extra = {"method": method, "lookahead": lookahead, "dcp_size": dcp, "max_num_batched_tokens": batched}
    return Deployment(version, cmd, model_path, model, preset, "cuda", geometry, names, modes,
                      not values.get("enforce_eager", False), rule, tuple(s.items), tuple(s.notes), kv, extra)
