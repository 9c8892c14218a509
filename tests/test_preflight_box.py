"""The notebooks' preflight box (``workbench.present.preflight_box``, its answer ``preflight_answer``).

The answer leads with the verdict's word and the fix of the first row a run reaches, in one line
that wraps; the release hint under it; the printed check folded below. Expected numbers are the
first seed's worked case (notebook 06, ``docs/semantics.md``): the Ascend verify reads ``s + D``
with D = 4, so a 256-page table (``cdiv(32768, 128)``) first fails at 256 * 128 - 4 + 1 = 32765 and
the fix's rule sizes it (32768 + 127 + 4) // 128 = 257 pages. The printed check (``workbench check``'s
text) is the independent side: what the box shows on top must be what the check printed.
"""

from __future__ import annotations

import html
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from workbench.preflight import PreflightError

HF_CACHE = Path(__file__).parent / "data" / "hf_cache" / "hub"
ASCEND = ("python -m sglang.launch_server --model-path Qwen/Qwen3-32B --context-length 32768 --device npu "
          "--attention-backend ascend --page-size 128 --speculative-algorithm EAGLE3 --speculative-draft-model-path "
          "Qwen/Qwen3-8B --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 "
          "--cuda-graph-max-bs-decode 16")
PLAIN = ("python -m sglang.launch_server --model-path Qwen/Qwen3-32B --context-length 32768 --device npu "
         "--attention-backend ascend --page-size 128")  # no draft model: one config file is the whole model
PRE_ASCEND = "sglang==0.5.23+revert-ascend-width"
sglang = pytest.mark.engine  # runs a released SGLang's own code (its wheel, fetched once)


@pytest.fixture(autouse=True)
def _hf_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(HF_CACHE))


def _texts(page: str, css: str) -> list[str]:
    """The text of each element of class ``css`` (the answer's elements hold no element of their own kind)."""
    found = re.findall(rf'<(\w+) class="{css}"[^>]*>(.*?)</\1>', page, re.S)
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", "", inner)).split()) for _, inner in found]


def _printed(page: str) -> str:
    """The folded printed check, as it reads."""
    found = re.search(r'<details.*?<pre class="workbench-outcome"[^>]*>(.*?)</pre></details>', page, re.S)
    assert found, page
    return html.unescape(found[1])


@sglang
def test_the_answer_leads_with_the_word_and_the_fix_the_check_prints() -> None:
    from workbench.present.preflight_answer import answer_html, checked

    answer = checked(ASCEND, PRE_ASCEND)
    page = answer_html(answer)
    first = _texts(page, "workbench-answer")[0]
    assert first.startswith("fails loudly block_tables (sglang-ascend-block-tables), target-verify: shape-error at "
                            "committed length 32,765"), first
    fix = _texts(page, "workbench-fix")[0].removeprefix("Fix: ")
    assert fix.startswith("rule context-plus-draft") and ": 257 pages," in fix, fix
    assert f"      fix: {fix}" in answer.text.splitlines()  # the line the check printed under a failing row
    assert first.endswith(f"Fix: {fix}")  # in the one line, after the word
    assert _printed(page) == f"exit status 1\n{answer.text}" and page.index("workbench-fix") < page.index("<details")
    assert answer.text.endswith(f"verdict: {answer.verdict} [{PRE_ASCEND}]")


@sglang
def test_a_refused_command_shows_the_release_hint_above_the_fold() -> None:
    """sglang 0.5.23's argparse finds --cuda-graph-max-bs ambiguous; the hint the check prints names
    an older release whose own parser accepts it, and the box shows it on the visible part."""
    from workbench.present.preflight_answer import answer_html, checked

    command = ("python3 -m sglang.launch_server --model Qwen/Qwen3-8B --speculative-algorithm EAGLE "
               "--speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 16 "
               "--cuda-graph-max-bs 8")
    answer = checked(command, "sglang==0.5.23")
    page = answer_html(answer)
    assert answer.status == 2
    first, hint = _texts(page, "workbench-answer")[0], _texts(page, "workbench-hint")[0]
    assert first.startswith("refused at start-up sglang==0.5.23 refuses the command (its parser): ambiguous option: "
                            "--cuda-graph-max-bs"), first
    named = re.search(r"workbench check --engine (\S+)\)", answer.text)  # the printed check's hint
    assert named and hint.startswith("Release: ") and hint.endswith(f"workbench check --engine {named[1]}"), hint
    assert page.index("workbench-hint") < page.index("<details")


@sglang
def test_the_config_field_answers_a_model_outside_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache without the model, offline: undecided, naming the cache; its config.json's folder in
    the field: the same answer as the cache that holds it gives."""
    from workbench.present.preflight_answer import checked

    from_cache = checked(PLAIN, PRE_ASCEND)
    assert from_cache.status == 0, from_cache.text
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # empty
    missing = checked(PLAIN, PRE_ASCEND, offline=True)
    assert missing.status == 3 and "not in the Hugging Face cache" in missing.verdict and str(tmp_path) in missing.verdict
    snapshot = next((HF_CACHE / "models--Qwen--Qwen3-32B" / "snapshots").iterdir())
    given = checked(PLAIN, PRE_ASCEND, str(snapshot), offline=True)
    assert (given.status, given.verdict) == (from_cache.status, from_cache.verdict)
    assert f"config from --model-config {snapshot / 'config.json'}" in given.text
    assert [r.first_failing for r in given.checks[0].rows] == [r.first_failing for r in from_cache.checks[0].rows]
    bad = checked(PLAIN, PRE_ASCEND, str(tmp_path / "nothing.json"))
    assert bad.status == 2 and bad.text.startswith("error: --model-config: cannot read")


# ---- the widget ----------------------------------------------------------------------------------


def _parts(box: Any) -> tuple[Any, Any, Any, Any, Any, Any]:
    """text, version, offline, button, config, answer."""
    version, offline, button = box.children[2].children
    return box.children[1], version, offline, button, box.children[3], box.children[4]


def _settled(box: Any, limit: float = 240) -> str:
    """The box's printed check once its newest request is drawn (it checks on a worker thread)."""
    shown = box.children[4]
    deadline = time.monotonic() + limit
    while 'data-state="done"' not in shown.value:
        assert time.monotonic() < deadline, f"the box still shows {shown.value!r}"
        time.sleep(0.02)
    return _printed(shown.value)


