"""A release is named to the user, or answers in place of the one that refused a command, only
after its own parser accepted the command (``workbench.preflight.other_releases``)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from check_json import check_json

from workbench import cli
from workbench.engines.commands import release_choice
from workbench.preflight import other_releases
from workbench.preflight.other_releases import Asked

DATA = Path(__file__).parent / "data" / "launch_commands.jsonl"


def _record(name: str) -> dict[str, object]:
    found: dict[str, object] = next(r for r in map(json.loads, DATA.read_text().splitlines()) if r["id"] == name)
    return found


def _candidates(*refusals: str | None) -> list[release_choice.OlderRelease]:
    return [release_choice.OlderRelease(f"sglang==0.5.{20 - i}", r) for i, r in enumerate(refusals)]


def test_a_release_whose_own_parser_refuses_is_never_named() -> None:
    asked: list[str] = []

    def refuses(release: str) -> Asked[str]:
        asked.append(release)
        return Asked(False, None, f"{release} refuses it too (its parser): unrecognized arguments: 4}}")

    walk = other_releases.first_accepting(_candidates(None, "an option it lacks", None, None), refuses, tries=2)
    assert walk.release is None and walk.answer is None
    assert asked == ["sglang==0.5.20", "sglang==0.5.18"]  # the learned parser's refusal passed over; at most 2 asked
    assert walk.asked == tuple(asked)
    assert "passed over (refused by its learned parser): sglang==0.5.19" in walk.said
    assert any(line.startswith("not asked: sglang==0.5.17") for line in walk.said)


def test_the_first_whose_own_parser_accepts_answers_and_one_not_started_is_not_counted_as_asked() -> None:
    def ask(release: str) -> Asked[str]:
        if release == "sglang==0.5.20":
            return Asked(False, None, "sglang==0.5.20: not asked (no wheel)", asked=False)
        return Asked(release == "sglang==0.5.18", release.upper(), "" if release == "sglang==0.5.18" else "refused")

    walk = other_releases.first_accepting(_candidates(None, None, None), ask)
    assert walk.release == "sglang==0.5.18" and walk.answer == "SGLANG==0.5.18"
    assert walk.asked == ("sglang==0.5.19", "sglang==0.5.18")


@pytest.mark.engine
def test_the_hint_names_a_release_whose_own_parser_took_the_command() -> None:
    """sglang 0.5.23's argparse finds --cuda-graph-max-bs ambiguous (the record's notes quote it); the
    hint names an older release, and that release, asked with --engine, does not refuse the command."""
    command = str(_record("sglang-docs-spec-eagle2-llama2-7b")["command"])
    status, refused = check_json(["--engine", "sglang==0.5.23", "--cmd", command])
    assert status == 2 and "ambiguous option: --cuda-graph-max-bs" in str(refused["message"])
    hint = str(refused["hint"])
    assert "whose own parser accepts the command" in hint
    named = hint.split("workbench check --engine ")[1].rstrip(")")
    status, answered = check_json(["--engine", named, "--cmd", command])
    assert status != 2 and answered["release"] == named, answered


@pytest.mark.engine
def test_with_no_release_named_an_older_release_whose_parser_takes_it_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The docs' STANDALONE launch uses --cuda-graph-max-bs, which the newest sglang's argparse finds
    ambiguous: with no release named (and none installed here) it is answered under an older release
    whose own parser takes it, the first line saying so and quoting the newest's refusal; asked for
    with --engine, the newest release's reading stands (exit 2)."""
    from workbench.engines.store import releases

    monkeypatch.setenv("HF_HUB_CACHE", str(Path(__file__).parent / "data" / "hf_cache" / "hub"))
    assert release_choice.installed("sglang") is None  # the premise
    newest = releases.newest("sglang")
    command = str(_record("sglang-docs-spec-standalone-qwen25-7b")["command"])
    status, strict = check_json(["--engine", newest, "--cmd", command])
    assert status == 2 and "ambiguous option: --cuda-graph-max-bs" in str(strict["message"])
    status, answered = check_json(["--cmd", command])
    assert status in (0, 1, 3) and answered["release"] != newest, answered
    assert str(answered["refused_by_newest"]).startswith(f"{newest} refuses the command (its parser): ambiguous option: "
                                                         "--cuda-graph-max-bs")
    assert f"the newest listed, {newest}, refuses it: ambiguous option" in str(answered["release_reason"])
    out = io.StringIO()
    cli.main(["check", "--cmd", command], out)
    first = out.getvalue().splitlines()[0]
    assert first.startswith(f"workbench check: {answered['release']} (the newest release whose own parser accepts") and newest in first
