"""A launch command read by the engine release's own code: the adapter interface, one adapter per engine.

Two processes take part. The **workbench** (``workbench check``, a notebook) reads the shell
around the command (``workbench.preflight.command``: docker, ``bash -c``, ``env``, ``export``),
finds the launch program (``Program``), picks the release and the GPU, and sends a
``LaunchRequest``. The **engine process** (``workbench.engines.commands.launch_service``: one long-lived
process per release and GPU that imports the release's modules once from the wheel cache, then
forks a child per request, so every request starts from the same clean state) hands the request
to the engine's adapter, which runs the release's own parser and default resolution and answers
with a ``Resolution``. Everything that crosses between them is JSON (``to_json`` / ``from_json``
of the dataclasses below); nothing in the workbench process imports an engine.

An adapter is a class in ``workbench/engines/<engine>/launch_adapter.py`` listed in ``ADAPTERS``
(by ``"module:Class"``, imported only in the engine process). It implements ``LaunchAdapter``:

``load(gpu)``
    Runs once per engine process, before any request, with the release's package registered and
    the accelerator libraries stood in (``workbench.engines.sandbox.standins``) and the GPU's platform
    stood in (``workbench.engines.sandbox.platform_standins.install(gpu)``: ``torch.cuda`` answering as
    ``gpu``, a ``nvidia-smi`` on ``PATH``). Imports the parser and resolution modules (the slow
    part, paid once) and returns a ``LoadReport``: what loaded, what did not and why (one line,
    never a traceback). It must not resolve anything: the state it leaves is shared by every
    request through ``fork``.

``resolve(request)``
    Runs in a fresh child per request. Sets ``request.env`` in ``os.environ`` (the command's
    own variables: an engine reads some at start-up), then:

    1. parses ``request.argv`` with the release's own parser, exactly as the engine's entry
       point does (SGLang: ``ServerArgs.add_cli_args`` on an ``argparse.ArgumentParser``; vLLM:
       its ``FlexibleArgumentParser`` with ``EngineArgs.add_cli_args``, so abbreviations,
       aliases, underscores, dotted keys and JSON values behave as in the engine). A parser
       error is ``status="rejected"``, ``rejected_by="parser"`` and ``message`` the parser's
       own text (``argparse``'s ``error:`` line without the usage). Every option the command
       wrote becomes one ``FlagUse`` in ``flags`` (in command order; positionals too, with
       ``spelled`` the token and ``option`` ``""``).
    2. finds the model (``workbench.engines.sandbox.model_lookup.locate``: a local directory, the user's
       Hugging Face cache read offline, ``request.model_config``); a model that cannot be found
       is ``status="undecided"`` with ``message`` naming exactly what to give. The draft model
       likewise where the release reads its config.
    3. runs the release's default resolution on the parsed arguments (SGLang: ``ServerArgs``
       construction and its resolution; vLLM: ``create_engine_config``), the model config
       loaded by the engine's own loader (transformers' ``AutoConfig`` from the release's pinned
       transformers, the engine's config classes) with ``HF_HUB_OFFLINE=1``. An exception the
       engine raises on purpose (a ``ValueError`` / ``AssertionError`` / ``RuntimeError`` of its
       own validation, e.g. NGRAM on a non-CUDA device) is ``status="rejected"``,
       ``rejected_by`` the engine function that raised (``module.qualname``) and ``message``
       the exception's text. An exception that comes from running on a CPU (a stand-in called,
       a CUDA call) is not a rejection: the values that code would have set are taken from
       data (``origin="read"``, with ``file:line`` and the reason in ``source``) and the
       failure is named in ``LoadReport``/``notes``.
    4. reports the resolved values in ``settings``, keyed by the engine's own field names
       (SGLang ``ServerArgs`` fields: ``context_length``, ``page_size``, ``attention_backend``,
       ``speculative_algorithm``, ``speculative_num_steps``, ``speculative_eagle_topk``,
       ``speculative_num_draft_tokens``, ``cuda_graph_max_bs``, ``disable_cuda_graph``,
       ``device``, ...; vLLM: dotted config paths such as ``model_config.max_model_len``,
       ``cache_config.block_size``, ``speculative_config.method``). Every flag the command gave
       has its ``dest`` among the settings; beyond those, at least every value the workbench's
       side (``workbench.preflight.resolve_<engine>``) reads. Each ``Setting`` says where it
       came from (``origin``: ``given``, ``engine``, ``read`` or ``workbench``; ``source``: the
       flag as spelled, the engine function and ``file:line`` that wrote the value, the
       ``file:line`` a read value was read at and why, or the workbench's reason).

The workbench side (``workbench.preflight.resolve_<engine>.deployment``) turns a resolved
``Resolution`` into the deployment the rows check, reading ``settings`` by name, and marks each
``FlagUse`` as modelled or not (whether its ``dest`` is one of the names it reads).

Exit statuses follow from ``Resolution.status``: ``resolved`` goes on to the rows (0 or 1, or 3
for what no backend models), ``rejected`` is 2 (the engine's own message), ``undecided`` and
``unloadable`` are 3.

``describe_parser()`` (engine process, after ``load``) returns the parser's facts for the
learned file's ``parser`` section: the number of options, the option strings, the aliases
(several option strings for one destination).
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.engines.store.gpus import Gpu

# Where each setting came from.
GIVEN = "given"  # the command: source is the flag as spelled ("--speculative-algo")
ENGINE = "engine"  # the release's own code ran and wrote it: source "function (file:line)"
READ = "read"  # the release's code could not run on a CPU: source "file:line: why"
WORKBENCH = "workbench"  # the workbench's assumption: source says what and why
ORIGINS = (GIVEN, ENGINE, READ, WORKBENCH)

# Resolution.status
RESOLVED, REJECTED, UNDECIDED, UNLOADABLE = "resolved", "rejected", "undecided", "unloadable"
STATUSES = (RESOLVED, REJECTED, UNDECIDED, UNLOADABLE)

JSONValue = Any  # a value json.dumps takes


@dataclass(frozen=True)
class Program:
    """One way a command starts an engine: the words before its arguments.

    ``words`` match the command's tokens after the wrappers (``("sglang", "serve")``,
    ``("-m", "sglang.launch_server")`` after any ``python``/``python3.X``); ``keep`` says how many
    of the matched words the engine's parser sees too (``vllm serve MODEL``: the parser of
    ``serve`` is given ``MODEL ...``, so 0 of ``("vllm", "serve")``)."""

    engine: str  # "sglang"
    words: tuple[str, ...]
    python_module: bool  # True: ``python -m <words[-1]>``; False: an executable named words[0]
    keep: int = 0

    @property
    def shown(self) -> str:
        return f"python -m {self.words[-1]}" if self.python_module else " ".join(self.words)


@dataclass(frozen=True)
class LaunchRequest:
    engine: str  # the release: "sglang==0.5.23"
    program: str  # Program.shown of the program found
    argv: tuple[str, ...]  # what the engine's parser is given
    env: Mapping[str, str]  # the command's own variables (VAR=x, env, export, docker -e)
    gpu: Gpu
    model_config: str | None = None  # --model-config: a config.json standing in for the model's
    lookup_env: Mapping[str, str] = field(default_factory=dict)  # the checker's HF_HOME / HF_HUB_CACHE
    cwd: str = "."  # where a relative model path is looked up
    draft_model_config: str | None = None  # --draft-model-config: a config.json standing in for the draft model's


@dataclass(frozen=True)
class FlagUse:
    """One option of the command as the engine's parser took it."""

    spelled: str  # as written: "--speculative-algo", "--max_model_len", "-tp"
    option: str  # the engine's own option string it resolved to: "--speculative-algorithm"
    dest: str  # the setting it writes: "speculative_algorithm"
    value: JSONValue  # as the parser converted it


