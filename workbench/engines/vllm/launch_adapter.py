"""vLLM's own parser and resolution, run in the engine process (see ``commands.adapters``).

The command goes through the release's own command line: the console script its wheel declares
(``entry_points.txt``: ``vllm = vllm.entrypoints.cli.main:main``, or ``vllm.scripts:main`` in
early releases) runs as ``vllm serve ...`` would, building its ``FlexibleArgumentParser`` (the
serve subcommand, ``make_arg_parser``: the OpenAI server's options and ``EngineArgs.add_cli_args``),
parsing (underscores, dotted keys, JSON values, ``--config`` files, ``-O3`` are the parser's own
work) and validating, until it dispatches to the server: there the parsed arguments are taken
(``python -m vllm.entrypoints.openai.api_server`` gets that module's parser, ``make_arg_parser``
on a ``FlexibleArgumentParser``, and its ``validate_parsed_serve_args``). The serve dispatch's one
line before it starts the server, ``args.model = args.model_tag``, is done here too. Then
``AsyncEngineArgs.from_cli_args(args).create_engine_config(usage_context=OPENAI_API_SERVER)``, as
the server's start-up calls it, on the stand-in GPU (``loader``).

Who set each value: the command (``given``: the parser's actions are watched as they take each
option), or the engine function that wrote the config field last (``__setattr__`` of the config
classes is watched during ``create_engine_config``); a field nobody wrote after construction is
the value ``create_engine_config`` built the config with.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import inspect
import io
import logging
import os
import re
import sys
import time
import types
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from workbench.engines.commands.adapter_common import (
    Writes,
    describe,
    engine_frame,
    is_refusal,
    jsonable,
    one_line,
    short_path,
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
from workbench.engines.sandbox.model_lookup import Located, absent_files, apply_hub_env, locate
from workbench.engines.vllm import recurrent_state

API_SERVER = "python -m vllm.entrypoints.openai.api_server"
# vLLM on an Ascend NPU runs as the vllm-ascend plugin's platform (its NPUPlatform, found through the
# ``vllm.platform_plugins`` entry point), which sets the block size and graph mode and brings its own
# attention backends, drafter and patches of vLLM: the plugin's release of the same version is loaded
# beside the release (``needs``), or, where the package index has none, the check is undecided.
NPU_PLUGIN = "vllm-ascend"
# The sub-configs of the engine config whose fields are reported (dotted: ``cache_config.block_size``).
SECTIONS = ("model_config", "cache_config", "parallel_config", "scheduler_config", "speculative_config",
            "compilation_config", "device_config", "load_config", "attention_config", "kernel_config")
CONFIG_CLASSES = ("ModelConfig", "CacheConfig", "ParallelConfig", "SchedulerConfig", "SpeculativeConfig",
                  "CompilationConfig", "DeviceConfig", "VllmConfig", "EngineConfig")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_ds_mla": 1,
               "int8": 1, "nvfp4": 0.5}


class _Dispatched(Exception):  # noqa: N818 - not an error: the command line reached its dispatch
    """Raised in place of the server's start: the parsed and validated arguments."""

    def __init__(self, namespace: argparse.Namespace) -> None:
        super().__init__("dispatched")
        self.namespace = namespace


class _Taken:
    """The options the parser took, in order: (option string, dest, value)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str | None, str, Any]] = []


def _recording(action: argparse.Action, taken: _Taken) -> None:
    """Make ``action`` note each time the parser takes it (its class, subclassed once per class)."""
    base = type(action)
    if getattr(base, "_workbench_records", False):
        return
    cached = _RECORDING_CLASSES.get(base)
    if cached is None:
        def call(self: argparse.Action, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
            _CURRENT[0].calls.append((option_string, self.dest, values))
            base.__call__(self, parser, namespace, values, option_string)
        cached = type(base.__name__, (base,), {"__call__": call, "_workbench_records": True})
        _RECORDING_CLASSES[base] = cached
    action.__class__ = cached
    _CURRENT[0] = taken


_RECORDING_CLASSES: dict[type, type] = {}
_CURRENT = [_Taken()]


def _all_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _all_parsers(sub)


@contextlib.contextmanager
def _watched_parse(taken: _Taken, seen: dict[str, Any], stop_at_parse: bool = False) -> Iterator[None]:
    """While open, the top-level ``parse_args`` of any parser records the actions it takes, keeps
    the parser (``seen["parser"]``) and replaces the dispatch with ``_Dispatched``; with
    ``stop_at_parse`` (a module whose ``__main__`` starts the server right after parsing) it
    raises ``_Dispatched`` as soon as the parse returns."""
    original = argparse.ArgumentParser.parse_args

    def parse_args(parser: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        if "parser" in seen:  # an inner call (FlexibleArgumentParser's own, via super())
            return original(parser, args, namespace)
        seen["parser"] = parser
        for each in _all_parsers(parser):
            for action in each._actions:
                if not isinstance(action, argparse._SubParsersAction):
                    _recording(action, taken)
        _CURRENT[0] = taken
        result = original(parser, args, namespace)
        if hasattr(result, "dispatch_function"):
            def dispatch(namespace: argparse.Namespace) -> None:
                raise _Dispatched(namespace)
            result.dispatch_function = dispatch
        seen["namespace"] = result
        if stop_at_parse:
            raise _Dispatched(result)
        return result

    argparse.ArgumentParser.parse_args = parse_args  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]


class ParserNotLoaded(RuntimeError):
    """The release's command line did not load in this engine process (the load report says why)."""


