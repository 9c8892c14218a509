"""An SGLang launch command, resolved as the engine version's argument resolution would.

Order matters as in the engine: the speculative shape first (NGRAM's breadth and draft count,
EAGLE's auto parameters and topk-1 rule), then the attention backend (on Hopper fa3 only without
speculation or with topk 1), then the page size (Ascend's default, DSA's forced 64). Every default
is the version's, from ``data/launch_defaults.json``, with its file:lines.
"""

from __future__ import annotations

import json
from pathlib import Path

from workbench.analysis.memory import ModelPreset
from workbench.analysis.reach import Conditions, ReachRule, reach_rule
from workbench.engines.launch import LaunchVersion, ModelInfo
from workbench.model.geometry import Mode
from workbench.preflight import pool as kv_pool
from workbench.preflight.command import LaunchCommand
from workbench.preflight.deployment import (
    DEFAULT,
    FORCED,
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
from workbench.preflight.flags import PreflightError

MODELLED_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")


def _value(version: LaunchVersion, name: str) -> object:
    return version.default(name).value


def _src(version: LaunchVersion, name: str) -> str:
    return version.default(name).source


def _speculative(cmd: LaunchCommand, version: LaunchVersion, model: ModelInfo, device: str,
                 s: Settings) -> tuple[str | None, int, int, int, bool]:
    """(algorithm, draft tokens D, steps, topk, draft keeps KV)."""
    given = cmd.flags.values
    raw = given.get("speculative_algorithm")
    if raw is None:
        for dest in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"):
            if dest in given:
                s.notes.append(f"{cmd.flags.spelled[dest]} has no effect without --speculative-algorithm")
        return None, 0, 1, 1, True
    aliases = _value(version, "algorithm_aliases")
    assert isinstance(aliases, dict)
    algorithm = str(aliases.get(raw, raw))
    if raw not in MODELLED_ALGORITHMS:
        raise PreflightError(f"--speculative-algorithm: {raw} is not modelled by the workbench "
                             f"(modelled: {', '.join(MODELLED_ALGORITHMS)})")
    s.add("speculative_algorithm", algorithm, GIVEN if algorithm == raw else DEFAULT,
          "--speculative-algorithm" if algorithm == raw else f"{raw} is {algorithm}: {_src(version, 'algorithm_aliases')}")
    if algorithm == "NGRAM":
        return _ngram(cmd, version, device, s)
    return _eagle(cmd, version, model, s)


def _ngram(cmd: LaunchCommand, version: LaunchVersion, device: str, s: Settings) -> tuple[str, int, int, int, bool]:
    given = cmd.flags.values
    devices = _value(version, "ngram_devices")
    assert isinstance(devices, list)
    if device not in devices:
        s.notes.append(f"{version.engine} refuses NGRAM on --device {device} at start-up: 'Ngram speculative decoding "
                       f"only supports CUDA, CPU, or XPU devices.' ({_src(version, 'ngram_devices')}); "
                       "the rows are the tables a build that allows it would capture")
    breadth = s.given_or("speculative_ngram_max_bfs_breadth", cmd, "speculative_ngram_max_bfs_breadth",
                         _value(version, "ngram_max_bfs_breadth"), _src(version, "ngram_max_bfs_breadth"))
    topk = int(str(breadth))
    origin = FORCED if given.get("speculative_eagle_topk", topk) != topk else DEFAULT
    s.add("speculative_eagle_topk", topk, origin, f"the BFS breadth: {_src(version, 'ngram_topk')}")
    draft = int(str(s.given_or("speculative_num_draft_tokens", cmd, "speculative_num_draft_tokens",
                               _value(version, "ngram_draft_tokens"), _src(version, "ngram_draft_tokens"))))
    steps = int(str(s.given_or("speculative_num_steps", cmd, "speculative_num_steps", max(1, draft // topk),
                               f"draft_tokens // topk: {_src(version, 'ngram_steps')}")))
    has_kv = bool(_value(version, "ngram_draft_has_kv"))
    s.add("draft_has_kv", has_kv, DEFAULT, _src(version, "ngram_draft_has_kv"))
    return "NGRAM", draft, steps, topk, has_kv


def _eagle(cmd: LaunchCommand, version: LaunchVersion, model: ModelInfo, s: Settings) -> tuple[str, int, int, int, bool]:
    given, spelled = cmd.flags.values, cmd.flags.spelled
    if "speculative_num_steps" not in given:
        for dest in ("speculative_eagle_topk", "speculative_num_draft_tokens"):
            if dest in given:
                raise PreflightError(f"{spelled[dest]}: given without --speculative-num-steps ({version.engine} picks all "
                                     f"three or none: {_src(version, 'eagle_auto_params')})")
        table = _value(version, "eagle_auto_params")
        assert isinstance(table, dict)
        algorithm = str(cmd.flags.values["speculative_algorithm"])
        picked = table.get(algorithm, table.get(model.architecture, table["default"]))
        assert isinstance(picked, list)
        steps, topk, draft = picked
        source = f"auto for {model.architecture}: {_src(version, 'eagle_auto_params')}"
        s.add("speculative_num_steps", steps, DEFAULT, source)
        s.add("speculative_eagle_topk", topk, DEFAULT, source)
    else:
        steps = s.add("speculative_num_steps", given["speculative_num_steps"], GIVEN, spelled["speculative_num_steps"])
        if "speculative_eagle_topk" not in given:
            raise PreflightError(f"--speculative-eagle-topk: missing (with --speculative-num-steps {version.engine} needs it: "
                                 f"{_src(version, 'eagle_topk1_draft_tokens')})")
        topk = s.add("speculative_eagle_topk", given["speculative_eagle_topk"], GIVEN, spelled["speculative_eagle_topk"])
        draft = given.get("speculative_num_draft_tokens")
    steps_i, topk_i = int(str(steps)), int(str(topk))
    if topk_i == 1:  # the engine sets D = steps + 1 whatever was given
        origin = FORCED if draft is not None and draft != steps_i + 1 else DEFAULT
        s.add("speculative_num_draft_tokens", steps_i + 1, origin, f"topk 1: steps + 1 ({_src(version, 'eagle_topk1_draft_tokens')})")
        return "EAGLE", steps_i + 1, steps_i, 1, True
    if draft is None:
        raise PreflightError("--speculative-num-draft-tokens: missing (needed with --speculative-eagle-topk above 1)")
    s.add("speculative_num_draft_tokens", draft, GIVEN, spelled["speculative_num_draft_tokens"])
    return "EAGLE", int(str(draft)), steps_i, topk_i, True


def _attention_backend(cmd: LaunchCommand, version: LaunchVersion, model: ModelInfo, device: str, topk: int,
                       gpu_arch: str, s: Settings) -> str:
    given, spelled = cmd.flags.values, cmd.flags.spelled
    # --decode-attention-backend has priority over --attention-backend for the decode graphs
    dest = next((d for d in ("decode_attention_backend", "attention_backend") if d in given), None)
    if device == "npu":
        forced = str(_value(version, "npu_attention_backend"))
        if dest is not None and given[dest] == forced:
            return str(s.add("attention_backend", forced, GIVEN, spelled[dest]))
        s.add("attention_backend", forced, FORCED if dest else DEFAULT, _src(version, "npu_attention_backend"))
        return forced
    if dest is not None:
        return str(s.add("attention_backend", given[dest], GIVEN, spelled[dest]))
    if model.dsa:
        return str(s.add("attention_backend", _value(version, "dsa_attention_backend"), DEFAULT,
                         _src(version, "dsa_attention_backend")))
    table = _value(version, "cuda_attention_backend")
    assert isinstance(table, dict)
    picked = str(table[model.attention][gpu_arch])
    if picked in ("fa3", "trtllm_mha") and model.attention == "mha" and topk > 1:
        picked = "flashinfer"  # fa3 / trtllm_mha are picked only without speculation or with topk 1
    s.add("attention_backend", picked, DEFAULT, f"{model.attention} on {gpu_arch}: {_src(version, 'cuda_attention_backend')}")
    return picked


def _page_size(cmd: LaunchCommand, version: LaunchVersion, model: ModelInfo, device: str, s: Settings) -> int:
    given = cmd.flags.values.get("page_size")
    if device == "npu":
        return int(str(s.given_or("page_size", cmd, "page_size", _value(version, "npu_page_size"), _src(version, "npu_page_size"))))
    if device == "cuda" and model.dsa:
        forced = int(str(_value(version, "dsa_cuda_page_size_per_kpool"))) * model.index_kpool
        origin = FORCED if given is not None and given != forced else (GIVEN if given is not None else DEFAULT)
        s.add("page_size", forced, origin, f"64 * index_kpool {model.index_kpool}: {_src(version, 'dsa_cuda_page_size_per_kpool')}")
        return forced
    return int(str(s.given_or("page_size", cmd, "page_size", _value(version, "cuda_page_size"), _src(version, "cuda_page_size"))))


def _modes(algorithm: str | None, steps: int) -> tuple[tuple[Mode, int], ...]:
    """The graphs the deployment captures: decode without speculation; verify for NGRAM; verify,
    the drafter's last (widest) step and draft-extend for EAGLE."""
    if algorithm is None:
        return ((Mode.DECODE, 0),)
    if algorithm == "NGRAM":
        return ((Mode.TARGET_VERIFY, 0),)
    return ((Mode.TARGET_VERIFY, 0), (Mode.DRAFT_DECODE, steps - 1), (Mode.DRAFT_EXTEND, 0))


def resolve_sglang(cmd: LaunchCommand, version: LaunchVersion, *, model_config: str | None, gpu: str,
                   overshoot: int | None) -> Deployment:
    data = launch_data()
    s = Settings()
    values = cmd.flags.values
    model_path = values.get("model_path")
    if not isinstance(model_path, str):
        raise PreflightError("--model-path: missing (required: the model the server loads)")
    keys = _value(version, "context_length_keys")
    assert isinstance(keys, list)
    model, preset, kv = resolve_model(model_path, model_config, data, keys, "--model-path")
    if model is None:
        if "context_length" not in values or not ({"attention_backend", "decode_attention_backend"} & set(values)
                                                  or values.get("device") == "npu"):
            raise unknown_model(model_path, "--model-path", data, ", or both --context-length and --attention-backend")
        model = ModelInfo((model_path,), None, "unknown", "mha", False, source="not known to the workbench")
        s.notes.append(f"{model_path!r} is not a known model: read as a dense (MHA) model without DSA, no KV budget")
    s.add("model_path", model_path, GIVEN, cmd.flags.spelled["model_path"])
    device = str(s.given_or("device", cmd, "device", "cuda", "auto-detected at start-up; --device npu for Ascend", WORKBENCH))
    algorithm, draft, steps, topk, has_kv = _speculative(cmd, version, model, device, s)
    backend = _attention_backend(cmd, version, model, device, topk, str(data.gpus[gpu]["arch"]), s)
    page_size = _page_size(cmd, version, model, device, s)
    context = model.context_len or (preset.context_len if preset else None)
    if "context_length" not in values and context is None:
        raise PreflightError(f"--context-length: missing ({model_path!r} has no preset context length; "
                             "give --context-length or --model-config)")
    context_len = int(str(s.given_or("context_length", cmd, "context_length", context, context_source(model, preset), MODEL)))
    max_bs = int(str(s.given_or("cuda_graph_max_bs", cmd, "cuda_graph_max_bs", preset.max_bs if preset else 32,
                                f"the preset's max_bs ({_src(version, 'cuda_graph_max_bs')} picks it by device memory)",
                                WORKBENCH)))
    spelled = cmd.flags.spelled.get("cuda_graph_max_bs")
    named = version.defaults.get("cuda_graph_max_bs_flag")
    if spelled is not None and named is not None and spelled != named.value:
        s.notes.append(f"{spelled}: {version.engine} names it {named.value} ({named.source}; its argparse takes "
                       f"{spelled} as an ambiguous abbreviation of the -decode and -prefill flags); read as {named.value}")
    s.given_or("schedule_conservativeness", cmd, "schedule_conservativeness", _value(version, "schedule_conservativeness"),
               _src(version, "schedule_conservativeness"))
    width_gen = str(version.backend_fields("*").get("width_gen", "g1"))
    s.add("width_gen", width_gen, DEFAULT,
          version.backend_source("*", "width_gen") or "g1: the oldest generation (docs/semantics.md#width-generations)")
    geometry = check_geometry(context_len=context_len, page_size=page_size, draft_tokens=draft, spec_steps=steps,
                              spec_topk=topk, draft_has_kv=has_kv, max_bs=max_bs, width_gen=width_gen)
    s.add("request_table_width", geometry.request_table_width, DEFAULT,
          f"W = ctx + extra ({width_gen}), docs/engine-facts.md#sglang-width-generations")
    rule = reach_rule(version).with_overshoot(overshoot)
    if rule.overshoot is not None:
        s.add("overshoot", rule.overshoot, GIVEN if overshoot is not None else DEFAULT,
              "--overshoot (a what-if: the reach is ctx - 1 plus it)" if overshoot is not None
              else rule.sources.get("overshoot", ""))
    overlap = _overlap(cmd, rule, geometry.speculative, s)
    pool = _pool(cmd, model_config, gpu, model, preset, kv, s)
    # A given pool bounds every request (max_req_len); an estimated one only the batches it must hold.
    given = None if pool.estimated else pool.tokens
    conditions = Conditions(overlap=overlap[0], overlap_source=overlap[1], pool_tokens=given,
                            pool_source=pool.source if given else "assumed larger than the context", algorithm=algorithm)
    graphs = not values.get("disable_cuda_graph", False)
    return Deployment(version, cmd, model_path, model, preset, device, geometry, (backend,), _modes(algorithm, steps),
                      graphs, rule, tuple(s.items), tuple(s.notes), kv, {"algorithm": algorithm}, conditions,
                      pool.estimated, pool.tokens)


def _overlap(cmd: LaunchCommand, rule: ReachRule, speculative: bool, s: Settings) -> tuple[bool | None, str]:
    """Overlap scheduling: off with --disable-overlap-schedule, else the release's default (learned)."""
    if cmd.flags.values.get("disable_overlap_schedule"):
        s.add("overlap_schedule", False, GIVEN, "--disable-overlap-schedule")
        return False, "--disable-overlap-schedule"
    default = rule.overlap_default(speculative)
    if default is None:
        return None, ""
    assert rule.scheduler is not None
    source = rule.scheduler.sources.get("overlap_default", "")
    s.add("overlap_schedule", default, DEFAULT, f"{rule.scheduler.engine}: {source}")
    return default, f"the default of {rule.scheduler.engine}"


def _pool(cmd: LaunchCommand, model_config: str | None, gpu: str, model: ModelInfo, preset: ModelPreset | None,
          kv: int | None, s: Settings) -> kv_pool.Pool:
    values = cmd.flags.values
    weights = preset.weights_bytes if preset else None
    if model_config is not None and weights is None:
        config = json.loads(Path(model_config).read_text())  # read once already by resolve_model
        weights = kv_pool.dense_weights_bytes(config) if isinstance(config, dict) else None
    memory = float(str(launch_data().gpus[gpu]["memory_gib"]))
    fraction = values.get("mem_fraction_static")
    found = kv_pool.estimate(max_total_tokens=_int(values.get("max_total_tokens")), gpu=gpu, gpu_memory_gib=memory,
                             mem_fraction=float(str(fraction)) if fraction is not None else None, weights_bytes=weights,
                             kv_bytes_per_token=kv, tp=_int(values.get("tp_size")) or 1, mla=model.attention == "mla")
    s.add("kv_pool_tokens", found.tokens if found.tokens is not None else "unknown",
          GIVEN if not found.estimated else WORKBENCH, found.source)
    return found


def _int(value: object) -> int | None:
    return int(str(value)) if value is not None else None