@dataclass(frozen=True)
class Setting:
    value: JSONValue
    origin: str  # one of ORIGINS
    source: str
    given: JSONValue = None  # what the command gave, where the engine's resolution replaced it


@dataclass(frozen=True)
class ModelFacts:
    """What the engine's loader made of the model (and of the draft model, ``draft``)."""

    path: str  # as the command names it
    found: str  # where its config.json was read: "HF cache: <dir>", "local directory", "--model-config F"
    architecture: str  # hf_config.architectures[0]
    context_length: int | None  # as the release derives it (its own function), before --context-length
    attention: str  # "mha" or "mla"
    dsa: bool  # DeepSeek sparse attention (the engine's own predicate)
    kv_bytes_per_token: int | None  # the KV cache of one token, all layers, at the resolved KV dtype
    num_nextn_predict_layers: int = 0
    draft: ModelFacts | None = None
    config: Mapping[str, Any] | None = None  # the config as the engine's loader read it (to_dict), for estimates


@dataclass(frozen=True)
class LoadReport:
    """What one engine process loaded from the release (the learned file's ``launch`` section)."""

    engine: str
    parser: str  # "loaded" or the one-line reason it did not
    resolution: str  # "loaded", "partial: <what is read instead>", or the reason it did not
    functions: tuple[str, ...] = ()  # the resolution functions that ran
    read: tuple[str, ...] = ()  # settings taken from data (file:line) instead of code
    seconds: float = 0.0