class EntryPointStopped(RuntimeError):
    """The release's console entry point exited before building its parser, with an error logged
    (vLLM's ``--omni`` without vllm-omni installed)."""


class _ErrorsLogged(logging.Handler):
    """The error messages the release logs while its entry point runs."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.errors.append(f"{record.getMessage()} ({Path(record.pathname).parent.name}/{Path(record.pathname).name}:"
                           f"{record.lineno})")


def _parser_message(stderr: str, stop: SystemExit) -> str:
    lines = [line for line in stderr.splitlines() if ": error: " in line or line.startswith("error: ")]
    if lines:
        return lines[-1].split("error: ", 1)[1]
    return (stderr.strip().splitlines() or [f"exit status {stop.code}"])[-1]


class VLLMAdapter(LaunchAdapter):
    engine = "vllm"
    platform_plugins = {"npu": NPU_PLUGIN}

    def __init__(self) -> None:
        self.package_dir = Path()
        self.version = "?"
        self.main: Callable[[], Any] | None = None
        self.main_name = ""
        self.serve_parser: argparse.ArgumentParser | None = None
        self.arg_utils: types.ModuleType | None = None
        self.plugins: tuple[str, ...] = ()  # the platform plugins loaded with the release (vllm_ascend)
        self.in_process_inspection = False
        self.parser_failure = ""  # why the release's command line did not load in this process

    # ---- once per engine process -----------------------------------------------------------------

    def install(self, package_dir: Path, deps: Path, extra_paths: Sequence[Path], gpu: Gpu) -> Path:
        from workbench.engines.vllm import loader as vllm_loader

        self.plugins = tuple(p for p in (vllm_loader.platform_plugin(path) for path in extra_paths) if p)
        return vllm_loader.install(package_dir, deps, gpu, extra_paths)

    def warm_argv(self, model_dir: str) -> tuple[str, ...]:
        return (model_dir, "--max-model-len", "4096")

    def warm_model(self) -> dict[str, Any] | None:
        """A small FP8 DeepSeek-V3.2 shape: resolving it imports the quantization methods, the MLA
        and DSA model modules and their attention backends, the slow part of a DSA command."""
        from workbench.engines.vllm.reference_models import REFERENCE_DSA

        return {**REFERENCE_DSA, "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                                         "quant_method": "fp8", "weight_block_size": [128, 128]}}

    def load(self, gpu: Gpu) -> LoadReport:
        start = time.perf_counter()
        package = importlib.import_module("vllm")
        self.package_dir = Path(list(package.__path__)[0])
        self.version = _version(self.package_dir)
        engine = f"vllm=={self.version}"
        try:
            self.main, self.main_name = _console_main(self.package_dir)
            self.serve_parser = self._serve_parser(["serve", "workbench-warm-up-model"])[0]
        except BaseException as error:  # noqa: BLE001 - a release whose parser cannot load says why, in one line
            self.main, self.parser_failure = None, _where(error, self.package_dir)
            return LoadReport(engine, f"does not load: {self.parser_failure}", "not tried (no parser)",
                              seconds=time.perf_counter() - start)
        from workbench.engines.sandbox import standins

        standins.strict()
        standins.lenient_while_importing(self.package_dir)  # a model's modules load when it is inspected
        try:
            self.arg_utils = importlib.import_module("vllm.engine.arg_utils")
            importlib.import_module("vllm.usage.usage_lib")
            from workbench.engines.vllm import loader as vllm_loader

            self.in_process_inspection = vllm_loader.model_inspection_in_process()
            vllm_loader.tokenizers_need_files()
            vllm_loader.reasoning_ids_without_tokenizer()
            resolution = "loaded"
        except BaseException as error:  # noqa: BLE001
            resolution = f"does not load: {_where(error, self.package_dir)}"
        functions = (f"{self.main_name} (serve)", "AsyncEngineArgs.from_cli_args", "EngineArgs.create_engine_config")
        return LoadReport(engine, "loaded", resolution, functions, seconds=time.perf_counter() - start)

    def describe_parser(self) -> dict[str, JSONValue]:
        assert self.serve_parser is not None
        return describe(self.serve_parser)

    def _serve_parser(self, argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
        """Run the release's command line on ``vllm <argv>`` up to its dispatch: the serve
        subcommand's parser and the parsed, validated namespace."""
        namespace, parser, _ = self._run_cli(argv, _Taken())
        return _serve_subparser(parser), namespace

    def _run_cli(self, argv: list[str], taken: _Taken) -> tuple[argparse.Namespace, argparse.ArgumentParser, str | None]:
        """(namespace, top-level parser, the parser's error text or None)."""
        if self.main is None:
            raise ParserNotLoaded(self.parser_failure)
        seen: dict[str, Any] = {}
        saved = sys.argv
        sys.argv = ["vllm", *argv]
        stderr = io.StringIO()
        logged = _ErrorsLogged()
        logging.getLogger("vllm").addHandler(logged)
        try:
            with _watched_parse(taken, seen), contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                self.main()
        except _Dispatched as done:
            return done.namespace, seen["parser"], None
        except SystemExit as stop:
            if "parser" in seen and "namespace" not in seen:
                return argparse.Namespace(), seen["parser"], _parser_message(stderr.getvalue(), stop)
            if logged.errors and "parser" not in seen:  # the entry point gave up before its parser, and said why
                raise EntryPointStopped(logged.errors[-1]) from stop
            raise
        finally:
            sys.argv = saved
            logging.getLogger("vllm").removeHandler(logged)
        raise RuntimeError(f"{self.main_name} returned without dispatching to serve")

    def engine_config(self, argv: list[str]) -> Any:
        """The engine config ``vllm serve <argv>`` starts with (the learner builds its buffers on it);
        a command the release refuses raises."""
        assert self.arg_utils is not None
        namespace, _, refused = self._run_cli(["serve", *argv], _Taken())
        if refused is not None:
            raise ValueError(f"the release's parser refuses {' '.join(argv)}: {refused}")
        if getattr(namespace, "model_tag", None) is not None:
            namespace.model = namespace.model_tag
        engine_args = self.arg_utils.AsyncEngineArgs.from_cli_args(namespace)
        return engine_args.create_engine_config(**_usage_context(engine_args))

    # ---- once per request (a forked child) -------------------------------------------------------

    def resolve(self, request: LaunchRequest) -> Resolution:
        os.environ.update(request.env)
        apply_hub_env(request.lookup_env)
        start = time.perf_counter()
        taken = _Taken()
        try:
            namespace, parser, refused = self._parse(request, taken)
        except BaseException as error:  # noqa: BLE001 - a check the command line itself makes (ValueError)
            if is_refusal(error, self.package_dir):
                return Resolution(request.engine, REJECTED, str(error).strip(), _function_of(error, self.package_dir),
                                  seconds={"parse": time.perf_counter() - start})
            if isinstance(error, ParserNotLoaded):  # 0.13.0 and 0.14.1's command line imports torch's inductor, which wants triton
                return Resolution(request.engine, UNLOADABLE, f"{request.engine}'s command line does not load on a CPU: "
                                                              f"{error}", needs=("triton",) if "triton" in str(error) else ())
            if isinstance(error, EntryPointStopped):  # not the command refused: a package the deployment would add
                return Resolution(request.engine, UNDECIDED, f"{request.engine}'s entry point stops before reading the "
                                                             f"command: {error}", seconds={"parse": time.perf_counter() - start})
            return Resolution(request.engine, UNLOADABLE, f"{request.engine}'s command line cannot run on a CPU: "
                                                          f"{_where(error, self.package_dir)}")
        if refused is not None:
            return Resolution(request.engine, REJECTED, refused, "parser", seconds={"parse": time.perf_counter() - start})
        times = {"parse": time.perf_counter() - start}
        flags = _flag_uses(request.argv, taken, namespace)
        if request.gpu.platform == "npu" and not self.plugins:
            return _npu_platform(request, flags, times)
        model_name = str(getattr(namespace, "model", "") or "")
        model = locate(model_name, revision=getattr(namespace, "revision", None), model_config=request.model_config,
                       cwd=request.cwd, lookup_env=request.lookup_env, flag="MODEL",
                       remote_code=bool(getattr(namespace, "trust_remote_code", False)))
        if model.missing:
            return Resolution(request.engine, UNDECIDED, model.missing, flags=tuple(flags), seconds=times)
        draft = _draft(namespace, request)
        if draft is not None and draft.missing:  # the engine would read its config first, and fail offline
            return Resolution(request.engine, UNDECIDED, draft.missing, flags=tuple(flags), seconds=times)
        if model.engine_path != model.name:
            namespace.model = model.engine_path
            if getattr(namespace, "tokenizer", None) in (None, model.name):
                namespace.tokenizer = model.engine_path
        resolution = self._create_config(request, flags, namespace, model, times)
        if draft is None:
            return resolution
        return dataclasses.replace(resolution, notes=(*resolution.notes, f"draft model: {draft.name}, config from {draft.found}"))

    def _parse(self, request: LaunchRequest, taken: _Taken) -> tuple[argparse.Namespace, argparse.ArgumentParser, str | None]:
        if request.program == API_SERVER:
            return self._api_server_parse(list(request.argv), taken)
        namespace, parser, refused = self._run_cli(["serve", *request.argv], taken)
        if refused is None and getattr(namespace, "model_tag", None) is not None:
            namespace.model = namespace.model_tag  # the serve dispatch's first line
        return namespace, parser, refused

    def _api_server_parse(self, argv: list[str], taken: _Taken) -> tuple[argparse.Namespace, argparse.ArgumentParser, str | None]:
        """``python -m vllm.entrypoints.openai.api_server``: that module run as ``__main__`` (its own
        parser, whatever the release builds there) up to its parse, then the release's
        ``validate_parsed_serve_args`` where it has one (the module's next step)."""
        import runpy

        seen: dict[str, Any] = {}
        saved = sys.argv
        sys.argv = ["api_server.py", *argv]
        stderr = io.StringIO()
        try:
            with _watched_parse(taken, seen, stop_at_parse=True), contextlib.redirect_stderr(stderr), \
                    contextlib.redirect_stdout(io.StringIO()), warnings_off():
                runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=False)
        except _Dispatched as done:
            namespace = done.namespace
        except SystemExit as stop:
            if "parser" in seen:
                return argparse.Namespace(), seen["parser"], _parser_message(stderr.getvalue(), stop)
            raise
        finally:
            sys.argv = saved
        if "parser" not in seen:
            raise RuntimeError("python -m vllm.entrypoints.openai.api_server ended without parsing its arguments")
        for module in ("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.common.cli_args"):
            try:
                validate = getattr(importlib.import_module(module), "validate_parsed_serve_args", None)
            except ModuleNotFoundError:
                continue
            if validate is not None:
                validate(namespace)
                break
        return namespace, seen["parser"], None

    def _create_config(self, request: LaunchRequest, flags: list[FlagUse], namespace: argparse.Namespace, model: Located,
                       times: dict[str, float]) -> Resolution:
        assert self.arg_utils is not None
        start = time.perf_counter()
        writes = {cls: Writes(self.package_dir) for cls in [*_config_classes(), self.arg_utils.EngineArgs]}
        from workbench.engines.vllm import loader as vllm_loader

        if not _has_tokenizer_file(model):
            vllm_loader.TOKENIZER_ABSENT.update({model.name, model.engine_path, os.path.realpath(model.folder)})
        try:
            with contextlib.ExitStack() as stack:
                for cls, written in writes.items():
                    stack.enter_context(traced_setattr(cls, written, self._is_construction))
                engine_args = self.arg_utils.AsyncEngineArgs.from_cli_args(namespace)
                config = engine_args.create_engine_config(**_usage_context(engine_args))
        except BaseException as error:  # noqa: BLE001 - the engine's refusal, or what a CPU cannot run
            return self._stopped(request, flags, error, model, times)
        started: list[str] = []
        try:
            started = _executor_start(config, writes.setdefault(type(config.cache_config), Writes(self.package_dir)))
        except Exception as error:  # noqa: BLE001 - the configured block size stands, and the note says why
            started_note = f"the attention backends' block size was not resolved on a CPU ({_where(error, self.package_dir)}); " \
                           "the configured block size is used"
        else:
            started_note = ""
        times["resolve"] = time.perf_counter() - start
        by_name = {cls.__name__: written for cls, written in writes.items()}
        settings = _settings(config, flags, by_name)
        settings.update(_derived(config, self.package_dir))
        if self.plugins:
            platform = type(importlib.import_module("vllm.platforms").current_platform)
            settings["platform_plugin"] = Setting(self.plugins[0], ENGINE, f"{platform.__module__}.{platform.__name__}, "
                                                  "the current platform vLLM's plugin look-up chose (its "
                                                  "vllm.platform_plugins entry point)")
        from workbench.engines.vllm import loader as vllm_loader

        stood = vllm_loader.stood_in()
        notes = [f"stand-ins: {len(stood['modules'])} modules the release imports are not installed here; "
                 f"{len(stood['ops'])} compiled kernel ops were looked up, none ran"] if stood["ops"] else []
        for left in sorted(vllm_loader.LOG["reasoning_ids_left"]):
            notes.append(f"the reasoning parser's token ids were left uninitialized: {left} loads the model's tokenizer, "
                         f"and {model.folder} holds no tokenizer file (they steer the thinking budget; no buffer)")
        if self.in_process_inspection:
            notes.append("the model registry inspected the model class in this process (vLLM runs that in a subprocess)")
        functions = tuple(dict.fromkeys([*(f for written in writes.values() for f in written.functions), *started]))
        if started_note:
            notes.append(started_note)
        state = settings.get(recurrent_state.KIND)  # a hybrid model's layers, unobserved for want of a library
        needs = _libraries_missed(str(state.value)) if state is not None and str(state.value).startswith("unobserved") else ()
        return Resolution(request.engine, RESOLVED, flags=tuple(flags), settings=settings,
                          model=_facts(model, config), notes=tuple(notes), functions=functions, seconds=times,
                          needs=needs)

    def _is_construction(self, frame: types.FrameType) -> bool:
        """A write not made by the engine's own code (pydantic's or the dataclass's ``__init__``)."""
        return not frame.f_code.co_filename.startswith(str(self.package_dir)) or frame.f_code.co_name == "__init__"

    def _stopped(self, request: LaunchRequest, flags: list[FlagUse], error: BaseException, model: Located,
                 times: dict[str, float]) -> Resolution:
        missing = _tokenizer_missing(error)
        if missing is not None:
            return Resolution(request.engine, UNDECIDED, f"MODEL {model.name}: the engine loads the model's tokenizer "
                                                         f"({_function_of(missing, self.package_dir)}), and {model.folder} "
                                                         "holds no tokenizer file; put the model's tokenizer files beside "
                                                         "its config.json", flags=tuple(flags), seconds=times)
        asked = absent_files(model) if isinstance(error, OSError) else None
        if asked is not None:  # a file of the model the engine asked for (remote code, a tokenizer) is not here
            return Resolution(request.engine, UNDECIDED, f"MODEL {model.name}: {asked}", flags=tuple(flags), seconds=times)
        if isinstance(error, OSError) and model.name in str(error):
            return Resolution(request.engine, UNDECIDED, f"MODEL {model.name}: the engine could not read its config "
                                                         f"({one_line(error)})", flags=tuple(flags), seconds=times)
        if isinstance(error, OSError) and model.folder and os.path.realpath(model.folder) in str(error):
            # a file of the model beside its config (remote code: configuration_*.py) is not here
            return Resolution(request.engine, UNDECIDED, f"MODEL {model.name}: the engine needs a file of the model that "
                                                         f"is not on this machine ({one_line(error)[:300]}); put the "
                                                         "model's files beside its config.json", flags=tuple(flags),
                              seconds=times)
        cause = _validation_cause(error)
        where = _function_of(cause, self.package_dir)
        from workbench.engines.vllm import loader as vllm_loader

        inspected = vllm_loader.LOG["inspection"]
        if inspected and "failed to be inspected" in str(cause):  # the model class did not import here
            said = sorted(inspected)[0]
            return Resolution(request.engine, UNLOADABLE, f"{request.engine}'s model registry could not import the model "
                                                          f"class on a CPU: {said}", flags=tuple(flags),
                              seconds=times, needs=_libraries_missed(said))
        unknown = unknown_model_type(cause)
        if unknown is not None:
            return Resolution(request.engine, UNDECIDED, f"MODEL {model.name}: {unknown} ({where})", flags=tuple(flags),
                              seconds=times)
        if is_refusal(cause, self.package_dir):
            return Resolution(request.engine, REJECTED, str(cause).strip() or type(cause).__name__, where,
                              flags=tuple(flags), seconds=times)
        return Resolution(request.engine, UNLOADABLE, f"{request.engine}'s resolution cannot run on a CPU: "
                                                      f"{one_line(cause)} in {where}", flags=tuple(flags), seconds=times)


