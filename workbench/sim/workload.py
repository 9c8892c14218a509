"""What a simulated serving run is fed: requests, an acceptance model, the run's configuration.

Everything random draws from one ``random.Random`` the simulation seeds, so a seed names a run.

    lengths     ``LengthDist``: fixed (``"500"``) or uniform over a closed range (``"100:800"``)
    requests    ``Workload``: ``num_requests`` drawn from two length distributions, or a trace file
                (CSV with a header, or JSON lines, each with ``prompt_len`` and ``output_len``)
    acceptance  ``Acceptance``: tokens a target-verify step commits per request, in ``1 .. D``:
                ``fixed:K``, ``geometric:RATE`` (each further draft token is accepted with
                probability RATE until the first rejection) or ``trace:K1,K2,...`` (drawn in order,
                cycling when exhausted)
    config      ``SimConfig``: geometry, sizing rule, gather, pool, admission, overshoot
    scenarios   ``qwq_scenario`` (the NPU block-table seed as a run) and ``exact_fit_scenario``
                (the allocator seed as a run)
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from workbench import backends
from workbench.analysis.seeds import EXACT_FIT
from workbench.model.allocator import Gather
from workbench.model.cases import Replay
from workbench.model.geometry import Mode, ServingGeometry, cdiv

# The exact-fit seed's gathers: the legacy one before its fix and the fixed one after.
LEGACY_GATHER = Gather(EXACT_FIT.before["gather"])
FIXED_GATHER = Gather(EXACT_FIT.after["gather"])
ACCEPTANCE_KINDS = ("fixed", "geometric", "trace")


@dataclass(frozen=True)
class Request:
    """One request: ``prompt_len`` tokens prefilled, then ``output_len`` tokens committed by steps."""

    req_id: int
    prompt_len: int
    output_len: int

    def __post_init__(self) -> None:
        if self.prompt_len < 1:
            raise ValueError(f"prompt_len: {self.prompt_len} is out of range (allowed: 1 or more)")
        if self.output_len < 1:
            raise ValueError(f"output_len: {self.output_len} is out of range (allowed: 1 or more)")


@dataclass(frozen=True)
class LengthDist:
    """A length drawn uniformly from ``low .. high`` (both included); fixed when they are equal."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError(f"lengths: {self.low}:{self.high} is not a range 1 <= low <= high")

    @classmethod
    def parse(cls, text: str) -> LengthDist:
        """``"500"`` (fixed) or ``"100:800"`` (uniform)."""
        parts = text.split(":")
        try:
            values = [int(p) for p in parts]
        except ValueError:
            raise ValueError(f"lengths: {text!r} is not N or LOW:HIGH (integers)") from None
        if len(values) not in (1, 2):
            raise ValueError(f"lengths: {text!r} is not N or LOW:HIGH (integers)")
        return cls(values[0], values[-1])

    def sample(self, rng: random.Random) -> int:
        return self.low if self.low == self.high else rng.randint(self.low, self.high)


@dataclass(frozen=True, kw_only=True)
class Workload:
    """``num_requests`` requests from two length distributions, or the requests of a trace."""

    num_requests: int = 4
    prompt: LengthDist = LengthDist(64, 64)
    output: LengthDist = LengthDist(64, 64)
    trace: tuple[Request, ...] = ()

    def __post_init__(self) -> None:
        if not self.trace and not 1 <= self.num_requests <= 100_000:
            raise ValueError(f"num_requests: {self.num_requests} is out of range (allowed: 1 to 100000)")

    def requests(self, rng: random.Random) -> list[Request]:
        """The run's requests in arrival order (a trace is used as it is, without drawing)."""
        if self.trace:
            return list(self.trace)
        return [Request(i, self.prompt.sample(rng), self.output.sample(rng)) for i in range(self.num_requests)]