@dataclass(frozen=True)
class Resolution:
    engine: str
    status: str  # one of STATUSES
    message: str = ""  # rejected: the engine's own text; undecided / unloadable: one line, what to give or why
    rejected_by: str = ""  # "parser" or the engine function that refused
    flags: tuple[FlagUse, ...] = ()
    settings: Mapping[str, Setting] = field(default_factory=dict)
    model: ModelFacts | None = None
    notes: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()  # the resolution functions that ran, in order
    seconds: Mapping[str, float] = field(default_factory=dict)  # "parse", "resolve", ...
    # libraries a real deployment has whose absence here stopped the resolution ("triton",
    # "torchvision"): the engine process that has them is asked again (``launch_service.resolve``)
    needs: tuple[str, ...] = ()


class LaunchAdapter(abc.ABC):
    """One engine's parser and resolution, run inside the engine process (see the module docstring)."""

    engine: str
    # The package the engine runs through on a device platform it does not support by itself (vLLM on
    # an Ascend NPU: the vllm-ascend plugin), by ``Gpu.platform``; its release of the engine's version
    # is loaded beside it (``launch_service.library_paths``).
    platform_plugins: Mapping[str, str] = {}

    def install(self, package_dir: Path, deps: Path, extra_paths: Sequence[Path], gpu: Gpu) -> Path:
        """Make the release importable in this process, before ``load``: by default the GPU's
        platform stand-in, torch settled without triton, and the release's package registered bare
        with the accelerator libraries stood in by name (``standins.install``). An engine whose
        modules need another arrangement overrides it (vLLM: ``vllm.loader``). Returns the folder
        of the stand-in tools (``platform_standins.install``), removed when the process ends."""
        from workbench.engines.checking import checks
        from workbench.engines.sandbox import platform_standins, standins

        tools = platform_standins.install(gpu)
        checks.settle_torch_without_triton()
        # a library given a folder of its own (torchvision) is imported for real, not stood in
        real = [p.name for p in extra_paths if p.name in standins.ALWAYS_STAND_IN]
        standins.install(package_dir, deps, list(extra_paths), real=real)
        return tools

    def warm_argv(self, model_dir: str) -> tuple[str, ...]:
        """The arguments of a warm-up command naming the model folder ``model_dir``."""
        return ("--model-path", model_dir)

    def warm_model(self) -> dict[str, Any] | None:
        """The ``config.json`` of the warm-up model (None: the engine process's small Llama). The
        modules its resolution imports are imported once, before any request."""
        return None

    @abc.abstractmethod
    def load(self, gpu: Gpu) -> LoadReport:
        """Import the parser and resolution modules once (the engine process, before any request)."""

    @abc.abstractmethod
    def resolve(self, request: LaunchRequest) -> Resolution:
        """Parse and resolve one command (a forked child: free to change global state)."""

    @abc.abstractmethod
    def describe_parser(self) -> dict[str, JSONValue]:
        """The parser's facts: ``{"options": N, "option_strings": [...], "aliases": {dest: [...]}}``."""