# ---- finding the release's pieces ----------------------------------------------------------------


def _console_main(package_dir: Path) -> tuple[Callable[[], Any], str]:
    """The ``vllm`` console script the wheel declares (its ``entry_points.txt``)."""
    for info in package_dir.parent.glob("vllm-*.dist-info"):
        points = info / "entry_points.txt"
        if not points.exists():
            continue
        for line in points.read_text().splitlines():
            name, _, target = line.partition("=")
            if name.strip() == "vllm" and ":" in target:
                module, _, function = target.strip().partition(":")
                return getattr(importlib.import_module(module), function), f"{module}.{function}"
    raise LookupError("the wheel declares no 'vllm' console script (entry_points.txt)")


@contextlib.contextmanager
def warnings_off() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _serve_subparser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and "serve" in action.choices:
            found: argparse.ArgumentParser = action.choices["serve"]
            return found
    return parser


def _config_classes() -> list[type]:
    module = importlib.import_module("vllm.config")
    return [c for c in dict.fromkeys(getattr(module, name, None) for name in CONFIG_CLASSES) if isinstance(c, type)]


def _usage_context(engine_args: Any) -> dict[str, Any]:
    """``usage_context=OPENAI_API_SERVER`` where ``create_engine_config`` takes one (the server's call)."""
    if "usage_context" not in inspect.signature(engine_args.create_engine_config).parameters:
        return {}
    usage = importlib.import_module("vllm.usage.usage_lib")
    return {"usage_context": usage.UsageContext.OPENAI_API_SERVER}