def read_trace(path: str | Path) -> tuple[Request, ...]:
    """Requests from a CSV file with a header or from JSON lines, each with prompt_len, output_len."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ValueError(f"trace: cannot read {str(path)!r} ({err.strerror})") from None
    rows: list[dict[str, object]]
    if path.suffix in (".jsonl", ".json"):
        try:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as err:
            raise ValueError(f"trace: {path.name} is not JSON lines ({err.msg})") from None
    else:
        rows = [dict(r) for r in csv.DictReader(text.splitlines())]
    requests = tuple(_trace_request(i, row) for i, row in enumerate(rows))
    if not requests:
        raise ValueError(f"trace: {path.name} holds no requests")
    return requests


def _trace_request(index: int, row: object) -> Request:
    if not isinstance(row, dict):
        raise ValueError(f"trace: entry {index + 1} is not an object with prompt_len and output_len")
    try:
        return Request(index, int(row["prompt_len"]), int(row["output_len"]))
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"trace: entry {index + 1} needs integer prompt_len and output_len ({err})") from None


@dataclass(frozen=True, kw_only=True)
class Acceptance:
    """How many tokens one request commits in one target-verify step (1 .. D)."""

    kind: str = "fixed"
    count: int = 1  # fixed
    rate: float = 0.0  # geometric: probability each further draft token is accepted
    trace: tuple[int, ...] = ()  # trace: the counts, in draw order

    def __post_init__(self) -> None:
        if self.kind not in ACCEPTANCE_KINDS:
            raise ValueError(f"acceptance: {self.kind!r} is not one of {', '.join(ACCEPTANCE_KINDS)}")
        if self.kind == "fixed" and self.count < 1:
            raise ValueError(f"acceptance: fixed count {self.count} is out of range (allowed: 1 or more)")
        if self.kind == "geometric" and not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"acceptance: rate {self.rate} is out of range (allowed: 0 to 1)")
        if self.kind == "trace" and (not self.trace or min(self.trace) < 1):
            raise ValueError("acceptance: a trace needs at least one count, each 1 or more")

    @classmethod
    def parse(cls, text: str) -> Acceptance:
        """``fixed:K``, ``geometric:RATE`` or ``trace:K1,K2,...``."""
        kind, _, value = text.partition(":")
        try:
            if kind == "fixed":
                return cls(kind=kind, count=int(value))
            if kind == "geometric":
                return cls(kind=kind, rate=float(value))
            if kind == "trace":
                return cls(kind=kind, trace=tuple(int(v) for v in value.split(",")))
        except ValueError as err:
            if str(err).startswith("acceptance:"):
                raise
            raise ValueError(f"acceptance: {text!r} has a bad value (write fixed:3, geometric:0.7 or trace:1,4,2)") from None
        raise ValueError(f"acceptance: {text!r} is not fixed:K, geometric:RATE or trace:K1,K2,...")

    def label(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{self.count}"
        if self.kind == "geometric":
            return f"geometric:{self.rate:g}"
        return "trace:" + ",".join(str(k) for k in self.trace)

    def draw(self, rng: random.Random, draft_tokens: int, draw_index: int) -> int:
        """Tokens committed by one request's verify: the first is always kept (the target's own).

        Worked example, geometric rate 0.5, D = 4: draws 0.3 (< 0.5, accept), 0.8 (reject) give 2.
        """
        if self.kind == "fixed":
            accepted = self.count
        elif self.kind == "trace":
            accepted = self.trace[draw_index % len(self.trace)]
        else:
            accepted = 1
            while accepted < draft_tokens and rng.random() < self.rate:
                accepted += 1
        return max(1, min(accepted, draft_tokens))


# ---- the run's configuration ------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """How the engine is launched and scheduled for one run; ``geometry.max_bs`` is the captured batch."""

    geometry: ServingGeometry
    rule: str = "req-to-token"
    gather: Gather = FIXED_GATHER
    num_pages: int | None = None  # KV pool pages; None: max_bs requests of the full table width
    conservativeness: float = 1.0
    overshoot: int = 0
    acceptance: Acceptance = Acceptance()
    replay: Replay = Replay.DYNAMIC  # for the backends that have a static replay (DSA)
    # a release's string case options (TableCase.options, e.g. Ascend's spec_fill), sorted pairs
    options: tuple[tuple[str, str], ...] = ()
    components: tuple[str, ...] = backends.DEFAULT_COMPONENTS  # the tables each step replays
    # The graphs each step replays, for every component that captures them (draft-decode at the
    # drafter's last step, which reads furthest). Empty: the step's own mode only (``mode``).
    modes: tuple[str, ...] = ()
    stop_on_failure: bool = True
    max_steps: int = 20_000
    # Tokens a draft-extend graph's replay carries past the batch's committed length: spec v2 writes
    # the verify's D window again (D), spec v1 what the request accepted (0 here: the committed length).
    draft_extend_window: int = 0

    def __post_init__(self) -> None:
        backends.check_rule_name(self.rule)
        object.__setattr__(self, "components", tuple(self.components))
        object.__setattr__(self, "modes", tuple(Mode.parse(m).value for m in self.modes))
        for name in self.components:
            backends.check_rule(backends.backend_of(name), self.rule)
        object.__setattr__(self, "gather", Gather.parse(self.gather))
        object.__setattr__(self, "replay", Replay.parse(self.replay))
        if self.num_pages is not None and self.num_pages < 1:
            raise ValueError(f"num_pages: {self.num_pages} is out of range (allowed: 1 or more)")
        if not 0.0 <= self.conservativeness <= 10.0:
            raise ValueError(f"conservativeness: {self.conservativeness} is out of range (allowed: 0 to 10)")
        top = self.max_overshoot
        if not 0 <= self.overshoot <= top:
            raise ValueError(f"overshoot: {self.overshoot} is out of range (allowed: 0 to {top}: W - D - (ctx - 1))")
        if not 0 <= self.draft_extend_window <= self.geometry.draft_tokens:
            raise ValueError(f"draft_extend_window: {self.draft_extend_window} is out of range "
                             f"(allowed: 0 to {self.geometry.draft_tokens}, the draft tokens)")
        if self.max_steps < 1:
            raise ValueError(f"max_steps: {self.max_steps} is out of range (allowed: 1 or more)")

    def replace(self, **changes: object) -> SimConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @property
    def max_overshoot(self) -> int:
        """Tokens past ``ctx - 1`` a verify can still write its drafts for (0 without speculation, and
        where the request table cannot hold a verify at ``ctx - 1`` at all: width generation g0)."""
        g = self.geometry
        return max(0, g.max_committed_len(Mode.TARGET_VERIFY) - (g.context_len - 1)) if g.speculative else 0

    @property
    def pool_pages(self) -> int:
        g = self.geometry
        return self.num_pages if self.num_pages is not None else g.max_bs * cdiv(g.request_table_width, g.page_size)

    @property
    def mode(self) -> Mode:
        return Mode.TARGET_VERIFY if self.geometry.speculative else Mode.DECODE

    @property
    def replayed_modes(self) -> tuple[Mode, ...]:
        """The step's own mode first, then the other graphs named in ``modes``."""
        others = tuple(Mode(m) for m in self.modes if m != self.mode.value)
        return (self.mode, *others)