@sglang
def test_the_preflight_box_redraws_on_change(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ipywidgets")
    from workbench.present.preflight_box import check_text, preflight_box

    status, line = check_text(ASCEND + " --speculative-num-steps three", "sglang==0.5.23")
    assert status == 2 and line.startswith("error: sglang==0.5.23 refuses the command (its parser): argument "
                                           "--speculative-num-steps: invalid int value: 'three'")
    box = preflight_box(ASCEND, PRE_ASCEND)
    text, version, _, button, config, shown = _parts(box)
    assert _settled(box).startswith("exit status 1\n") and "32765" in _settled(box)
    assert "fails loudly" in _texts(shown.value, "workbench-answer")[0]
    version.value = "sglang==0.5.23"
    assert _settled(box).startswith("exit status 0\n") and "32893" in _settled(box)
    text.value = "vllm serve"
    assert _settled(box).startswith("exit status 2\n")
    text.value = ASCEND
    config.value = "no/such/config.json"  # the field is read: its error is the check's own
    assert "--model-config: cannot read 'no/such/config.json'" in _settled(box)
    config.value = ""
    shown.value = ""
    button.click()  # the button checks the command as it stands
    assert _settled(box).startswith("exit status 0\n")
    with pytest.raises(PreflightError, match="'sglang==0.0.0' is not a version a check can run"):
        preflight_box(ASCEND, "sglang==0.0.0")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # a release not listed is asked of the index: none here
    assert check_text(ASCEND, "sglang==0.0.0")[1].startswith("error: --engine: 'sglang==0.0.0' is not a listed release")


def _answer(text: str, status: int = 0) -> Any:
    from workbench.present.preflight_answer import Answer

    return Answer(status, text, (), 1, text)


def test_a_slow_check_is_announced_the_old_answer_cleared_and_a_passed_over_one_dropped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A check that takes a while: the old answer goes the moment the change comes (a changed release
    never shows the old release's error), the box says what it does and for which release; two
    changes in quick succession run only the newer one."""
    pytest.importorskip("ipywidgets")
    from workbench.present import preflight_box as module

    ran: list[str] = []
    release = threading.Event()
    seen_at_once: list[str] = []

    def slow(command: str, engine: str = "", model_config: str = "", offline: bool = False) -> Any:
        seen_at_once.append(box.children[4].value)  # what the page shows while this check runs
        ran.append(engine)
        release.wait(timeout=30)
        return _answer(f"verdict: SAFE [{engine or 'default'}]")

    monkeypatch.setattr(module, "offered", lambda: ["sglang==0.5.10", "sglang==0.5.21", "sglang==0.5.23"])
    monkeypatch.setattr(module, "checked", lambda command, engine="", model_config="", offline=False:
                        _answer(f"error: an old error [{engine}]", 2))
    box = module.preflight_box("python -m sglang.launch_server --model-path m", "sglang==0.5.10")
    assert "an old error [sglang==0.5.10]" in _settled(box)
    monkeypatch.setattr(module, "checked", slow)
    shown, version = box.children[4], box.children[2].children[0]
    version.value = "sglang==0.5.21"  # runs, and holds the worker
    assert seen_at_once and "an old error" not in seen_at_once[0] and 'data-state="pending"' in seen_at_once[0]
    assert "checking under sglang==0.5.21" in seen_at_once[0]
    assert 'data-state="pending"' in shown.value and "checking under sglang==0.5.21" in shown.value
    version.value = "sglang==0.5.10"  # passed over by the next change before the worker is free
    version.value = "sglang==0.5.23"
    assert "checking under sglang==0.5.23" in shown.value and "an old error" not in shown.value
    release.set()
    assert _settled(box).endswith("[sglang==0.5.23]")
    assert ran == ["sglang==0.5.21", "sglang==0.5.23"]


def test_the_offline_box_reaches_the_check_and_is_undone_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """The offline box sets HF_HUB_OFFLINE for the check only (as ``workbench check --offline``)."""
    from workbench.present import preflight_answer as module

    seen: list[str | None] = []
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def check(command: str, **options: object) -> Any:
        import os

        seen.append(os.environ.get("HF_HUB_OFFLINE"))
        raise PreflightError("stop here")

    monkeypatch.setattr(module, "check", check)
    assert module.checked("python -m sglang.launch_server --model-path m", offline=True).text == "error: stop here"
    module.checked("python -m sglang.launch_server --model-path m")
    import os

    assert seen == ["1", None] and "HF_HUB_OFFLINE" not in os.environ