def _executor_start(config: Any, writes: Writes) -> list[str]:
    """What the executor's start-up resolves before any device work, where the release has it:
    the block size the attention backends take. ``Platform.update_block_size_for_backend`` asks
    the model's attention layers for their backends, which exist only once the model is built; so
    the backends are the ones the release's selector (``get_attn_backend``) picks for the model's
    attention (and, for a DSA model, the indexer's backend), and the block size the platform's own
    ``_preferred_block_size_for_backends`` gives for them."""
    cache = config.cache_config
    platform = importlib.import_module("vllm.platforms").current_platform
    prefer = getattr(type(platform), "_preferred_block_size_for_backends", None)
    try:
        selector = importlib.import_module("vllm.v1.attention.selector")
    except ModuleNotFoundError:
        return []
    if (getattr(cache, "user_specified_block_size", True) or not hasattr(selector, "get_attn_backend")
            or not hasattr(type(platform), "update_block_size_for_backend")):
        return []
    model = config.model_config
    dsa = getattr(getattr(model, "hf_text_config", None), "index_topk", None) is not None
    known = {"head_size": model.get_head_size(), "dtype": model.dtype, "kv_cache_dtype": cache.cache_dtype,
             "use_mla": bool(getattr(model, "use_mla", False)), "use_sparse": dsa, "block_size": None,
             "num_heads": model.get_num_attention_heads(config.parallel_config)}
    parameters = inspect.signature(selector.get_attn_backend).parameters
    current = importlib.import_module("vllm.config").set_current_vllm_config
    with current(config):
        backends = [selector.get_attn_backend(**{k: v for k, v in known.items() if k in parameters})]
    default = importlib.import_module("vllm.config.cache").CacheConfig.DEFAULT_BLOCK_SIZE
    if prefer is not None:  # every backend of the model's layers (the indexer's too) must take the size
        if dsa:
            backends.append(importlib.import_module("vllm.v1.attention.backends.mla.indexer").DeepseekV32IndexerBackend)
        size = prefer(backends, default, config)
        function = f"{type(platform).__name__}._preferred_block_size_for_backends"
    else:  # the releases that ask the first attention backend alone
        with current(config):
            size = backends[0].get_preferred_block_size(default)
        function = f"{backends[0].__name__}.get_preferred_block_size"
    object.__setattr__(cache, "block_size", size)
    names = " + ".join(b.get_name() for b in backends)
    writes.where["block_size"] = f"{function} for {names} (the executor's update_block_size_for_backend; " \
                                 f"backends from get_attn_backend)"
    return [function]