def check_requests(config: SimConfig, requests: Sequence[Request]) -> None:
    """Every request must be admissible and fit the pool on its own (else the run cannot finish)."""
    g = config.geometry
    for req in requests:
        if req.prompt_len > g.context_len - 2:
            raise ValueError(f"prompt_len: {req.prompt_len} is out of range (allowed: 1 to ctx - 2 = {g.context_len - 2})")
        longest = min(req.prompt_len + req.output_len, g.context_len - 1 + config.overshoot) + g.draft_tokens
        if cdiv(longest, g.page_size) > config.pool_pages:
            raise ValueError(
                f"num_pages: {config.pool_pages} cannot hold request {req.req_id} alone "
                f"({cdiv(longest, g.page_size)} pages for {longest} tokens)"
            )


SWEEP_PARAMS = ("context_len", "draft_tokens", "acceptance_rate", "conservativeness", "overshoot", "num_pages")


def vary(config: SimConfig, param: str, value: float) -> SimConfig:
    """``config`` with one sweep parameter changed (geometry fields through the geometry)."""
    if param in ("context_len", "draft_tokens"):
        return config.replace(geometry=config.geometry.replace(**{param: int(value)}))
    if param == "acceptance_rate":
        return config.replace(acceptance=Acceptance(kind="geometric", rate=float(value)))
    if param in ("overshoot", "num_pages"):
        return config.replace(**{param: int(value)})
    if param == "conservativeness":
        return config.replace(conservativeness=float(value))
    raise ValueError(f"param: {param!r} is not one of {', '.join(SWEEP_PARAMS)}")


