"""``workbench``: the command line. It parses, calls the library and prints; no logic of its own.

The parser is built from this module alone, without torch, pandas or the engines: ``workbench
--help`` and a malformed argument answer at a bare Python start's speed. Each command imports what
it runs when it runs (``tests/test_cli_start.py`` checks that parsing imports none of them)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Iterator, Sequence
from typing import IO, NoReturn

from workbench.devices.kinds import DEVICE_CHOICES
from workbench.sim.flags import add_simulate_flags

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


class BadInput(Exception):
    """Input the command cannot run; printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, no usage block
        raise BadInput(message)

    def format_help(self) -> str:  # the component names only when a case command's help is asked for
        for action in self._actions:
            if action.dest == "component":
                action.help = f"{_COMPONENT_HELP} ({', '.join(_component_names())})"
        return super().format_help()


_COMPONENT_HELP = "the component of a single case"


def _component_names() -> tuple[str, ...]:
    """Every name a single case accepts: the tables' registry names and aliases, the allocator, the
    case backends. From the registry, so asked for only when needed (it imports torch)."""
    from workbench import backends

    return (*backends.all_names(), "allocator", *backends.CASE_COMPONENTS)


# ---- case flags --------------------------------------------------------------------------------

_INT_FLAGS = ("context_len", "page_size", "draft_tokens", "step_id", "spec_steps", "spec_topk",
              "max_bs", "accept_len")
_LIST_FLAGS = ("seq_lens", "last_loc", "free_pages", "parked_pages")
_STR_FLAGS = ("rule", "mode", "width_gen", "replay", "gather", "engine")


def _int_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of integers (write 5,10,7)") from None


def _add_case_flags(parser: argparse.ArgumentParser, *, with_seq_lens: bool) -> None:
    parser.add_argument("component", nargs="?", metavar="component", help=_COMPONENT_HELP)
    parser.add_argument("--cases", metavar="FILE", help="JSON lines of cases ('-' = stdin)")
    parser.add_argument("--json", action="store_true", help="print the result as a JSON object")
    for name in _INT_FLAGS:
        parser.add_argument("--" + name.replace("_", "-"), dest=name, type=int)
    for name in _STR_FLAGS:
        parser.add_argument("--" + name.replace("_", "-"), dest=name)
    lists = _LIST_FLAGS if with_seq_lens else tuple(f for f in _LIST_FLAGS if f != "seq_lens")
    for name in lists:
        parser.add_argument("--" + name.replace("_", "-"), dest=name, type=_int_list)
    parser.add_argument("--no-draft-kv", dest="draft_has_kv", action="store_false", default=None,
                        help="the drafter keeps no KV cache (NGRAM)")
    parser.add_argument("--hybrid-swa", dest="hybrid_swa", action="store_true", default=None)
    if not with_seq_lens:
        parser.add_argument("--max-seq-len", dest="max_seq_len", type=int)