def _derived(config: Any, package_dir: Path) -> dict[str, Setting]:
    """What the engine derives from its config where the tables are concerned: the KV slots the
    scheduler reserves past a request (its lookahead), for the V0 engine the attention backend its
    model runner selects (``vllm.attention.selector.get_attn_backend``), and for a hybrid model its
    state layers' type and the buffers their metadata builder allocates (``recurrent_state``)."""
    out: dict[str, Setting] = {}
    if hasattr(type(config), "num_lookahead_tokens"):
        out["num_lookahead_tokens"] = Setting(int(config.num_lookahead_tokens), ENGINE,
                                              f"{type(config).__name__}.num_lookahead_tokens")
    else:
        found = _scheduler_lookahead(config, package_dir)
        if found is not None:
            out["num_lookahead_tokens"] = found
    v0 = _v0_backend(config)
    if v0 is not None:
        out["v0_attention_backend"] = v0
    out.update(recurrent_state.observe(config, package_dir))  # a hybrid model's state layers and their buffers
    return out


def _scheduler_lookahead(config: Any, package_dir: Path) -> Setting | None:
    """The v1 scheduler's lookahead, where it sets it inline in ``__init__`` (read there), from the
    release's own predicates on the speculative config (``use_eagle``, ``uses_draft_model``, ``use_dflash``)."""
    path = package_dir / "v1" / "core" / "sched" / "scheduler.py"
    if not path.exists():
        return None
    lines = path.read_text(errors="replace").splitlines()
    sites = [i + 1 for i, line in enumerate(lines) if "self.num_lookahead_tokens = " in line]
    spec = config.speculative_config
    if not sites:
        return None
    k = int(getattr(spec, "num_speculative_tokens", 0) or 0) if spec is not None else 0
    value = 0
    if spec is not None:
        for predicate, extra in (("use_eagle", 0), ("uses_draft_model", 0), ("use_dflash", 1)):
            check = getattr(spec, predicate, None)
            if callable(check) and check():  # in the scheduler's order: a later rule wins
                value = k + extra
    return Setting(value, READ, f"vllm/v1/core/sched/scheduler.py:{sites[0]}-{sites[-1]}: set inline in Scheduler.__init__ "
                                "(it builds the KV cache manager); the speculative config's own predicates decide")