# Each engine's adapter ("module:Class"), imported only in that engine's process, and its programs.
ADAPTERS: dict[str, str] = {
    "sglang": "workbench.engines.sglang.launch_adapter:SGLangAdapter",
    "vllm": "workbench.engines.vllm.launch_adapter:VLLMAdapter",
}

PROGRAMS: tuple[Program, ...] = (
    Program("sglang", ("-m", "sglang.launch_server"), python_module=True),
    Program("sglang", ("sglang", "serve"), python_module=False),
    Program("sglang", ("-m", "sglang.launch_server_grpc"), python_module=True),
    Program("vllm", ("vllm", "serve"), python_module=False),
    Program("vllm", ("-m", "vllm.entrypoints.openai.api_server"), python_module=True),
)


def platform_plugin(engine: str, platform: str) -> str | None:
    """The package ``engine`` runs through on device ``platform`` (``LaunchAdapter.platform_plugins``)."""
    if engine not in ADAPTERS:
        return None
    module, _, name = ADAPTERS[engine].partition(":")
    plugins: Mapping[str, str] = getattr(importlib.import_module(module), name).platform_plugins
    return plugins.get(platform)


def adapter(engine: str) -> LaunchAdapter:
    """A new adapter for ``engine`` (``"sglang"``); ValueError naming the engines that have one."""
    if engine not in ADAPTERS:
        raise ValueError(f"engine: {engine!r} has no launch adapter (have: {', '.join(ADAPTERS)})")
    module, _, name = ADAPTERS[engine].partition(":")
    made: LaunchAdapter = getattr(importlib.import_module(module), name)()
    return made


# ---- JSON across the process boundary ---------------------------------------------------------


def to_json(value: Any) -> JSONValue:
    """A dataclass of this module (nested ones included) as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def gpu_from_json(data: Mapping[str, Any]) -> Gpu:
    return Gpu(**{**data, "capability": tuple(data["capability"])})


def request_from_json(data: Mapping[str, Any]) -> LaunchRequest:
    return LaunchRequest(**{**data, "argv": tuple(data["argv"]), "gpu": gpu_from_json(data["gpu"])})


def model_from_json(data: Mapping[str, Any] | None) -> ModelFacts | None:
    if data is None:
        return None
    return ModelFacts(**{**data, "draft": model_from_json(data.get("draft"))})


def resolution_from_json(data: Mapping[str, Any]) -> Resolution:
    return Resolution(
        **{**data, "flags": tuple(FlagUse(**f) for f in data.get("flags", ())),
           "settings": {k: Setting(**s) for k, s in data.get("settings", {}).items()},
           "model": model_from_json(data.get("model")), "notes": tuple(data.get("notes", ())),
           "functions": tuple(data.get("functions", ())), "needs": tuple(data.get("needs", ()))})


def load_report_from_json(data: Mapping[str, Any]) -> LoadReport:
    return LoadReport(**{**data, "functions": tuple(data.get("functions", ())), "read": tuple(data.get("read", ()))})


__all__ = [
    "ADAPTERS", "ENGINE", "GIVEN", "ORIGINS", "PROGRAMS", "READ", "REJECTED", "RESOLVED", "STATUSES", "UNDECIDED",
    "UNLOADABLE", "WORKBENCH", "FlagUse", "Gpu", "LaunchAdapter", "LaunchRequest", "LoadReport", "ModelFacts", "Program",
    "Resolution", "Setting", "adapter", "gpu_from_json", "load_report_from_json", "model_from_json", "request_from_json",
    "resolution_from_json", "to_json",
]