# ---- named scenarios ---------------------------------------------------------------------------

SCENARIOS = ("qwq", "exact-fit")


def qwq_scenario(
    *, rule: str = "context", acceptance: Acceptance | None = None, max_bs: int = 4,
    num_requests: int = 4,
) -> tuple[SimConfig, Workload]:
    """QwQ-32B on Ascend (the Ascend seed): ctx 32768, ps 128, NGRAM D 16, topk 10, no draft KV.

    Prompts start close to the context (32500 .. 32740 tokens) so only the last few hundred
    tokens of each request are stepped; outputs of 64 .. 512 tokens carry most of them to the cap.
    """
    geometry = ServingGeometry(context_len=32768, page_size=128, draft_tokens=16, spec_topk=10,
                               draft_has_kv=False, max_bs=max_bs)
    workload = Workload(num_requests=num_requests, prompt=LengthDist(32500, 32740), output=LengthDist(64, 512))
    acceptance = acceptance or Acceptance(kind="geometric", rate=0.6)
    return SimConfig(geometry=geometry, rule=rule, acceptance=acceptance), workload


def exact_fit_scenario(
    *, gather: Gather | str = LEGACY_GATHER, conservativeness: float = 0.0, num_pages: int = 28,
) -> tuple[SimConfig, Workload]:
    """A small pool (28 pages of 4 tokens), 8 short requests, 4 at a time, no speculation.

    With optimistic admission (conservativeness 0) the pool runs full, so decode batches that need
    exactly the free pages are common: the state of the allocator seed
    (docs/semantics.md#exact-fit).
    """
    geometry = ServingGeometry(context_len=512, page_size=4, max_bs=4)
    workload = Workload(num_requests=8, prompt=LengthDist(8, 40), output=LengthDist(8, 64))
    config = SimConfig(geometry=geometry, gather=Gather.parse(gather), num_pages=num_pages,
                       conservativeness=conservativeness)
    return config, workload


# ---- the command line's flags (kept here so ``workbench simulate`` holds no logic) --------------


@dataclass(frozen=True)
class Simulation:
    """Everything ``workbench simulate`` runs: a config, a workload, seeds, rules and gathers."""

    config: SimConfig
    workload: Workload
    seeds: tuple[int, ...]
    rules: tuple[str, ...]
    gathers: tuple[Gather, ...]


def simulation_from_args(args: argparse.Namespace) -> Simulation:
    """Validate the flags into a ``Simulation``; a bad value raises ValueError naming the flag."""
    geometry = ServingGeometry(
        context_len=args.context_len, page_size=args.page_size, draft_tokens=args.draft_tokens,
        spec_steps=args.spec_steps, spec_topk=args.spec_topk, draft_has_kv=args.draft_has_kv,
        max_bs=args.max_bs, width_gen=args.width_gen,
    )
    rules = tuple(backends.check_rule_name(r) for r in args.rule.split(","))
    gathers = tuple(Gather.parse(g) for g in (args.gather or FIXED_GATHER.value).split(","))
    config = SimConfig(
        geometry=geometry, rule=rules[0], gather=gathers[0], num_pages=args.num_pages,
        conservativeness=args.conservativeness, overshoot=args.overshoot, acceptance=Acceptance.parse(args.acceptance),
        replay=Replay.parse(args.replay), stop_on_failure=not args.continue_past_failure, max_steps=args.max_steps,
    )
    trace = read_trace(args.trace) if args.trace else ()
    workload = Workload(num_requests=args.requests, prompt=LengthDist.parse(args.prompt_len),
                        output=LengthDist.parse(args.output_len), trace=trace)
    if not 1 <= args.seeds <= 10_000:
        raise ValueError(f"seeds: {args.seeds} is out of range (allowed: 1 to 10000)")
    if args.out and not args.out.endswith((".json", ".parquet")):
        raise ValueError(f"out: {args.out!r} must end in .json or .parquet")
    seeds = tuple(range(args.first_seed, args.first_seed + args.seeds))
    # The longest request the distributions can draw must run, so a bad flag fails before any run.
    check_requests(config, workload.trace or (Request(0, workload.prompt.high, workload.output.high),))
    return Simulation(config, workload, seeds, rules, gathers)