_V0_NAMES = {"FLASH_ATTN": "flash-attn", "FLASHINFER": "flashinfer", "XFORMERS": "xformers"}


def _v0_backend(config: Any) -> Setting | None:
    """The V0 model runner's attention backend, by the release's selector (V0 engine only)."""
    envs = importlib.import_module("vllm.envs")
    if getattr(envs, "VLLM_USE_V1", False):
        return None
    try:
        selector = importlib.import_module("vllm.attention.selector")
    except ModuleNotFoundError:
        return None
    model, cache, parallel = config.model_config, config.cache_config, config.parallel_config
    known = {"num_heads": model.get_num_attention_heads(parallel), "head_size": model.get_head_size(),
             "num_kv_heads": model.get_num_kv_heads(parallel), "sliding_window": model.get_sliding_window(),
             "dtype": model.dtype, "kv_cache_dtype": cache.cache_dtype, "block_size": cache.block_size,
             "is_attention_free": bool(getattr(model, "is_attention_free", False)),
             "use_mla": bool(getattr(model, "use_mla", False))}
    parameters = inspect.signature(selector.get_attn_backend).parameters
    backend = selector.get_attn_backend(**{k: v for k, v in known.items() if k in parameters})
    name = backend.get_name()
    return Setting(_V0_NAMES.get(name, name), ENGINE, f"vllm.attention.selector.get_attn_backend: {name}")


def _version(package_dir: Path) -> str:
    for info in package_dir.parent.glob("vllm-*.dist-info"):
        return info.name[len("vllm-"):-len(".dist-info")]
    return "?"


def _validation_cause(error: BaseException) -> BaseException:
    """A pydantic ValidationError wrapping the engine's own ValueError: that ValueError (its
    ``__cause__``/``__context__`` chain, else the error itself)."""
    if type(error).__name__ != "ValidationError":
        return error
    errors = getattr(error, "errors", None)
    if callable(errors):
        for item in errors():
            inner = (item.get("ctx") or {}).get("error")
            if isinstance(inner, BaseException):
                return inner
    return error


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
                   "merges.txt", "tiktoken.model")