def _case_from_flags(args: argparse.Namespace) -> dict[str, object]:
    names = (*_INT_FLAGS, *_LIST_FLAGS, *_STR_FLAGS, "draft_has_kv", "hybrid_swa", "max_seq_len")
    data: dict[str, object] = {"component": args.component}
    for name in names:
        value = getattr(args, name, None)
        if value is not None:
            data[name] = value
    return data


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="workbench", description="Graph-captured KV metadata: probes and boundaries.")
    parser.add_argument("--device", default="cpu", choices=DEVICE_CHOICES,
                        help="where tensors live (default cpu; auto = npu, then cuda, then cpu)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    probe_parser = sub.add_parser("probe", help="execute one engine step per case and classify it")
    _add_case_flags(probe_parser, with_seq_lens=True)
    boundary_parser = sub.add_parser("boundary", help="the smallest committed length whose step fails")
    _add_case_flags(boundary_parser, with_seq_lens=False)
    report = sub.add_parser("report", help="the main job: seed cases and their boundaries")
    report.add_argument("--out", default="reports", help="output folder (default reports/)")
    check = sub.add_parser("hardware-check", help="the fixed device suite: seeds by graph replay, measured bytes, replay cost")
    check.add_argument("--out", default="data/hardware", help="output folder (default data/hardware/)")
    check.add_argument("--quick", action="store_true", help="a small suite of the same sections (seconds on a CPU)")
    check.add_argument("--repeats", type=int, help="timed runs per replay step (default 20, quick 3)")
    check.add_argument("--timeout", type=float, default=120.0, help="seconds per isolated probe (default 120)")
    simulate = sub.add_parser("simulate", help="seeded serving runs: first failing step and request, share of failing runs")
    add_simulate_flags(simulate)
    sweep = sub.add_parser("sweep", help="boundaries of every configuration of a grid, as a table (parquet/csv)")
    _add_sweep_flags(sweep)
    atlas = sub.add_parser("atlas", help="every backend x engine version x mode: can a real run fail, where, how")
    atlas.add_argument("--engine", help="comma-separated versions (default: every version data/engines.json holds)")
    atlas.add_argument("--overshoot", type=int, default=None,
                       help="a what-if: every run reaches ctx - 1 + N (default: the scheduler's reach per release, recipe, overlap)")
    atlas.add_argument("--json", action="store_true", help="one JSON object per line: the summary rows")
    atlas.add_argument("--out", help="write every setting's row to this .parquet or .csv file")
    atlas.add_argument("--no-runs", action="store_true", help="skip the run that confirms each row")
    atlas.add_argument("--executor", default="auto", choices=("auto", "serial", "process", "ray"),
                       help="where the settings' chunks run (default auto: the local cores for a large atlas); ray: a "
                            "local Ray instance, or the cluster at --address")
    atlas.add_argument("--workers", type=int, help="processes or Ray CPUs (default: every core)")
    atlas.add_argument("--address", help="a Ray cluster's address (with --executor ray)")
    hist = sub.add_parser("history", help="per backend and mode, release by release: what a reference deployment meets")
    hist.add_argument("--engine", default="sglang", help="the engine whose releases (default sglang)")
    hist.add_argument("--overshoot", type=int, default=None,
                      help="a what-if: a run reaches ctx - 1 + N (default: each release's scheduler's reach)")
    hist.add_argument("--backend", help="comma-separated backends (default: every one)")
    hist.add_argument("--json", action="store_true", help="one JSON object per release and deployment")
    conf = sub.add_parser("conformance", help="each engine version's own functions against the models, state by state")
    conf.add_argument("--engine", default="sglang==0.5.23",
                      help="NAME==VERSION, several comma-separated; a bare name (sglang) is every learned release of it "
                           "(default sglang==0.5.23)")
    conf.add_argument("--summary", action="store_true", help="one line per release instead of one per function")
    conf.add_argument("--json", action="store_true", help="one JSON object per engine function")
    conf.add_argument("--states", type=int, default=1000, help="random states per function (default 1000)")
    conf.add_argument("--seed", type=int, default=0, help="seed of the random states (default 0)")
    conf.add_argument("--triton", action="store_true", default=None,
                      help="fetch triton (about 1 GB) to run the Triton kernels interpreted (default: only if cached)")
    conf.add_argument("--no-triton", dest="triton", action="store_false", help="skip the Triton kernels even if cached")
    conf.add_argument("--only", default="", help="comma-separated parts of function names: run only those rows "
                                                 "(e.g. --only Scheduler,Req.,longest_step)")
    conf.add_argument("--executor", default="serial", choices=("serial", "process", "ray"),
                      help="where the releases run: one after another here (default), a process each on the local "
                           "cores, or a Ray task each (a local Ray instance, or the cluster at --address)")
    conf.add_argument("--workers", type=int, help="releases at once (processes or Ray CPUs; default: every core)")
    conf.add_argument("--address", help="a Ray cluster's address (with --executor ray)")
    _add_engines_flags(sub.add_parser("engines", help="engine releases: list them, learn one from its own code"))
    check = sub.add_parser("check", help="preflight: can the deployment a launch command starts crash at its context limit?",
                           epilog="exit status: 0 safe, 1 a failure a run reaches, 2 bad input, 3 undecided "
                                  "(a buffer no backend here models, or graphs disabled)")
    _add_check_flags(check)
    repro = sub.add_parser("repro", help="standalone scripts that reproduce each failing atlas row and seed "
                                         "with the engine's own code")
    repro.add_argument("ids", nargs="*", help="finding ids, as --list prints them (0.5.23/fa3-page-table/decode, seed/allocator)")
    repro.add_argument("--list", action="store_true", help="list the failing atlas rows of the release and the seeds")
    repro.add_argument("--all", action="store_true", help="every finding of the release and the seeds")
    repro.add_argument("--engine", help="the release whose atlas rows are listed (default: the newest SGLang modelled)")
    repro.add_argument("--out", help="folder the scripts are written to")
    repro.add_argument("--unreachable", action="store_true", help="also the rows that fail only past what a run reaches")
    repro.add_argument("--run", action="store_true",
                       help="run each script written here, with the engine's wheel from the workbench's cache")
    repro.add_argument("--record", metavar="FILE.json", help="with --run: keep the results in this file (data/repro_results.json)")
    bench = sub.add_parser("bench", help="how fast: closed form, verified sweep, step-by-step ratio, allocator")
    bench.add_argument("--json", action="store_true", help="print the measurements as one JSON object")
    bench.add_argument("--configs", type=int, default=20_000, help="configurations to verify, a third per component (default 20000)")
    bench.add_argument("--step-by-step", type=int, default=200,
                       help="table configurations for the slow search (default 200)")
    bench.add_argument("--executor", default="process", help="where the verified search runs (default process)")
    bench.add_argument("--workers", type=int, help="processes (default: every core)")
    bench.add_argument("--atlas-engine", help="comma-separated releases the atlas is timed over (default: every release)")
    return parser


def _add_engines_flags(engines: argparse.ArgumentParser) -> None:
    what = engines.add_subparsers(dest="engines_command", required=True, parser_class=_Parser)
    learn = what.add_parser("learn", help="learn a release from its own code into NAME/VERSION.json (resumable)")
    learn.add_argument("engine", nargs="?", help="NAME==VERSION, e.g. sglang==0.5.21")
    learn.add_argument("--all", dest="all_of", metavar="NAME", help="every listed release of engine NAME")
    learn.add_argument("--out", help="folder of the learned files (default: the workbench's cache, "
                                     "${WORKBENCH_CACHE:-~/.cache/workbench}/learned; data/engines writes the shipped ones)")
    listed = what.add_parser("releases", help="every listed release of an engine, and which are learned")
    listed.add_argument("name", nargs="?", help="the engine (default: every engine)")
    listed.add_argument("--refresh", action="store_true", help="rewrite data/engines/releases.json from the package index")
    listed.add_argument("--table", action="store_true",
                        help="print the page docs/releases-NAME-table.md: every learned release's buffers and how "
                             "each was obtained (redirect it into that file)")
    fetch = what.add_parser("fetch", help="fetch releases' wheels into the workbench's cache (what a check or "
                                          "learning would fetch on first use), e.g. before going offline")
    fetch.add_argument("engine", nargs="*", help="NAME==VERSION, or NAME for every listed release of it")
    fetch.add_argument("--triton", action="store_true",
                       help="also fetch triton (about 1 GB, shared by every release): a check of a model whose class "
                            "imports Triton kernels (Qwen3.5's) reads it as a CUDA deployment does")
    what.add_parser("stop", help="stop every engine process (the processes that read launch commands)")
    what.add_parser("running", help="list the engine processes")
    for action, text in (("learn-launch", "load releases and record their parser and resolution (NAME/VERSION.json)"),
                         ("learn-parser", "record releases' parsers alone, their options' choices included, where a "
                                          "parser section lacks them (resumable)"),
                         ("learn-startup", "ask releases' start-up checks which atlas settings they start (section startup)"),
                         ("launch-table", "print the table of releases from those records (without --engine: the page "
                                         "docs/releases-sglang-launch-table.md, to redirect into it)")):
        made = what.add_parser(action, help=text)
        made.add_argument("--engine", help="NAME==VERSION, several comma-separated, or NAME for every listed release "
                                           "(default sglang)")


def _engines(args: argparse.Namespace, out: IO[str]) -> int:
    if args.engines_command in ("stop", "running", "learn-launch", "learn-parser", "learn-startup", "launch-table"):
        return _engine_processes(args.engines_command, getattr(args, "engine", None), out)
    if args.engines_command == "fetch":
        if not args.engine and not args.triton:
            print("workbench engines fetch: give NAME==VERSION (or NAME), or --triton", file=sys.stderr)
            return 2
        return _fetch(args.engine, out, triton=args.triton)
    if args.engines_command == "learn":
        from workbench.engines.learning.learn import main as learn

        return learn(args.engine, args.all_of, args.out, out)
    from workbench.engines.store import learned, releases

    if args.refresh:
        releases.refresh()
    if args.table:
        from workbench.engines.learning.learned_table import page

        out.write(page(args.name or "sglang") + "\n")
        return 0
    for name in [args.name] if args.name else releases.ENGINES:
        have = set(learned.learned_releases(name))
        for engine in releases.releases(name):
            out.write(f"{engine:<32} {'learned' if engine in have else '-'}\n")
    return 0


_GRID_LISTS = {"components": str, "context_lens": int, "page_sizes": int, "draft_tokens": int, "rules": str,
               "modes": str, "width_gens": str, "replays": str}


def _add_sweep_flags(parser: argparse.ArgumentParser) -> None:
    for name, kind in _GRID_LISTS.items():
        parser.add_argument("--" + name.replace("_", "-"), dest=name, type=_int_list if kind is int else _str_list,
                            help="comma-separated (default: SweepGrid's)")
    for name in ("overshoot", "spec_steps", "spec_topk", "max_bs"):
        parser.add_argument("--" + name.replace("_", "-"), dest=name, type=int)
    parser.add_argument("--engine", help="an engine version (sglang==0.5.23): its rules, width generation and replay")
    parser.add_argument("--measure-memory", dest="measure_memory", action="store_true", default=None,
                        help="allocate every configuration's buffers full size and record the bytes taken")
    parser.add_argument("--executor", default="auto", help="auto (default), serial, process or ray")
    parser.add_argument("--workers", type=int, help="processes or Ray CPUs (default: every core)")
    parser.add_argument("--address", help="a Ray cluster's address (with --executor ray)")
    parser.add_argument("--cache-dir", default="data/cache", help="checkpoints and cached results (default data/cache)")
    parser.add_argument("--no-cache", action="store_true", help="compute everything, write no cache")
    parser.add_argument("--out", help="write the frame to this .parquet or .csv file")


def _add_check_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("launch", nargs=argparse.REMAINDER, help="the launch command, after --")
    parser.add_argument("--cmd", help="the launch command as one string")
    parser.add_argument("--from-file", dest="from_file", metavar="FILE", help="a file holding the launch command")
    parser.add_argument("--engine", help="the release, NAME==VERSION (default: the one installed here, else the newest)")
    parser.add_argument("--model-config", dest="model_config", metavar="CONFIG.json",
                        help="the model's config.json, when the model is neither a local directory nor in the "
                             "Hugging Face cache; nothing is downloaded")
    parser.add_argument("--draft-model-config", dest="draft_model_config", metavar="CONFIG.json",
                        help="the draft model's config.json (a speculative launch's --speculative-draft-model-path, or "
                             "vLLM's --speculative-config model), as --model-config is the target's")
    parser.add_argument("--overshoot", type=int,
                        help="committed tokens a step may carry past the scheduler's cap (default: the version's, SGLang 2)")
    parser.add_argument("--gpu", help="the GPU the engine picks defaults for (data/gpus.json; default h100, or 910b "
                                      "for --device npu)")
    parser.add_argument("--launch", type=int, metavar="K", dest="launch_number",
                        help="check only the K-th launch of a text holding several (default: each, the worst status)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.add_argument("--offline", action="store_true",
                        help="fetch nothing from the Hugging Face hub (as HF_HUB_OFFLINE=1); by default the config "
                             "files of a hub model not in the cache are fetched into it (never weights)")


def _check(args: argparse.Namespace, device: str, out: IO[str]) -> int:
    """``workbench check``; with ``--json`` bad input too is one JSON object on stdout (status 2, the
    one line, and for the engine's refusal its message and the function that refused), so that a
    script reading the output always gets an object; the line goes to stderr as without ``--json``."""
    if not args.json:
        return _check_command(args, device, out)
    from workbench.preflight.format import format_error_json

    try:
        return _check_command(args, device, out)
    except (BadInput, ValueError) as err:  # PreflightError is a ValueError
        out.write(format_error_json(err) + "\n")
        print(f"workbench: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _check_command(args: argparse.Namespace, device: str, out: IO[str]) -> int:
    from workbench.preflight import check, check_launches
    from workbench.preflight.command import parse_commands
    from workbench.preflight.format import format_json, format_launches_json, format_launches_text, format_text

    if args.offline:  # read by the check's hub look-up as huggingface_hub reads it; restored after (a caller's process)
        import os

        before = os.environ.get("HF_HUB_OFFLINE")
        os.environ["HF_HUB_OFFLINE"] = "1"
        try:
            return _check_command(argparse.Namespace(**{**vars(args), "offline": False}), device, out)
        finally:
            if before is None:
                os.environ.pop("HF_HUB_OFFLINE", None)
            else:
                os.environ["HF_HUB_OFFLINE"] = before
    launch = args.launch[1:] if args.launch[:1] == ["--"] else args.launch
    sources = [bool(launch), args.cmd is not None, args.from_file is not None]
    if sum(sources) != 1:
        raise BadInput("check: give the launch command once: after --, with --cmd, or with --from-file")
    command: str | list[str] = launch
    if args.cmd is not None:
        command = args.cmd
    elif args.from_file is not None:
        try:
            with open(args.from_file, encoding="utf-8") as stream:
                command = stream.read()
        except OSError as err:
            raise BadInput(f"--from-file: cannot read {args.from_file!r} ({err.strerror})") from None
    options = {"engine": args.engine, "model_config": args.model_config, "draft_model_config": args.draft_model_config,
               "overshoot": args.overshoot, "gpu": args.gpu,
               "device": device, "owner": False}
    if args.launch_number is not None or parse_commands(command)[0].launches == 1:
        result = check(command, launch=args.launch_number or 1, **options)
        out.write((format_json(result) if args.json else format_text(result)) + "\n")
        return result.status
    every = check_launches(command, **options)
    out.write((format_launches_json(every) if args.json else format_launches_text(every)) + "\n")
    return every.status


def _str_list(text: str) -> list[str]:
    return [part for part in text.replace(",", " ").split() if part]


def _sweep(args: argparse.Namespace, device: str, out: IO[str]) -> None:
    from workbench.analysis.executors import Executor
    from workbench.analysis.sweep import SweepGrid, run_sweep

    names = (*_GRID_LISTS, "overshoot", "spec_steps", "spec_topk", "max_bs", "measure_memory", "engine")
    changes = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if args.out and not args.out.endswith((".parquet", ".csv")):
        raise BadInput(f"--out: {args.out!r} must end in .parquet or .csv")
    grid = SweepGrid(**changes)
    executor = Executor(kind=args.executor, workers=args.workers, address=args.address)
    frame = run_sweep(grid, device=device, cache_dir=None if args.no_cache else args.cache_dir, executor=executor)
    failing = frame[frame.first_failing_seq_len.notna()]
    out.write(f"{len(frame)} configurations, all confirmed: {bool(frame.confirmed.all())}; {len(failing)} fail\n")
    for (component, rule), group in frame.groupby(["component", "rule"]):
        fails = int(group.first_failing_seq_len.notna().sum())
        out.write(f"  {component:<24} {rule:<19} {fails:>6} of {len(group):<6} fail\n")
    if grid.measure_memory and len(frame):
        over = frame.measured_bytes - frame.buffer_bytes
        out.write(f"measured - predicted bytes: min {int(over.min())}, max {int(over.max())} "
                  f"({frame.measure_method.iloc[0]})\n")
    if args.out:
        from pathlib import Path

        from workbench.files import atomic_write_parquet, atomic_write_text

        path = Path(args.out)
        if args.out.endswith(".parquet"):
            atomic_write_parquet(frame, path)
        else:
            atomic_write_text(path, frame.to_csv(index=False))
        out.write(f"wrote {path}\n")


def _atlas(args: argparse.Namespace, device: str, out: IO[str]) -> None:
    from workbench.atlas.results import atlas_results
    from workbench.atlas.rows import format_summary

    if args.out and not args.out.endswith((".parquet", ".csv")):
        raise BadInput(f"--out: {args.out!r} must end in .parquet or .csv")
    engines = _str_list(args.engine) if args.engine else None
    from workbench.analysis.executors import Executor

    executor = Executor(kind=args.executor, workers=args.workers, address=args.address)
    frame, summary = atlas_results(engines, overshoot=args.overshoot, device=device, confirm_runs=not args.no_runs,
                                   executor=executor, note=lambda line: print(f"workbench: {line}", file=sys.stderr))
    if args.json:
        for record in summary.to_dict(orient="records"):
            out.write(json.dumps({k: _plain(v) for k, v in record.items()}) + "\n")
    else:
        out.write(format_summary(summary) + "\n")
    if args.out:
        _write_frame(frame, args.out, out)


def _history(args: argparse.Namespace, out: IO[str]) -> None:
    from workbench.atlas.history import format_history, history

    frame = history(args.engine, overshoot=args.overshoot, only=_str_list(args.backend) if args.backend else ())
    if args.json:
        for record in frame.to_dict(orient="records"):
            out.write(json.dumps({k: _plain(v) for k, v in record.items()}) + "\n")
    else:
        out.write(format_history(frame) + "\n")


def _plain(value: object) -> object:
    """A frame cell as JSON: pandas' missing values become null, numpy scalars Python numbers."""
    import pandas as pd  # type: ignore[import-untyped]

    if value is None or (not isinstance(value, (list, tuple, str)) and pd.isna(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def _write_frame(frame: object, path_text: str, out: IO[str]) -> None:
    from pathlib import Path

    from workbench.files import atomic_write_parquet, atomic_write_text

    path = Path(path_text)
    if path_text.endswith(".parquet"):
        atomic_write_parquet(frame, path)
    else:
        atomic_write_text(path, frame.to_csv(index=False))  # type: ignore[attr-defined]
    out.write(f"wrote {path}\n")


def _bench(args: argparse.Namespace, out: IO[str]) -> None:
    from workbench.analysis.bench import format_bench, run_bench

    if args.configs < 1 or args.step_by_step < 1 or args.step_by_step > args.configs:
        raise BadInput("--configs and --step-by-step: 1 <= step-by-step <= configs (allowed: positive integers)")
    from workbench.analysis.executors import Executor

    executor = Executor(kind=args.executor, workers=args.workers)
    results = run_bench(num_configs=args.configs, step_by_step_configs=args.step_by_step, executor=executor,
                        progress=sys.stderr, atlas_engines=_str_list(args.atlas_engine) if args.atlas_engine else None)
    out.write((json.dumps(results) if args.json else format_bench(results)) + "\n")


def _simulate(args: argparse.Namespace, device: str, out: IO[str]) -> None:
    from workbench.sim.simulate_summary import run_cli, write_summary
    from workbench.sim.workload import simulation_from_args

    try:
        summaries = run_cli(simulation_from_args(args), device, out)
        if args.out:
            out.write(f"wrote {write_summary(summaries, args.out)}\n")
    except ValueError as err:
        raise BadInput(str(err)) from None


def _hardware_check(args: argparse.Namespace, device: str, out: IO[str]) -> None:
    from workbench.devices.hardware_check import check_and_write, full_suite, quick_suite

    if args.repeats is not None and args.repeats < 1:
        raise BadInput(f"--repeats: {args.repeats} is out of range (allowed: 1 or more)")
    suite = quick_suite() if args.quick else full_suite()
    suite = dataclasses.replace(suite, repeats=args.repeats or suite.repeats, timeout_s=args.timeout)
    check_and_write(device, args.out, suite, out)


# ---- results -----------------------------------------------------------------------------------


def _read_cases(path: str) -> Iterator[object]:
    """Each line as parsed JSON, or a CaseError naming the line."""
    from workbench.analysis.cases import CaseError

    stream: IO[str] = sys.stdin if path == "-" else _open(path)
    with stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as err:
                yield CaseError(f"line {number}: not JSON ({err.msg})")


def _open(path: str) -> IO[str]:
    try:
        return open(path, encoding="utf-8")
    except OSError as err:
        raise BadInput(f"--cases: cannot read {path!r} ({err.strerror})") from None


def _readable(record: dict[str, object]) -> str:
    fields = [f"{k}={v}" for k, v in record.items() if k not in ("outcome", "error") and v is not None]
    error = record.get("error")
    return f"{record['outcome']}: {' '.join(fields)}" + (f"\n  {error}" if error else "")


def _run_cases(path: str, run: object, device: str, out: IO[str]) -> None:
    from workbench.analysis.cases import CaseError
    from workbench.model.outcome import Outcome

    assert callable(run)
    for data in _read_cases(path):
        if isinstance(data, CaseError):
            record: dict[str, object] = {"outcome": Outcome.INVALID.value, "error": str(data)}
        else:
            record = run(data, device)
        out.write(json.dumps(record) + "\n")
        out.flush()


def _run_single(args: argparse.Namespace, device: str, out: IO[str]) -> None:
    from workbench import backends
    from workbench.analysis.cases import COMPONENTS, CaseError, parse_case
    from workbench.analysis.records import boundary_record, probe_record
    from workbench.model.outcome import Outcome

    if args.component is None:
        raise BadInput(f"give a component ({', '.join(COMPONENTS)}) or --cases FILE")
    if args.component not in _component_names():  # as argparse's choices said it, before they were lazy
        raise BadInput(f"argument component: invalid choice: {args.component!r} "
                       f"(choose from {', '.join(_component_names())})")
    if backends.is_case_backend(args.component):  # its fields are its own: no flags for them
        fields = ", ".join(sorted(backends.case_backend_of(args.component).fields - {"component"}))
        raise BadInput(f"{args.component}: give its cases as JSON lines with --cases FILE (fields: {fields})")
    data = _case_from_flags(args)
    if args.command == "probe":
        try:
            parse_case(data)
        except CaseError as err:
            raise BadInput(str(err)) from None
        record = probe_record(data, device)
    else:
        record = boundary_record(data, device)
        if record["outcome"] == Outcome.INVALID.value:
            raise BadInput(str(record["error"]))
    out.write((json.dumps(record) if args.json else _readable(record)) + "\n")


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    try:
        args = build_parser().parse_args(argv)
        if args.command == "check" and argv is None:  # the command line itself: answered warm where it can be
            from workbench.resident import client

            status = client.answer(sys.argv[1:], out, sys.stderr) if client.enabled() else None
            if status is not None:
                return status
        if args.command == "engines":  # engine processes and learned files; no device here
            return _engines(args, out)
        if args.command == "repro":  # writes scripts (and runs them in subprocesses); no device here
            return _repro(args, out)
        if args.command == "conformance":  # runs engine code in worker processes; no device here
            from workbench.engines.checking.conformance import main as conformance

            if args.states < 1:
                raise BadInput(f"--states: {args.states} is out of range (allowed: 1 or more)")

            from workbench.analysis.executors import Executor

            executor = Executor(kind=args.executor, workers=args.workers, address=args.address)
            return conformance(args.engine.split(","), as_json=args.json, states=args.states, seed=args.seed,
                               triton=args.triton, out=out, only=[p for p in args.only.split(",") if p],
                               summary=args.summary, executor=executor)
        from workbench.devices.device import one_torch_thread, select_device

        selection = select_device(args.device)
        if args.device == "auto":  # say what was found, on stderr so the results stay clean
            print(f"workbench: {selection.summary}", file=sys.stderr)
        device = str(selection.device)
        with one_torch_thread():  # probes move a row at a time: threads only add hand-off cost
            status = _dispatch(args, device, out)
    except (BadInput, ValueError) as err:
        print(f"workbench: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as err:
        if not _is_report_error(err):
            raise
        print(f"workbench: {err}", file=sys.stderr)  # the report was written; some notebook's assertions failed
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("workbench: interrupted", file=sys.stderr)
        return 130
    return status


def _is_report_error(err: Exception) -> bool:
    """Whether ``err`` is the report's own ReportError, without importing the report for every command."""
    report = sys.modules.get("workbench.present.report")
    return report is not None and isinstance(err, report.ReportError)


def _fetch(asked: list[str], out: IO[str], *, triton: bool = False) -> int:
    """Each release's wheel into the cache, one line per release (and triton's, when asked);
    1 when any could not be had."""
    from workbench.engines.store import releases, wheels

    engines = [e for name in asked for e in (releases.releases(name) if "==" not in name else [name])]
    failed = 0
    if triton:
        print(f"workbench: triton: {'cached' if wheels.triton_dir() is not None else 'fetching (about 1 GB)'}",
              file=sys.stderr)
        try:
            out.write(f"{'triton':<28} {wheels.fetch_triton()}\n")
        except wheels.FetchError as err:
            failed += 1
            out.write(f"{'triton':<28} missing: {err}\n")
    for number, engine in enumerate(engines, 1):
        where = "cached" if wheels.cached(engine) is not None else "fetching"
        print(f"workbench: [{number}/{len(engines)}] {engine}: {where}", file=sys.stderr)
        try:
            install = wheels.fetch(engine, progress=lambda line: print(line, file=sys.stderr))
        except wheels.FetchError as err:
            failed += 1
            out.write(f"{engine:<28} missing: {err}\n")
            continue
        out.write(f"{engine:<28} {install.src.parent}\n")
    return 1 if failed else 0


def _engine_processes(action: str, engine: str | None, out: IO[str]) -> int:
    from workbench.engines.commands import launch_learn, launch_service
    from workbench.engines.store import learned, releases

    if action == "stop":
        from workbench.resident import client

        stopped = client.stop_all() + launch_service.stop_all()
        out.write(f"stopped {len(stopped)} engine process{'es' if len(stopped) != 1 else ''}"
                  + (f": {', '.join(stopped)}" if stopped else "") + "\n")
        return 0
    if action == "running":
        out.writelines(f"{path.stem}\n" for path in launch_service.running())
        return 0
    asked = _str_list(engine or "sglang")
    engines = [e for name in asked for e in (releases.releases(name) if "==" not in name else [name])]
    if action == "launch-table":
        out.write((launch_learn.page() if engine is None else launch_learn.table(engines)) + "\n")
        return 0
    if action == "learn-parser":
        done = launch_learn.learn_parsers(engines)
        out.write(f"learned {len(done)} parser section{'s' if len(done) != 1 else ''}; "
                  f"{sum(1 for e in engines if 'choices' in (learned.section(e, 'parser') or {}))} of {len(engines)} "
                  "releases hold their options' choices\n")
        return 0
    for number, engine in enumerate(engines, 1):
        if action == "learn-startup":
            from workbench.engines.commands import startup_learn

            print(f"workbench: [{number}/{len(engines)}] asking {engine}'s start-up checks about the atlas's settings",
                  file=sys.stderr)
            section = startup_learn.learn(engine)
            cells = [c for recipes in section["settings"]["value"].values() for sizes in recipes.values() for c in sizes.values()]
            out.write(f"{engine}: {len(cells)} settings, {sum(c.startswith('refused') for c in cells)} refused\n")
            continue
        print(f"workbench: learning {engine}'s parser and resolution", file=sys.stderr)
        launch_learn.learn(engine)
    return 0


def _repro(args: argparse.Namespace, out: IO[str]) -> int:
    from workbench.repro.command import format_list, select, write_scripts

    if not args.list and not args.all and not args.ids:
        raise BadInput("repro: give finding ids, --all or --list (workbench repro --list shows the ids)")
    if (args.all or args.ids) and not args.list and not args.out:
        raise BadInput("repro: --out DIR is needed to write scripts")
    if args.record and not args.run:
        raise BadInput("repro: --record needs --run")
    found = select(args.ids, engine=args.engine, every=args.all or args.list, include_unreachable=args.unreachable,
                   progress=sys.stderr, with_latent=args.list)
    if args.list:
        out.write(format_list(found) + "\n")
        return 0
    return write_scripts(found, args.out, run=args.run, record=args.record, out=out)


def _dispatch(args: argparse.Namespace, device: str, out: IO[str]) -> int:
    """Run the command; its exit status (0 unless the command says otherwise)."""
    if args.command == "check":
        return _check(args, device, out)
    if args.command == "bench":
        _bench(args, out)
    elif args.command == "atlas":
        _atlas(args, device, out)
    elif args.command == "history":
        _history(args, out)
    elif args.command == "sweep":
        _sweep(args, device, out)
    elif args.command == "report":
        from workbench.present.report import run_report

        run_report(args.out, device, out)
    elif args.command == "hardware-check":
        _hardware_check(args, device, out)
    elif args.command == "simulate":
        _simulate(args, device, out)
    elif args.cases is not None:
        if args.component is not None:
            raise BadInput("give either a component with flags or --cases FILE, not both")
        from workbench.analysis.records import boundary_record, probe_record

        run = probe_record if args.command == "probe" else boundary_record
        _run_cases(args.cases, run, device, out)
    else:
        _run_single(args, device, out)
    return 0

if __name__ == "__main__":
    sys.exit(main())
