"""SGLang's own parser and resolution, run in the engine process (see ``commands.adapters``).

The command goes through the release's ``prepare_server_args`` (its ``argparse`` parser built by
``ServerArgs.add_cli_args``, ``--config`` files merged, the ``ServerArgs`` record made; up to the
releases where construction itself resolves, in ``__post_init__``), then ``resolve_once`` where the
release has it (its ordered resolution pipeline). The model's config is loaded by the release's
``ModelConfig`` (transformers' ``AutoConfig`` at the release's pin), which derives the context
length as the engine does.

Who set each value: the command (``given``), or the engine function that wrote it last. Writes
are seen as they happen: ``ServerArgs.__setattr__`` is wrapped for the resolution, and the
releases that record decisions in a list instead of writing them (``declare_resolution`` appends
``(source, fields)`` to ``_resolved_overrides``) get a list that notes where each append came from.
A value nobody wrote is the field's declared default (its file and line).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import os
import re
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workbench.engines.commands.adapter_common import (
    Writes,
    describe,
    engine_frame,
    flag_uses,
    is_refusal,
    jsonable,
    one_line,
    parser_error,
    recorded_renames,
    refusal_naming_stand_in,
    refusal_text,
    short_path,
    stand_in_stop,
    traced_setattr,
    unknown_model_type,
)
from workbench.engines.commands.adapters import (
    ENGINE,
    GIVEN,
    READ,
    REJECTED,
    RESOLVED,
    UNDECIDED,
    UNLOADABLE,
    FlagUse,
    Gpu,
    JSONValue,
    LaunchAdapter,
    LaunchRequest,
    LoadReport,
    ModelFacts,
    Resolution,
    Setting,
)
from workbench.engines.sandbox.model_lookup import (
    ASSUMED_ABSENT,
    Located,
    absent_files,
    answer_hub_from_cache,
    apply_hub_env,
    locate,
    warm_hub_client,
)
from workbench.engines.sglang import hybrid_state
from workbench.engines.sglang.device_paths import (
    AITER_UNIFIED_VERIFY,
    AITER_VERIFY,
    DECODE_GRAPH,
    LAUNCH_FEATURES,
    aiter_verify_setting,
    decode_graph_setting,
)
from workbench.engines.sglang.launch_runner import run_runner_stage

# The settings the workbench's side reads (workbench.preflight.resolve_sglang), reported whether or
# not the command or the engine touched them.
WATCHED = (
    "model_path", "device", "context_length", "page_size", "attention_backend", "decode_attention_backend",
    "prefill_attention_backend", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
    "speculative_num_draft_tokens", "speculative_ngram_max_bfs_breadth", "speculative_draft_model_path",
    "cuda_graph_max_bs", "cuda_graph_bs", "cuda_graph_config", "disable_cuda_graph", "disable_overlap_schedule",
    "schedule_conservativeness", "tp_size", "dp_size", "kv_cache_dtype", "max_running_requests",
    "enable_dp_attention", "speculative_draft_model_revision",
)
KV_DTYPE_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp4_e2m1": 0.5}


def _stash_sites(server_args: Any, defs: dict[str, str]) -> dict[str, str]:
    """``field -> "function (file:line)"`` of the last decision that declared it, for the releases
    that record decisions as ``(source, fields)`` in ``_resolved_overrides`` instead of writing them
    (read after the resolution: the list is the engine's own and is left as it is)."""
    sites: dict[str, str] = {}
    named = source_sites(server_args, defs)
    for source, fields in getattr(server_args, "_resolved_overrides", None) or ():
        for name in fields:
            sites[name] = named[str(source)]
    return sites


def source_sites(server_args: Any, defs: dict[str, str]) -> dict[str, str]:
    """A declaration's source (``_resolved_overrides``) -> ``"source (file:line)"`` of its function."""
    sites: dict[str, str] = {}
    for source, _ in getattr(server_args, "_resolved_overrides", None) or ():
        # "module.function", "Class.method" or "function.detail": the innermost part that is a def
        parts = [p for part in reversed(str(source).split(".")) for p in (part, part.lstrip("_"))]
        function = next((part for part in parts if part in defs), None)
        sites[str(source)] = f"{source} ({defs[function]})" if function else str(source)
    return sites


_DEF = re.compile(r"^\s*(?:async\s+)?def\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def def_lines(package_dir: Path) -> dict[str, str]:
    """``function name -> file:line`` of every ``def`` in the engine's package, built once per engine
    process: a decision's source names only its function. Where two modules define one name, the
    argument resolution's own modules (server_args, arg_groups) come first, then the hardware
    back-ends, then the rest."""
    srt = package_dir / "srt"
    first = [srt / "server_args.py", *sorted((srt / "arg_groups").rglob("*.py")), *sorted((srt / "hardware_backend").rglob("*.py"))]
    files = [*first, *(p for p in sorted(srt.rglob("*.py")) if p not in set(first))]
    found: dict[str, str] = {}
    for path in files:
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            match = _DEF.match(line)
            if match and match.group(1) not in found:
                found[match.group(1)] = f"{short_path(str(path), package_dir)}:{number}"
    return found


class SGLangAdapter(LaunchAdapter):
    engine = "sglang"

    def __init__(self) -> None:
        self.server_args: types.ModuleType | None = None
        self.package_dir = Path()
        self.defaults_at: dict[str, str] = {}
        self.defs: dict[str, str] = {}
        self.parser: argparse.ArgumentParser | None = None
        self.load_failure = ""

    # ---- once per engine process -----------------------------------------------------------------

    def load(self, gpu: Gpu) -> LoadReport:
        start = time.perf_counter()
        import importlib

        package = importlib.import_module("sglang")
        self.package_dir = Path(list(package.__path__)[0])
        try:
            self.server_args = importlib.import_module("sglang.srt.server_args")
            self._parser()
        except BaseException as error:  # noqa: BLE001 - a release whose parser cannot load says why, in one line
            self.server_args = None
            self.load_failure = f"does not load: {_where(error, self.package_dir)}"
            return LoadReport(f"sglang=={_version(self.package_dir)}", self.load_failure,
                              "not tried (no parser)", seconds=time.perf_counter() - start)
        resolution = "loaded"
        try:
            self._model_config_module()
        except BaseException as error:  # noqa: BLE001
            resolution = f"model config loader does not load: {_where(error, self.package_dir)}"
        self.defaults_at = _field_lines(self.package_dir)
        self.defs = def_lines(self.package_dir)
        warm_hub_client()
        answer_hub_from_cache()
        functions = ("prepare_server_args", "ServerArgs.resolve_once" if self._has_resolve_once() else "ServerArgs.__post_init__")
        return LoadReport(f"sglang=={_version(self.package_dir)}", "loaded", resolution, functions,
                          seconds=time.perf_counter() - start)

    def describe_parser(self) -> dict[str, JSONValue]:
        return describe(self._parser())

    def _parser(self) -> argparse.ArgumentParser:
        """The release's parser, as its entry point builds it (once: parsing leaves it unchanged)."""
        assert self.server_args is not None
        if self.parser is None:  # without -h: the engine's own new parser has it (see _parser_reused)
            self.parser = argparse.ArgumentParser(prog="sglang serve", add_help=False)
            self.server_args.ServerArgs.add_cli_args(self.parser)
        return self.parser

    @contextlib.contextmanager
    def _parser_reused(self, request: LaunchRequest) -> Iterator[None]:
        """While open, the engine's entry point fills its new parser from the one built at load
        (argparse's own ``parents`` mechanism: the same actions and defaults), instead of
        declaring its 500 options again. Not when the command sets SGLang variables: the
        release reads some while declaring its options (choices that depend on them)."""
        assert self.server_args is not None
        cls = self.server_args.ServerArgs
        original = cls.__dict__.get("add_cli_args")
        built = self._parser()
        if not isinstance(original, staticmethod) or any(k.startswith("SGLANG") for k in request.env):
            yield
            return

        def add_cli_args(parser: argparse.ArgumentParser) -> None:
            parser._add_container_actions(built)
            parser._defaults.update(built._defaults)

        cls.add_cli_args = staticmethod(add_cli_args)  # type: ignore[assignment]
        try:
            yield
        finally:
            cls.add_cli_args = original

    def _has_resolve_once(self) -> bool:
        assert self.server_args is not None
        return hasattr(self.server_args.ServerArgs, "resolve_once")

    def _model_config_module(self) -> types.ModuleType:
        import importlib

        return importlib.import_module("sglang.srt.configs.model_config")

    # ---- once per request (a forked child) -------------------------------------------------------

    def resolve(self, request: LaunchRequest) -> Resolution:
        # a refusal that names a stand-in is not the engine's answer (adapter_common.stand_in_stop)
        return refusal_naming_stand_in(self._resolve(request))

    def _resolve(self, request: LaunchRequest) -> Resolution:
        if self.server_args is None:
            return Resolution(request.engine, UNLOADABLE, f"{request.engine}'s parser cannot be loaded on a CPU: "
                                                          f"{self.load_failure}")
        os.environ.update(request.env)
        apply_hub_env(request.lookup_env)
        times: dict[str, float] = {}
        start = time.perf_counter()
        argv = list(request.argv)
        parser = self._parser()
        refused = parser_error(lambda: parser.parse_args(argv))
        if refused is not None:
            return Resolution(request.engine, REJECTED, refused, "parser", seconds={"parse": time.perf_counter() - start})
        namespace = vars(parser.parse_args(argv))
        flags = flag_uses(parser, argv, namespace)
        times["parse"] = time.perf_counter() - start
        model = locate(str(namespace["model_path"]), revision=namespace.get("revision"), model_config=request.model_config,
                       cwd=request.cwd, lookup_env=request.lookup_env, flag="--model-path",
                       remote_code=bool(namespace.get("trust_remote_code")))
        if model.missing:
            return Resolution(request.engine, UNDECIDED, model.missing, flags=tuple(flags), seconds=times)
        draft = self._draft(namespace, request)
        engine_argv = argv + (["--model-path", model.engine_path] if model.engine_path != model.name else [])
        if draft is not None and not draft.missing and draft.engine_path != draft.name:
            engine_argv += ["--speculative-draft-model-path", draft.engine_path]
        return self._run(request, flags, namespace, model, draft, engine_argv, times)

    def _draft(self, namespace: dict[str, Any], request: LaunchRequest) -> Located | None:
        path = namespace.get("speculative_draft_model_path")
        if not path:
            return None
        return locate(str(path), revision=namespace.get("speculative_draft_model_revision"),
                      model_config=request.draft_model_config, cwd=request.cwd, lookup_env=request.lookup_env,
                      flag="--speculative-draft-model-path", config_flag="--draft-model-config",
                      remote_code=bool(namespace.get("trust_remote_code")))

    def _run(self, request: LaunchRequest, flags: list[FlagUse], namespace: dict[str, Any], model: Located,
             draft: Located | None, engine_argv: list[str], times: dict[str, float]) -> Resolution:
        assert self.server_args is not None
        start = time.perf_counter()
        writes = Writes(self.package_dir)
        cls = self.server_args.ServerArgs
        try:
            with traced_setattr(cls, writes, _is_construction), recorded_renames(cls) as renames, \
                    self._parser_reused(request):
                server_args = self.server_args.prepare_server_args(engine_argv)
                if self._has_resolve_once():
                    server_args.resolve_once()
                times["resolve"] = time.perf_counter() - start
                model_config = self._model_config(server_args)
                draft_config = self._model_config(server_args, draft) if draft is not None and not draft.missing else None
                runner_settings, runner_notes = run_runner_stage(server_args, _resolved(server_args), model_config,
                                                                 self.package_dir)
        except BaseException as error:  # noqa: BLE001 - the engine's refusal, or what a CPU cannot run
            return self._stopped(request, flags, error, model, draft, times)
        times["model_config"] = time.perf_counter() - start - times["resolve"]
        for name, site in _stash_sites(server_args, self.defs).items():
            writes.where[name] = site
            if site.split(" (", 1)[0] not in writes.functions:
                writes.functions.append(site.split(" (", 1)[0])
        flags = [dataclasses.replace(f, dest=renames.get(f.dest, f.dest)) for f in flags]
        namespace = {renames.get(k, k): v for k, v in namespace.items()}
        settings = self._settings(server_args, flags, namespace, writes, model)
        settings.update(runner_settings)
        settings.update(self._paths(server_args, model_config, flags))
        context = getattr(model_config, "context_len", None)
        settings["model_config.context_len"] = Setting(
            context, ENGINE, f"ModelConfig.context_len ({self._context_source()}) from {model.found}")
        facts = _facts(model, model_config, server_args, draft_facts=_facts(draft, draft_config, server_args)
                       if draft is not None and draft_config is not None else None)
        notes = [f"{draft.missing} (the draft model's own config was not read)"] if draft is not None and draft.missing else []
        if draft is not None and not draft.missing:
            notes.append(f"draft model: {draft.name}, config from {draft.found}")
        notes += runner_notes
        notes += [f"{name}: not in the Hugging Face cache, taken as absent from the model's repository (the engine "
                  "asked the hub about it)" for name in dict.fromkeys(ASSUMED_ABSENT)]
        return Resolution(request.engine, RESOLVED, flags=tuple(flags), settings=settings, model=facts,
                          notes=tuple(notes), functions=tuple(writes.functions), seconds=times)

    def _paths(self, server_args: Any, model_config: Any, flags: list[FlagUse]) -> dict[str, Setting]:
        """The graph paths the release takes on its platform (``device_paths``): decode graphs on
        or off, AITER's verify path, and the features they set up."""
        found: dict[str, Setting] = {}
        decode = decode_graph_setting(server_args, _resolved(server_args), [f.dest for f in flags],
                                      source_sites(server_args, self.defs))
        if decode is not None:
            found[DECODE_GRAPH] = decode
        try:
            aiter = aiter_verify_setting(server_args, model_config, self.package_dir)
        except Exception as error:  # noqa: BLE001 - an input the release computes differently: say so, decide nothing
            found[AITER_VERIFY] = Setting("unknown", READ, f"AITER's verify path could not be read: {one_line(error)}")
            aiter = None
        if aiter is not None:
            found[AITER_VERIFY] = aiter[0]
            if aiter[1]:
                found[LAUNCH_FEATURES] = Setting([AITER_UNIFIED_VERIFY], READ, aiter[0].source)
        state = hybrid_state.state_setting(model_config)
        if state is not None:
            found[hybrid_state.KIND] = state
        return found

    def _model_config(self, server_args: Any, draft: Located | None = None) -> Any:
        """The release's ModelConfig of the model (or of the draft model), as its runner builds it."""
        assert self.server_args is not None
        module = self._model_config_module()
        if draft is None and hasattr(self.server_args, "model_config_of"):
            return self.server_args.model_config_of(server_args)
        if draft is not None:
            return module.ModelConfig.from_server_args(server_args, model_path=draft.engine_path, is_draft_model=True)
        return module.ModelConfig.from_server_args(server_args)

    def _context_source(self) -> str:
        module = self._model_config_module()
        function = getattr(module, "get_context_length", None)
        if function is None:
            utils = sys.modules.get("sglang.srt.utils.hf_transformers_utils") or sys.modules.get("sglang.srt.hf_transformers_utils")
            function = getattr(utils, "get_context_length", None)
        if function is None:
            return short_path(module.__file__ or "", self.package_dir)
        return f"get_context_length, {short_path(inspect.getsourcefile(function) or '', self.package_dir)}:" \
               f"{function.__code__.co_firstlineno}"

    def _settings(self, server_args: Any, flags: list[FlagUse], namespace: dict[str, Any], writes: Writes,
                  model: Located) -> dict[str, Setting]:
        resolved = _resolved(server_args)
        given = {f.dest: f for f in flags}
        names = [n for n in dict.fromkeys([*given, *WATCHED, *writes.where]) if n in resolved]
        settings: dict[str, Setting] = {}
        for name in names:
            value = jsonable(resolved[name])
            if name == "model_path":
                settings[name] = Setting(model.name, GIVEN, f"{given[name].spelled if name in given else '--model-path'}; "
                                                            f"config from {model.found}")
            elif name in given and value == jsonable(namespace.get(name)):
                settings[name] = Setting(value, GIVEN, given[name].spelled)
            elif name in writes.where:
                settings[name] = Setting(value, ENGINE, writes.where[name],
                                         jsonable(namespace.get(name)) if name in given else None)
            else:
                settings[name] = Setting(value, ENGINE, f"default of ServerArgs.{name} ({self.defaults_at.get(name, '?')})")
        return settings

    def _stopped(self, request: LaunchRequest, flags: list[FlagUse], error: BaseException, model: Located,
                 draft: Located | None, times: dict[str, float]) -> Resolution:
        missing_file = isinstance(error, OSError) and not isinstance(error, (FileNotFoundError, PermissionError)) or \
            type(error).__name__ in ("OfflineModeIsEnabled", "LocalEntryNotFoundError", "EntryNotFoundError")
        if draft is not None and draft.missing and (missing_file or draft.name in str(error)):
            # the draft model is on no path the check knows: what stopped the engine is its files,
            # not a file of the target it asked for on the way (0.5.23 takes the target's
            # generation_config.json as optional)
            target = absent_files(model, last=True) if missing_file else None  # the file that stopped it, if the target's
            also = f"; and --model-path {model.name}: {target}" if target else ""
            return Resolution(request.engine, UNDECIDED, draft.missing + also, flags=tuple(flags), seconds=times)
        if missing_file:
            # the engine asked for a file of the model the cache does not hold (remote code, a
            # tokenizer): offline, that is not the engine refusing, it is a file to give. The file
            # that stopped it is the last one asked for: the draft's or the target's
            if draft is not None and not draft.missing:
                asked = absent_files(draft, last=True)
                if asked is not None:
                    return Resolution(request.engine, UNDECIDED, f"--speculative-draft-model-path {draft.name}: {asked}",
                                      flags=tuple(flags), seconds=times)
            asked = absent_files(model, last=draft is not None)
            if asked is not None:
                return Resolution(request.engine, UNDECIDED, f"--model-path {model.name}: {asked}", flags=tuple(flags),
                                  seconds=times)
            return Resolution(request.engine, UNDECIDED, f"--model-path {model.name}: the engine needs a file of the model "
                                                         f"that is not on this machine ({one_line(error)[:300]}); put the "
                                                         "model's files into the Hugging Face cache, or give --model-config",
                              flags=tuple(flags), seconds=times)
        frame = engine_frame(error, self.package_dir)
        where = f"{frame.name} ({short_path(frame.filename, self.package_dir)}:{frame.lineno})" if frame else "?"
        gap = stand_in_stop(error, request.engine, where)
        if gap is not None:
            return Resolution(request.engine, UNDECIDED, gap, flags=tuple(flags), seconds=times)
        unknown = unknown_model_type(error)
        if unknown is not None:
            return Resolution(request.engine, UNDECIDED, f"--model-path {model.name}: {unknown} ({where})",
                              flags=tuple(flags), seconds=times)
        if is_refusal(error, self.package_dir):
            return Resolution(request.engine, REJECTED, refusal_text(error), where, flags=tuple(flags), seconds=times)
        return Resolution(request.engine, UNLOADABLE, f"{request.engine}'s resolution cannot run on a CPU: {one_line(error)} "
                                                      f"in {where}", flags=tuple(flags), seconds=times)


def _is_construction(frame: types.FrameType) -> bool:
    """A write from the record's own constructor (the dataclass ``__init__``): the given value."""
    return frame.f_code.co_name == "__init__" and frame.f_code.co_filename.startswith("<")


def _resolved(server_args: Any) -> dict[str, Any]:
    if hasattr(server_args, "resolved_dict"):
        resolved: dict[str, Any] = server_args.resolved_dict()
        return resolved
    import dataclasses

    return {f.name: getattr(server_args, f.name) for f in dataclasses.fields(server_args)}


def _version(package_dir: Path) -> str:
    for info in package_dir.parent.glob("sglang-*.dist-info"):
        return info.name[len("sglang-"):-len(".dist-info")]
    return "?"


def _where(error: BaseException, package_dir: Path) -> str:
    frame = engine_frame(error, package_dir)
    place = f" ({short_path(frame.filename, package_dir)}:{frame.lineno})" if frame else ""
    return f"{one_line(error)}{place}"


_FIELD = re.compile(r"^\s{4}([a-z_][a-z0-9_]*)\s*:\s*[^=]")


def _field_lines(package_dir: Path) -> dict[str, str]:
    """``field -> file:line`` of each ServerArgs field's declaration (server_args.py, or the
    field namespaces of the releases that split them out)."""
    files = [package_dir / "srt" / "server_args.py", *sorted((package_dir / "srt" / "arg_groups" / "fields").glob("*.py"))]
    found: dict[str, str] = {}
    for path in files:
        if not path.exists():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            match = _FIELD.match(line)
            if match and match.group(1) not in found:
                found[match.group(1)] = f"{short_path(str(path), package_dir)}:{number}"
    return found


def _kv_bytes(model_config: Any, server_args: Any) -> int | None:
    """One token's KV cache over all layers and ranks, at the resolved KV dtype."""
    dtype = str(getattr(server_args, "kv_cache_dtype", "auto") or "auto")
    per_value = KV_DTYPE_BYTES.get(dtype, 2)
    layers = getattr(model_config, "num_hidden_layers", None) or getattr(model_config, "num_attention_layers", None)
    if not isinstance(layers, int):
        return None
    rank, rope = getattr(model_config, "kv_lora_rank", None), getattr(model_config, "qk_rope_head_dim", None)
    if _arch_name(model_config) == "MLA" and isinstance(rank, int) and isinstance(rope, int):
        return int(layers * (rank + rope) * per_value)
    heads = getattr(model_config, "num_key_value_heads", None)
    head_dim = getattr(model_config, "head_dim", None)
    if isinstance(heads, int) and isinstance(head_dim, int):
        return int(2 * layers * heads * head_dim * per_value)
    return None


def _arch_name(model_config: Any) -> str:
    """``ModelConfig.attention_arch`` by its member name ("MLA", "MHA"): an ``IntEnum`` member prints
    as its number on Python 3.11 and later (0.5.23's ``AttentionArch``), older releases' as the name."""
    arch = getattr(model_config, "attention_arch", None)
    return str(getattr(arch, "name", arch or "")).rsplit(".", 1)[-1]


def _is_dsa(hf_config: Any) -> bool:
    """The release's own predicate for DeepSeek sparse attention, where it has one."""
    for module_name in ("sglang.srt.configs.model_config", "sglang.srt.utils"):
        module = sys.modules.get(module_name)
        for name in ("is_deepseek_nsa", "is_deepseek_dsa"):
            predicate = getattr(module, name, None)
            if callable(predicate):
                return bool(predicate(hf_config))
    return getattr(hf_config, "index_topk", None) is not None


def _facts(located: Located, model_config: Any, server_args: Any, draft_facts: ModelFacts | None = None) -> ModelFacts:
    hf_config = getattr(model_config, "hf_config", None)
    architectures = getattr(hf_config, "architectures", None) or ["?"]
    arch = _arch_name(model_config)
    return ModelFacts(
        path=located.name, found=located.found, architecture=str(architectures[0]),
        context_length=getattr(model_config, "context_len", None), attention="mla" if arch.endswith("MLA") else "mha",
        dsa=_is_dsa(hf_config), kv_bytes_per_token=_kv_bytes(model_config, server_args),
        num_nextn_predict_layers=int(getattr(hf_config, "num_nextn_predict_layers", 0) or 0), draft=draft_facts,
        config=_config_dict(hf_config),
    )


def _config_dict(hf_config: Any) -> dict[str, Any] | None:
    to_dict = getattr(hf_config, "to_dict", None)
    try:
        found = jsonable(to_dict()) if callable(to_dict) else None
    except Exception:  # noqa: BLE001 - a config class whose to_dict needs more than it has: no estimate from it
        return None
    return found if isinstance(found, dict) else None