def _npu_platform(request: LaunchRequest, flags: list[FlagUse], times: dict[str, float]) -> Resolution:
    """On an NPU without its plugin: asked again with the plugin's release of the same version, or
    undecided naming the vLLM releases that have one (a GPU's reading would size a GPU's tables)."""
    from workbench.engines.store import releases

    version = request.engine.split("==", 1)[1]
    plugin = releases.paired(NPU_PLUGIN, version)
    if plugin is not None:
        return Resolution(request.engine, UNDECIDED, f"vLLM on an Ascend NPU runs through {plugin}'s platform",
                          flags=tuple(flags), seconds=times, needs=(NPU_PLUGIN,))
    paired = [releases.split(r)[1] for r in releases.with_plugin("vllm", NPU_PLUGIN)]
    final = releases.with_plugin("vllm", NPU_PLUGIN, finals=True)[-1]
    return Resolution(request.engine, UNDECIDED, f"vLLM on an Ascend NPU runs through the {NPU_PLUGIN} plugin's platform "
                                                 f"(block size, graph mode, its drafter), and {NPU_PLUGIN} has no release "
                                                 f"{version} on the package index (final or candidate); the vLLM "
                                                 f"releases it has one for: {', '.join(paired)} (give --engine {final}, "
                                                 "the newest it has a final release for)",
                      flags=tuple(flags), seconds=times)


def _has_tokenizer_file(model: Located) -> bool:
    """Whether the model's folder holds a tokenizer file (a check's test data holds config.json alone)."""
    folder = Path(model.folder) if model.folder else None
    if folder is None or not folder.is_dir():
        return True  # nothing known to be missing: the engine looks for itself
    return any((folder / name).exists() for name in TOKENIZER_FILES) or any(folder.glob("*.tiktoken"))


def _tokenizer_missing(error: BaseException | None) -> BaseException | None:
    """The ``TokenizerFilesMissing`` the resolution stopped on, among the error and its causes."""
    from workbench.engines.vllm.loader import TokenizerFilesMissing

    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, TokenizerFilesMissing):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _libraries_missed(said: str) -> tuple[str, ...]:
    """The libraries every GPU install of vLLM has that this process lacks, when the model
    class's import stopped for want of one: torchvision by name; triton where vLLM put its own
    placeholder in its place (``vllm.triton_utils.HAS_TRITON`` false), whose ``triton.Config`` is a
    bare function, so a kernel module that reads a config's fields at import stops there. Pillow
    comes with torchvision (``wheels.fetch_vision``): transformers defines ``PILImageResampling``
    only where Pillow is installed."""
    if "No module named 'torchvision" in said or "No module named 'PIL" in said or "PILImageResampling" in said:
        return ("torchvision",)
    triton_utils = sys.modules.get("vllm.triton_utils")
    if triton_utils is not None and getattr(triton_utils, "HAS_TRITON", True) is False:
        return ("triton",)
    return ()


def _function_of(error: BaseException, package_dir: Path) -> str:
    frame = engine_frame(error, package_dir)
    return f"{frame.name} ({short_path(frame.filename, package_dir)}:{frame.lineno})" if frame else type(error).__name__


def _where(error: BaseException, package_dir: Path) -> str:
    frame = engine_frame(error, package_dir)
    place = f" ({short_path(frame.filename, package_dir)}:{frame.lineno})" if frame else ""
    return f"{one_line(error)}{place}"


# ---- what the command gave -------------------------------------------------------------------------

_KEY = re.compile(r"^(-{1,2})([^=.]*)")


def _flag_uses(argv: Sequence[str], taken: _Taken, namespace: argparse.Namespace) -> list[FlagUse]:
    """Every option the parser took, with the spelling the command used for it (underscores and
    abbreviations are matched to the option they became; the dotted keys the parser merges into
    one JSON value each keep their own entry)."""
    spelled = [t.split("=", 1)[0] for t in argv if t.startswith("-") and t != "-"]
    uses: list[FlagUse] = []
    values = vars(namespace)
    for option, dest, _ in taken.calls:
        value = jsonable(values.get(dest))
        if option is None:  # a positional: the model tag
            token = next((t for t in argv if not t.startswith("-")), "")
            if dest == "model_tag" and token:
                uses.append(FlagUse(token, "", dest, value))
            continue
        dotted = [t for t in spelled if "." in t and _key(t.split(".", 1)[0]) == option]
        if dotted:
            for token in dotted:
                spelled.remove(token)
                uses.append(FlagUse(token, option, dest, value))
            continue
        uses.append(FlagUse(_spelling(option, spelled), option, dest, value))
    return uses


def _key(token: str) -> str:
    """The option a token names once underscores become dashes (the parser's own rewrite)."""
    match = _KEY.match(token)
    return (match.group(1) + match.group(2).replace("_", "-")) if match else token


