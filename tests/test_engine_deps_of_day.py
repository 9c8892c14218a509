"""A slim release built before transformers' current major series gets the transformers of its day:
the newest uploaded on or before the day the engine's wheel was built (vLLM 0.9.0 does not import
with a later 4.x); a release of the current series gets the newest its METADATA allows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.engines.store import wheels


@pytest.mark.parametrize(("package", "filename", "version"), [
    ("transformers", "transformers-4.51.3-py3-none-any.whl", "4.51.3"),
    ("transformers", "transformers-4.51.3.tar.gz", "4.51.3"),
    ("huggingface-hub", "huggingface_hub-0.30.0.tar.gz", "0.30.0"),
    ("huggingface-hub", "huggingface_hub-0.30.0-py3-none-any.whl", "0.30.0"),
    ("transformers", "transformers_stream_generator-0.0.5.tar.gz", None),
    ("transformers", "README.md", None),
])
def test_the_version_is_read_from_the_file_name(package: str, filename: str, version: str | None) -> None:
    assert wheels.version_of(package, filename) == version


def _kept_days(root: Path, days: dict[str, str]) -> None:
    """The index's answers as the cache keeps them: upload days, and transformers 5.0.0's day."""
    folder = root / "engines" / "shared" / "upload-days"
    folder.mkdir(parents=True, exist_ok=True)
    if days:
        (folder / "transformers.json").write_text(json.dumps(days))
    (folder.parent / "release-days.json").write_text(json.dumps({"transformers": [5, "2026-01-26"]}))


def test_the_library_is_capped_at_the_newest_release_of_the_wheels_day(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Upload days as the package index lists them (transformers 4.51.3, 4.52.4, 4.57.6, 5.0.0).
    _kept_days(tmp_path, {"4.51.3": "2025-04-14", "4.52.4": "2025-05-30", "4.57.6": "2026-01-16",
                          "5.0.0": "2026-01-26"})
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    family = wheels.SLIM_FAMILIES["vllm"]
    said: list[str] = []
    # vLLM 0.9.0's wheel was built on 2025-05-27: 4.52.4 came three days later.
    capped = wheels._of_their_day(["transformers>=4.51.1", "regex"], family, "2025-05-27", said.append)
    assert capped == ["transformers>=4.51.1,<=4.51.3", "regex"]
    assert said and "4.51.3" in said[0] and "2025-05-27" in said[0]
    # A wheel of a later day gets that day's newest, whatever its own bound allows.
    assert wheels._of_their_day(["transformers"], family, "2026-01-20", said.append) == ["transformers<=4.57.6"]
    # Built after transformers 5.0.0: what its METADATA allows, as pip gives it today.
    assert wheels._of_their_day(["transformers>=4.56.0"], family, "2026-06-15", said.append) == ["transformers>=4.56.0"]


def test_an_index_without_upload_days_caps_below_the_major_and_says_so(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _kept_days(tmp_path, {})
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    monkeypatch.setenv("PIP_INDEX_URL", f"file://{tmp_path}/no-index")
    said: list[str] = []
    assert wheels._of_their_day(["transformers>=4.51.1"], wheels.SLIM_FAMILIES["vllm"], "2025-05-27",
                                said.append) == ["transformers>=4.51.1,<5"]
    assert said and "did not say" in said[0]
