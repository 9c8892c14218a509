"""The engine-neutral part of ``workbench engines learn``: dispatch by engine name, progress,
resumability through ``learned.is_current``, and a release that cannot be learned (offline)."""

from __future__ import annotations

import io
import sys
import types
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.engines.learning import learn
from workbench.engines.store import learned, releases


def test_a_learner_is_found_by_the_engines_name() -> None:
    assert learn.learner_module("vllm-ascend") == "workbench.engines.vllm_ascend.learn"
    with pytest.raises(ValueError, match="'tgi' is not one of sglang, vllm, vllm-ascend"):
        learn.learner("tgi")


def _fake_learner(monkeypatch: pytest.MonkeyPatch, calls: list[str]) -> None:
    """A stand-in learner module for vllm-ascend: writes a one-fact section, fails on 0.7.3."""
    def learn_release(engine: str, *, progress: learn.Progress, root: Path) -> Path:
        calls.append(engine)
        if engine.endswith("==0.7.3"):
            raise learn.LearnError("the wheel has no attention backend module")
        progress(f"{engine}: buffers")
        wheel = {"file": "x.whl", "sha256": "abc"}
        if learned.is_current(engine, ("buffers",), "fake 1", "abc", root=root):
            return learned.shipped_path(engine, root)
        return learned.write_section(engine, "buffers", {"learner": "fake 1", "n": {"value": 1, "how": "measured",
                                                                                   "function": "f", "states": 3}},
                                     root=root, wheel=wheel)
    module = types.ModuleType(learn.learner_module("vllm-ascend"))
    module.learn_release = learn_release  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)


def test_all_releases_go_on_past_one_that_cannot_be_learned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[str] = []
    _fake_learner(monkeypatch, calls)
    out = io.StringIO()
    status = main(["engines", "learn", "--all", "vllm-ascend", "--out", str(tmp_path)], out=out)
    assert status == 1  # one release was not learned
    listed = list(releases.releases("vllm-ascend"))  # every listed one, in order, the first failing
    assert calls == listed and listed[:2] == ["vllm-ascend==0.7.3", "vllm-ascend==0.7.3.post1"]
    assert "not learned: the wheel has no attention backend module" in out.getvalue()
    assert f"[2/{len(listed)}] vllm-ascend==0.7.3.post1" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "vllm-ascend").iterdir()) == sorted(
        f"{e.split('==')[1]}.json" for e in listed[1:])


def test_a_release_learned_again_is_current(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[str] = []
    _fake_learner(monkeypatch, calls)
    engine = "vllm-ascend==0.9.1"
    first = learn.learn_one(engine, root=tmp_path, progress=lambda line: None).path
    assert first is not None
    before = first.read_bytes()
    assert learned.is_current(engine, ("buffers",), "fake 1", "abc", root=tmp_path)
    assert not learned.is_current(engine, ("buffers",), "fake 2", "abc", root=tmp_path)
    assert not learned.is_current(engine, ("buffers",), "fake 1", "other wheel", root=tmp_path)
    assert not learned.is_current(engine, ("buffers", "launch"), "fake 1", "abc", root=tmp_path)
    learn.learn_one(engine, root=tmp_path, progress=lambda line: None)
    assert first.read_bytes() == before


def test_learn_needs_one_release_or_all(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engines", "learn"], out=io.StringIO()) == 2
    assert "give one release (NAME==VERSION) or --all NAME" in capsys.readouterr().err
    assert main(["engines", "learn", "sglang-0.5.21"], out=io.StringIO()) == 2
    assert "is not NAME==VERSION" in capsys.readouterr().err