def _spelling(option: str, spelled: list[str]) -> str:
    """The command's token that became ``option`` (``--max_model_len`` for ``--max-model-len``, an
    abbreviation for its option), the first unused one."""
    for index, token in enumerate(spelled):
        if _key(token) == option or (len(_key(token)) > 2 and option.startswith(_key(token))):
            return spelled.pop(index)
    return option


# ---- what the engine resolved ----------------------------------------------------------------------


def _settings(config: Any, flags: list[FlagUse], writes: dict[str, Writes]) -> dict[str, Setting]:
    """The flags given (by their parser destination), then every plain field of the engine
    config's sections (``section.field``), each with who set it: the engine function that wrote
    it last, else the one that set the same-named engine argument (the by-GPU defaults are set
    on ``EngineArgs`` before the configs are built), else the value the config was built with."""
    settings: dict[str, Setting] = {f.dest: Setting(f.value, GIVEN, f.spelled or f.option) for f in flags}
    given = {f.dest: f for f in flags}
    engine_args = writes.get("EngineArgs")
    for section in SECTIONS:
        sub = getattr(config, section, None)
        if sub is None:
            continue
        own = writes.get(type(sub).__name__)
        for name, value in _fields(sub).items():
            where = (own.where.get(name) if own else None) or (engine_args.where.get(name) if engine_args else None)
            if where is None and name in given:
                settings[f"{section}.{name}"] = Setting(jsonable(value), GIVEN, given[name].spelled or given[name].option)
                continue
            source = where or f"{type(sub).__name__}.{name}: as create_engine_config built it (the field's default " \
                              f"or the engine argument of that name)"
            given_value = given[name].value if name in given else None
            settings[f"{section}.{name}"] = Setting(jsonable(value), ENGINE, source, given_value)
    return settings


def _fields(sub: Any) -> dict[str, Any]:
    import dataclasses

    names = [f.name for f in dataclasses.fields(sub)] if dataclasses.is_dataclass(sub) else list(vars(sub))
    found = {}
    for name in names:
        if name.startswith("_"):
            continue
        value = getattr(sub, name, None)
        if _plain(value):
            found[name] = value
    return found


def _plain(value: Any) -> bool:
    """A value a setting can hold: a scalar, an enum, or a list of scalars."""
    scalar = (bool, int, float, str)
    if value is None or isinstance(value, scalar):
        return True
    if isinstance(value, (list, tuple)):
        return all(isinstance(v, scalar) for v in value)
    return isinstance(getattr(value, "value", None), (int, str))  # an enum


def _facts(located: Located, config: Any) -> ModelFacts:
    model_config = config.model_config
    hf_config = getattr(model_config, "hf_text_config", None) or getattr(model_config, "hf_config", None)
    architectures = getattr(getattr(model_config, "hf_config", None), "architectures", None) or ["?"]
    mla = bool(getattr(model_config, "use_mla", False))
    return ModelFacts(
        path=located.name, found=located.found, architecture=str(architectures[0]),
        context_length=getattr(model_config, "max_model_len", None), attention="mla" if mla else "mha",
        dsa=getattr(hf_config, "index_topk", None) is not None, kv_bytes_per_token=_kv_bytes(config),
        num_nextn_predict_layers=int(getattr(hf_config, "num_nextn_predict_layers", 0) or 0),
    )


def _kv_bytes(config: Any) -> int | None:
    """One token's KV cache over all layers and ranks, with the release's own shape getters."""
    model_config, parallel = config.model_config, config.parallel_config
    try:
        layers = model_config.get_num_layers(parallel) * parallel.pipeline_parallel_size
        heads = model_config.get_num_kv_heads(parallel) * parallel.tensor_parallel_size
        head_size = model_config.get_head_size()
    except Exception:  # noqa: BLE001 - a getter this release lacks: no figure rather than a guess
        return None
    dtype = str(getattr(config.cache_config, "cache_dtype", "auto"))
    if dtype == "auto":
        dtype = str(getattr(model_config, "dtype", "bfloat16")).replace("torch.", "")
    per_value = DTYPE_BYTES.get(dtype, 2)
    mla = bool(getattr(model_config, "use_mla", False))
    return int(layers * (1 if mla else 2) * (1 if mla else heads) * head_size * per_value)


def _draft(namespace: argparse.Namespace, request: LaunchRequest) -> Located | None:
    """The draft model a ``--speculative-config`` names (``"model"``), found as the target is found
    and put in its place when it is a local copy; None when the config names no model (MTP, n-gram)."""
    import json

    spec = getattr(namespace, "speculative_config", None)
    text = isinstance(spec, str)
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError:
            return None  # the release's own parsing says what is wrong with it
    if not isinstance(spec, dict) or not isinstance(spec.get("model"), str) or not spec["model"]:
        return None
    found = locate(spec["model"], revision=spec.get("revision"), model_config=request.draft_model_config, cwd=request.cwd,
                   lookup_env=request.lookup_env, flag="--speculative-config model", config_flag="--draft-model-config",
                   remote_code=bool(getattr(namespace, "trust_remote_code", False)))
    if not found.missing and found.engine_path != found.name:
        spec = {**spec, "model": found.engine_path}
        namespace.speculative_config = json.dumps(spec) if text else spec
    return found
