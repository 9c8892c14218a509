"""The choice of an older release for a command the default release's parser refuses.

The learned parser of a release (its ``parser`` section: option strings, and each option's choices
where argparse compares the word itself) passes over the releases that would refuse a command; the
first one it does not rule out is asked for real. The unit cases build a learned section from a real
``argparse`` parser and compare with what that parser does; the engine case checks that the release
the batch settles on for an invalid choice is the one the engine's own parsers, walked newest first
without the workbench's adapter (``engine_oracle.py``), say.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from workbench.engines.commands import release_choice
from workbench.engines.commands.adapter_common import describe
from workbench.engines.commands.adapters import to_json
from workbench.engines.store import gpus, learned, releases, wheels

DATA = Path(__file__).parent / "data"
ORACLE = Path(__file__).parent / "engine_oracle.py"


def _engine_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--attention-backend", choices=["fa3", "flashinfer", "triton"])
    parser.add_argument("--speculative-algorithm", type=str.upper, choices=["EAGLE", "NGRAM"])  # compared converted
    parser.add_argument("--tp-size", "--tp", type=int)
    parser.add_argument("--log-level", nargs="?", const="info", choices=["info", "debug"])
    parser.add_argument("--cuda-graph-max-bs-decode", type=int)
    parser.add_argument("--cuda-graph-max-bs-prefill", type=int)
    return parser


@pytest.fixture()
def learned_from_argparse(monkeypatch: pytest.MonkeyPatch) -> Iterator[argparse.ArgumentParser]:
    """A release ``sglang==0.5.22`` whose learned parser section is ``_engine_parser()`` described."""
    parser = _engine_parser()
    facts = describe(parser)
    section = {name: {"value": value, "how": "measured", "function": "test", "states": 1} for name, value in facts.items()}
    real_section = learned.section
    monkeypatch.setattr(learned, "section", lambda engine, name: section if (engine, name) == ("sglang==0.5.22", "parser")
                        else real_section(engine, name))
    release_choice._learned_parser.cache_clear()
    yield parser
    release_choice._learned_parser.cache_clear()


def _argparse_refuses(parser: argparse.ArgumentParser, words: list[str]) -> bool:
    with contextlib.redirect_stderr(io.StringIO()), contextlib.suppress(SystemExit):
        parser.parse_args(words)
        return False
    return True


CASES = [
    ["--attention-backend", "fa3"],
    ["--attention-backend", "cutlass_mla"],  # not one of the choices
    ["--attention-backend=cutlass_mla"],
    ["--attention-backend=triton", "--tp", "8"],
    ["--attention-back", "flashinfer"],  # an abbreviation argparse takes
    ["--attention-back", "wave"],
    ["--speculative-algorithm", "eagle"],  # upper-cased before the choices are compared: not checked by value
    ["--log-level", "--tp", "2"],  # an optional value left out
    ["--log-level", "debug"],
    ["--log-level", "trace"],
    ["--enable-flashinfer-moe"],  # not an option
    ["--cuda-graph-max-bs", "16"],  # ambiguous
    ["--tp", "1", " "],  # a stray space (a backslash followed by spaces in the shell)
]


@pytest.mark.parametrize("words", CASES, ids=[" ".join(c) for c in CASES])
def test_the_learned_parser_refuses_what_argparse_refuses(learned_from_argparse: argparse.ArgumentParser,
                                                          words: list[str]) -> None:
    said = release_choice.refusal("sglang==0.5.22", words)
    assert (said is not None) == _argparse_refuses(learned_from_argparse, words), said


def test_choices_are_learned_only_where_argparse_compares_the_word_itself() -> None:
    choices = describe(_engine_parser())["choices"]
    assert choices == {"--attention-backend": ["fa3", "flashinfer", "triton"], "--log-level": ["info", "debug"]}


def test_a_release_never_learned_is_said_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(learned, "section", lambda engine, name: None)
    release_choice._learned_parser.cache_clear()
    try:
        assert release_choice.refusal("sglang==0.5.22", ["--tp", "8"]) == release_choice.NOT_LEARNED
    finally:
        release_choice._learned_parser.cache_clear()


# ---- the engine's own parsers ---------------------------------------------------------------------


def _oracle_parser_error(engine: str, argv: list[str]) -> str | None:
    """The parser error of ``engine``'s own parser for ``argv`` (``engine_oracle.py``), or None."""
    install = wheels.cached(engine)
    assert install is not None
    job = {"engine": engine, "package_dir": str(install.package_dir), "deps": str(install.deps),
           "gpu": to_json(gpus.gpu("h100")), "hf_cache": str(DATA / "hf_cache" / "hub"),
           "cases": [{"argv": argv, "env": {}, "names": []}]}
    done = subprocess.run([sys.executable, str(ORACLE)], input=json.dumps(job), capture_output=True, text=True,
                          timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
    answer: dict[str, Any] = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    assert "oracle_error" not in answer, answer  # the oracle could not load the parser: it said nothing of the words
    error = answer.get("parser_error")
    return str(error) if error else None


def _dropped_choice() -> tuple[str, str, list[str]] | None:
    """An option both of the two newest SGLang releases have, with a value the newest two refuse
    and an older release's learned parser takes (from the learned files): (option, value, the
    releases from the newest down to that older one)."""
    listed = releases.releases("sglang")
    newest, previous = listed[-1], listed[-2]
    newest_choices = ((learned.section(newest, "parser") or {}).get("choices") or {}).get("value") or {}
    previous_choices = ((learned.section(previous, "parser") or {}).get("choices") or {}).get("value") or {}
    for engine in reversed(listed[:-2]):
        older = ((learned.section(engine, "parser") or {}).get("choices") or {}).get("value") or {}
        for option, values in sorted(older.items()):
            if option in newest_choices and option in previous_choices:
                gone = [v for v in values if v not in newest_choices[option] and v not in previous_choices[option]]
                if gone:
                    return option, gone[0], [e for e in reversed(listed) if releases.version_key(releases.split(e)[1])
                                             >= releases.version_key(releases.split(engine)[1])]
    return None


@pytest.mark.engine
def test_an_invalid_choice_is_answered_by_the_newest_release_whose_own_parser_accepts_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.preflight.batch import ACCEPTED_OLDER, check_one

    found = _dropped_choice()
    if found is None:
        pytest.skip("no SGLang option value that the two newest releases dropped (learned parser sections)")
    option, value, walk = found
    missing = [e for e in walk if wheels.cached(e) is None]
    if missing:
        pytest.skip(f"not in the workbench's engine cache: {', '.join(missing)} (workbench engines fetch ...)")
    argv = ["--model-path", "Qwen/Qwen3-32B", option, value]
    monkeypatch.setenv("HF_HUB_CACHE", str(DATA / "hf_cache" / "hub"))
    outcome = check_one({"id": "dropped-choice", "command": "python -m sglang.launch_server " + " ".join(argv)})
    assert "refuses the command (its parser)" in outcome.refused_by_default, outcome
    # The engine's own parsers, newest first, without the workbench's adapter or learned files
    accepting = next((engine for engine in walk if _oracle_parser_error(engine, argv) is None), None)
    assert accepting is not None, walk
    assert (outcome.release, outcome.why) == (accepting, ACCEPTED_OLDER), outcome
    assert "refuses the command (its parser)" not in outcome.verdict, outcome
    # The same launch second in a text of two: only it walks the older releases
    plain = "python -m sglang.launch_server --model-path Qwen/Qwen3-32B"
    two = check_one({"id": "two", "command": f"{plain}\npython -m sglang.launch_server {' '.join(argv)}"})
    first, second = two.launches
    assert (first.launch, first.why, first.older) == (1, "default", ()), first
    assert (second.launch, second.release, second.why) == (2, accepting, ACCEPTED_OLDER), second
    assert two.release == f"{first.release}, {accepting}" and two.verdict.startswith(
        f"{'UNDECIDED' if 3 in (first.status, second.status) else 'SAFE'}: 2 launches: launch 1 "), two


@pytest.mark.engine
def test_a_named_release_refusing_a_later_option_is_answered_by_the_oldest_newer_release_accepting_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A source naming a release older than the one it ran (its command uses an option added later):
    the newer releases are walked oldest first, and the one answering is the first whose own parser
    (``engine_oracle.py``, no adapter) accepts the command."""
    from workbench.preflight.batch import ACCEPTED_NEWER, check_one

    argv = ["--model-path", "Qwen/Qwen3-32B", "--attn-dp-size", "1"]  # an alias SGLang added in a 0.5.2x release
    # The newest cached release whose learned parser lacks the option, and the releases after it
    listed = list(releases.releases("sglang"))
    lacking = [e for e in listed if release_choice.refusal(e, argv) not in (None, release_choice.NOT_LEARNED)]
    named = next((e for e in reversed(lacking) if wheels.cached(e) is not None), None)
    if named is None:
        pytest.skip("no cached SGLang release whose learned parser lacks --attn-dp-size")
    walk = [r.engine for r in release_choice.newer_releases("sglang", argv, after=named) if r.refusal is None]
    if not walk or wheels.cached(walk[0]) is None:
        pytest.skip(f"not in the workbench's engine cache: {walk[:1]} (workbench engines fetch ...)")
    assert _oracle_parser_error(named, argv) is not None  # the premise, from the engine itself
    accepting = walk[0] if _oracle_parser_error(walk[0], argv) is None else None
    assert accepting is not None, walk[0]
    monkeypatch.setenv("HF_HUB_CACHE", str(DATA / "hf_cache" / "hub"))
    outcome = check_one({"id": "later-option", "release": named.split("==", 1)[1],
                         "command": "python -m sglang.launch_server " + " ".join(argv)})
    assert f"{named} refuses the command (its parser)" in outcome.refused_by_default, outcome
    assert (outcome.release, outcome.why) == (accepting, f"{ACCEPTED_NEWER} (the source names {named})"), outcome
    assert outcome.status != 2, outcome


def test_a_plugin_tutorials_command_is_checked_on_that_plugins_device() -> None:
    """A record from a vllm-ascend tutorial whose ``vllm serve`` command names no device is read on
    an Ascend NPU: the first accelerator of ``data/gpus.json`` whose platform is ``npu`` (read from the
    file here), which is the platform vLLM's adapter runs through the vllm-ascend plugin on."""
    from workbench.preflight.batch import source_gpu

    table = json.loads(gpus.GPUS_FILE.read_text())["gpus"]
    first_npu = next(name for name, entry in table.items() if entry["platform"] == "npu")
    assert source_gpu("vllm-ascend", "vllm") == first_npu
    assert source_gpu("vllm", "vllm") is None  # the engine's own docs: the user's --gpu or the default
    assert source_gpu("sglang", "sglang") is None
    assert source_gpu("vllm-ascend", "sglang") is None  # no SGLang platform runs through that plugin


def test_the_oldest_newer_release_taking_a_command_is_the_first_whose_parser_accepts_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Learned sections built from real argparse parsers: the releases up to 0.5.20 have no
    ``--cuda-graph-max-bs-decode``, the later ones have ``_engine_parser()``. The release named is the
    first newer one whose argparse parser accepts the words (asked of argparse itself)."""
    without = argparse.ArgumentParser(add_help=False)
    without.add_argument("--tp-size", "--tp", type=int)
    listed = list(releases.releases("sglang"))
    cut = listed.index("sglang==0.5.20")
    parsers = {engine: (without if i <= cut else _engine_parser()) for i, engine in enumerate(listed)}
    sections = {engine: {name: {"value": value, "how": "measured", "function": "test", "states": 1}
                         for name, value in describe(parser).items()} for engine, parser in parsers.items()}
    monkeypatch.setattr(learned, "section", lambda engine, name: sections.get(engine) if name == "parser" else None)
    release_choice._learned_parser.cache_clear()
    try:
        words = ["--cuda-graph-max-bs-decode", "16", "--tp", "2"]
        expected = next(e for e in listed[listed.index("sglang==0.5.9") + 1:] if not _argparse_refuses(parsers[e], words))
        assert release_choice.oldest_newer_taking("sglang", words, after="sglang==0.5.9") == expected
        assert expected == listed[cut + 1]
        assert release_choice.oldest_newer_taking("sglang", ["--no-such-option"], after="sglang==0.5.9") is None
        assert release_choice.oldest_newer_taking("sglang", words, after=listed[-1]) is None  # nothing newer
    finally:
        release_choice._learned_parser.cache_clear()


def test_no_release_is_named_for_a_refusal_the_learned_parsers_cannot_see() -> None:
    """``...`` left in a recipe's command is a stray word (vLLM 0.34.0's parser: "unrecognized
    arguments: ..."); learned parsers hold options and choices only and take it, so naming an older
    release whose learned parser takes it would send the user to a release that refuses it too."""
    from workbench.preflight import _parser_hint
    from workbench.preflight.command import parse_command
    from workbench.preflight.other_releases import Asked

    asked: list[str] = []

    def ask(release: str) -> Asked[object]:  # no engine process here: only learned parsers may be read
        asked.append(release)
        return Asked(False, None, f"{release} refuses it too")

    parsed = parse_command("vllm serve org/m --max-model-len 1010000 ...")
    assert release_choice.refusal("vllm==0.34.0", parsed.argv) is None  # the premise: it sees no refusal
    assert "cannot tell which release would take what it refused" in _parser_hint(parsed, "vllm==0.34.0", asked=False,
                                                                                  ask=ask)
    unknown = parse_command("vllm serve org/m --no-such-option-anywhere 1")
    assert _parser_hint(unknown, "vllm==0.34.0", asked=False, ask=ask) == ""  # no release has the option: none named
    assert asked == []  # and none was asked
