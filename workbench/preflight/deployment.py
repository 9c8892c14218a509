"""What a launch command resolves to: the deployment a check runs, every setting with where it came from.

Each engine's side (``resolve_sglang.deployment``, ``resolve_vllm.deployment``) builds one from
the engine's own reading of the command (``launch_adapters.Resolution``): the settings by the
engine's names, each given, written by the engine's code (which function, file:line), read from
source (file:line, and why), or the workbench's assumption; the model as the engine loaded it;
and the serving geometry the tables are sized by.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from workbench.analysis.reach import Conditions, ReachRule
from workbench.analysis.verdict_numbers import kv_budget_bytes
from workbench.engines.commands.adapters import GIVEN, READ, WORKBENCH, FlagUse, ModelFacts, Resolution
from workbench.engines.commands.adapters import Setting as EngineSetting
from workbench.engines.commands.release_choice import Choice
from workbench.engines.store.gpus import Gpu
from workbench.engines.store.launch_defaults import LaunchVersion
from workbench.model.geometry import Mode, ServingGeometry
from workbench.preflight.command import LaunchCommand

DEVICE_FAMILIES = {"npu": "ascend-npu", "cuda": "cuda", "rocm": "rocm"}  # TableBackend.device_family of a device


@dataclass(frozen=True)
class Setting:
    name: str
    value: object
    origin: str  # given, engine, read or workbench
    source: str  # the flag as spelled; the engine function (file:line); file:line and why; the assumption
    modelled: bool = True  # False: the value changes no buffer the workbench models
    given: object = None  # what the command gave, where the engine replaced it

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "value": self.value, "origin": self.origin, "source": self.source,
                "modelled": self.modelled, **({"given": self.given} if self.given is not None else {})}


@dataclass(frozen=True)
class ResolveContext:
    """What the workbench's side of a resolution knows besides the engine's answer."""

    command: LaunchCommand
    choice: Choice
    version: LaunchVersion  # the buffer data and run-time facts the rows read
    gpu: Gpu
    gpu_reason: str
    overshoot: int | None


@dataclass(frozen=True)
class Deployment:
    """One resolved launch: everything a check needs, nothing parsed any more."""

    version: LaunchVersion
    command: LaunchCommand
    choice: Choice
    model_path: str
    model: ModelFacts
    device: str
    geometry: ServingGeometry
    launch_names: tuple[str, ...]  # what sets tables up: the attention backend, features ("dsa-indexer")
    modes: tuple[tuple[Mode, int], ...]  # (mode, step_id) of every graph the deployment captures
    graphs: bool  # False: graphs disabled, the eager path builds tables fresh each step
    reach_rule: ReachRule
    settings: Mapping[str, Setting]  # by the engine's names, in the order shown
    flags: tuple[FlagUse, ...] = ()
    notes: tuple[str, ...] = ()
    extra: Mapping[str, object] = field(default_factory=dict)  # engine-specific values (vLLM: dcp, lookahead)
    conditions: Conditions = field(default_factory=Conditions)  # overlap, the KV pool: what the reach depends on
    pool_estimated: bool = True  # the pool's size is an estimate (or unknown), not --max-total-tokens
    pool_tokens: int | None = None  # the KV pool, given or estimated (None: unknown)

    @property
    def device_family(self) -> str:
        return DEVICE_FAMILIES.get(self.device, self.device)

    @property
    def kv_bytes_per_token(self) -> int | None:
        return self.model.kv_bytes_per_token

    @property
    def kv_budget_bytes(self) -> int | None:
        """The KV cache of a full graph batch (``verdict_numbers.kv_budget_bytes``)."""
        return kv_budget_bytes(self.geometry.max_bs, self.geometry.context_len, self.kv_bytes_per_token)


class Settings:
    """The resolved settings in the order shown: the engine's, then the workbench's own."""

    def __init__(self, resolution: Resolution, modelled: set[str]) -> None:
        self.engine = resolution.settings
        self.modelled = modelled
        self.items: dict[str, Setting] = {}
        self.taken: set[str] = set()  # the engine's names taken, whatever each is shown as
        self.notes: list[str] = []

    def take(self, name: str, shown: str | None = None) -> object:
        """The engine's value of ``name`` (recorded as shown); None when the engine has none."""
        found: EngineSetting | None = self.engine.get(name)
        if found is None:
            return None
        self.taken.add(name)
        self.items[shown or name] = Setting(shown or name, found.value, found.origin, found.source, True, found.given)
        return found.value

    def add(self, name: str, value: object, origin: str, source: str) -> object:
        self.items[name] = Setting(name, value, origin, source, True)
        return value

    def read(self, name: str, version: LaunchVersion, key: str, why: str) -> object:
        """A run-time fact read from the release's source (``data/launch_defaults.json``)."""
        fact = version.default(key)
        return self.add(name, fact.value, READ, f"{fact.source}: {why}")

    def rest(self, flags: tuple[FlagUse, ...]) -> dict[str, Setting]:
        """Every setting taken, then every other flag the command gave: one the deployment reads
        through another setting the engine derived from it (NGRAM's BFS breadth, read as its topk;
        the deprecated ``--cuda-graph-max-bs``, read as the graph config) as modelling a buffer, the
        rest as modelling none."""
        out = dict(self.items)
        for flag in flags:
            if flag.dest in out or flag.dest in self.taken:
                continue
            found = self.engine.get(flag.dest)
            value, origin, source = (found.value, found.origin, found.source) if found else (flag.value, GIVEN, flag.spelled)
            out[flag.dest] = Setting(flag.dest, value, origin, source, flag.dest in self.modelled,
                                     found.given if found else None)
        return out


def gpu_setting(context: ResolveContext) -> Setting:
    g = context.gpu
    return Setting("gpu", f"{g.name} ({g.device_name}, sm {g.capability[0]}.{g.capability[1]}, {g.memory_mib} MiB)",
                   GIVEN if context.gpu_reason == "--gpu" else WORKBENCH, f"{context.gpu_reason}; {g.source}")


class NotModelled(ValueError):
    """A deployment the engine accepts that the workbench's models do not cover (undecided, not bad input)."""


def check_geometry(**fields: object) -> ServingGeometry:
    try:
        return ServingGeometry(**fields)  # type: ignore[arg-type]
    except ValueError as err:
        raise NotModelled(f"the engine accepts it, but the workbench models no such deployment: {err}") from None
