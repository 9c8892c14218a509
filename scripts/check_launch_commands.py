"""Check every real launch command of a data set and time each check (the preflight's benchmark).

    PYTHONPATH=. python scripts/check_launch_commands.py [tests/data/launch_commands.jsonl] [--engine sglang]
        [--repeat N] [--tries N] [--json OUT.json] [--follow-advice]

The model configs are read from the data set's Hugging Face cache (``HF_HUB_CACHE`` defaults to
``tests/data/hf_cache/hub``), offline (``HF_HUB_OFFLINE=1``: nothing is fetched, nothing written
there). ``--hub`` instead starts a stand-in hub on 127.0.0.1 (``tests/hub_standin.py``) serving
the configs the data set has, and checks with an empty Hugging Face cache, as a user who has
downloaded no model would: the check fetches each model's config files from that hub (never
weights; the run says whether any weights file was asked for). Each command is checked under the release its source names, else
the default, else (when that release's parser refuses it) the newest older release whose own
parser accepts it, asking at most ``--tries`` releases that their learned parsers do not rule out
(``workbench.preflight.batch``). Prints one line per command (and, under it, what was said of the
older releases on the way), the counts by exit status, and the
time of each check: the first of each release includes starting its engine process; ``--repeat N``
checks every command N more times and reports the median of those (the engine processes warm).

``--follow-advice`` then does what an undecided answer about a local model directory asks of its
user: where the record says which hub model that directory holds and the data set's cache has its
config, the command is checked again with ``--model-config`` that config. Those answers are counted
apart (they are not the command as published), so that the rows past the model's config are
exercised on every command whose model is known.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.preflight.batch import Outcome

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", default=str(ROOT / "tests" / "data" / "launch_commands.jsonl"))
    parser.add_argument("--engine", help="only the records of this engine (sglang, vllm, vllm-ascend)")
    parser.add_argument("--repeat", type=int, default=0, help="check every command this many more times (warm)")
    parser.add_argument("--tries", type=int, default=None,
                        help="older releases asked for real per command the default's parser refuses (default: the batch's)")
    parser.add_argument("--json", help="write the outcomes here")
    parser.add_argument("--follow-advice", action="store_true",
                        help="check a command whose local model directory is missing again with its hub model's config")
    parser.add_argument("--hub", action="store_true",
                        help="serve the data set's configs from a stand-in hub on 127.0.0.1 and check with an empty cache")
    args = parser.parse_args()
    if not args.hub:
        os.environ.setdefault("HF_HUB_CACHE", str(DATA_CACHE))
        os.environ["HF_HUB_OFFLINE"] = "1"
        return _run(args)
    import tempfile

    sys.path.insert(0, str(ROOT / "tests"))
    from hub_standin import StandInHub  # type: ignore[import-not-found]  # tests/, put on the path above

    with tempfile.TemporaryDirectory(prefix="workbench-hf-cache-") as cache, StandInHub(DATA_CACHE) as hub:
        os.environ.update({"HF_HUB_CACHE": cache, "HF_ENDPOINT": hub.url})
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            os.environ.pop(name, None)
        status = _run(args)
        weights = [f for f in hub.asked_files() if f.endswith((".safetensors", ".bin", ".pt", ".pth", ".gguf"))]
        asked = hub.asked_files()
        print(f"stand-in hub: {len(hub.requests)} requests, {len(asked)} file requests "
              f"({len(set(asked))} distinct names: {', '.join(sorted(set(asked)))}); weights files asked for: {len(weights)}")
        return status


DATA_CACHE = ROOT / "tests" / "data" / "hf_cache" / "hub"


def _run(args: argparse.Namespace) -> int:
    from workbench.preflight.batch import TRIES, check_all

    records = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line.strip()]
    if args.engine:
        records = [r for r in records if r.get("engine") == args.engine]
    start = time.perf_counter()
    tries = TRIES if args.tries is None else args.tries
    outcomes = check_all(records, tries=tries)
    first = time.perf_counter() - start
    warm: list[float] = []
    for _ in range(args.repeat):
        warm += [o.seconds for o in check_all(records, tries=tries)]
    for o in outcomes:
        refused = f"  [first asked: {o.refused_by_default[:100]}]" if o.refused_by_default else ""
        print(f"{o.status}  {o.id[:58]:<58} {o.release:<22} {o.seconds:6.2f}s  {o.verdict[:150]}{refused}")
        for one in o.launches:  # a text of several launches: each one's answer
            print(f"{'':<3}{f'launch {one.launch}':<58} {one.release:<22} {one.seconds:6.2f}s  {one.verdict[:150]}")
        for line in o.older:
            print(f"{'':<64}walk: {line[:160]}")
    counts = Counter(o.status for o in outcomes)
    answered = sum(counts[s] for s in (0, 1, 3))
    decided = counts[0] + counts[1]
    print(f"\n{'stand-in hub, empty cache' if args.hub else 'offline, the data set cache'}: {len(outcomes)} commands: "
          f"{decided} decided (exit 0 or 1), {answered} answered (exit 0, 1 or 3), {counts[2]} refused (exit 2)")
    print(f"\n{len(outcomes)} commands: {answered} answered ({100 * answered / max(len(outcomes), 1):.0f}%: "
          f"{counts[0]} safe, {counts[1]} fail, {counts[3]} undecided), {counts[2]} refused (exit 2); "
          f"{sum(1 for o in outcomes if o.refused_by_default)} answered under another release than the default or the "
          "named one, whose parser refuses them")
    missing = [o for o in outcomes if o.unmodelled_flags]
    print(f"commands with a flag missing from the resolved settings: {len(missing)}")
    print(f"first pass {first:.1f} s (engine processes started as needed); "
          f"per check: median {statistics.median([o.seconds for o in outcomes]):.2f} s")
    if warm:
        print(f"warm checks ({args.repeat} more passes, {len(warm)} checks): median {statistics.median(warm):.2f} s, "
              f"max {max(warm):.2f} s")
    followed = _follow_advice(records, outcomes, tries) if args.follow_advice else []
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
        if followed:
            Path(args.json).with_suffix(".advised.json").write_text(json.dumps([asdict(o) for o in followed], indent=1))
    return 0


def _advised_config(record: dict[str, Any], outcome: Outcome) -> str | None:
    """The config the record's hub model has in the data set's cache, when the answer was that the
    command's local model directory is not on this machine (the answer asks for --model-config)."""
    ids = record.get("model_ids") or []
    each = outcome.launches or (outcome,)
    if outcome.status != 3 or not any("no such directory on this machine" in o.verdict for o in each) or not ids \
            or not ids[0]:
        return None
    # the data set's own cache, laid out as the hub's (this process has no huggingface_hub)
    folder = Path(os.environ["HF_HUB_CACHE"]) / f"models--{ids[0].replace('/', '--')}"
    found = sorted(folder.glob("snapshots/*/config.json"))
    return str(found[0]) if found else None


def _follow_advice(records: list[dict[str, Any]], outcomes: list[Outcome], tries: int) -> list[Outcome]:
    from workbench.preflight.batch import check_one

    followed = []
    for record, outcome in zip(records, outcomes):
        config = _advised_config(record, outcome)
        if config is None:
            continue
        answered = (outcome.launches or (outcome,))[0].release  # a text of several launches: its first's
        named = {**record, "release": answered.split("==", 1)[1] if answered else record.get("release")}
        again = check_one(named, tries=tries, model_config=config)
        followed.append(again)
        print(f"{again.status}  {again.id[:58]:<58} {again.release:<22} {again.seconds:6.2f}s  {again.verdict[:150]}"
              f"  [--model-config {record['model_ids'][0]}]")
    counts = Counter(o.status for o in followed)
    print(f"\nafter giving --model-config as the answer asks: {len(followed)} commands: {counts[0]} safe, "
          f"{counts[1]} fail, {counts[3]} undecided, {counts[2]} refused")
    return followed


if __name__ == "__main__":
    sys.exit(main())
