"""The release list and the learned-file format (workbench.engines.store.releases / learned)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version

from workbench.engines.store import learned, releases


def test_the_release_list_is_in_the_package_index_order() -> None:
    for name in releases.ENGINES:
        listed = [releases.split(r)[1] for r in releases.releases(name)]
        assert listed == sorted(listed, key=Version), name  # packaging's PEP 440 order, not ours
        assert len(set(listed)) == len(listed)
    sglang = releases.releases("sglang")
    assert sglang[0] == "sglang==0.5.0rc2" and sglang[-1] == "sglang==0.5.23"
    assert len([r for r in sglang if ".post" not in r]) == 24  # 0.5.0rc2 and 0.5.1 ... 0.5.23
    vllm = releases.releases("vllm")
    # the range, 0.6.0 to 0.33.0, and what the index added since (0.34.0, listed 2026-12-02)
    assert vllm[0] == "vllm==0.6.0" and vllm.index("vllm==0.33.0") < len(vllm) and vllm[-1] == "vllm==0.34.0"


def _release_file(tmp_path: Path, engines: dict[str, list[str]]) -> Path:
    path = tmp_path / "releases.json"
    path.write_text(json.dumps({"about": "test", "listed_on": "2026-12-03", "pre_releases_kept": ["vllm-ascend"],
                                "engines": engines}))
    return path


def test_a_plugin_release_candidate_pairs_with_the_engine_release_of_its_number(tmp_path: Path) -> None:
    """vllm-ascend publishes most versions only as release candidates: vLLM X pairs with the plugin's
    final X, else its newest listed X rcN; the default runs over the final ones only."""
    path = _release_file(tmp_path, {"vllm": ["0.20.0", "0.21.0", "0.22.0", "0.23.0", "0.24.0"],
                                    "vllm-ascend": ["0.21.0rc1", "0.21.0rc2", "0.22.0", "0.23.0", "0.23.0.post1",
                                                    "0.24.0rc1"]})
    assert releases.paired("vllm-ascend", "0.21.0", path) == "vllm-ascend==0.21.0rc2"  # the newest candidate
    assert releases.paired("vllm-ascend", "0.22.0", path) == "vllm-ascend==0.22.0"  # the final, when there is one
    assert releases.paired("vllm-ascend", "0.23.0", path) == "vllm-ascend==0.23.0"  # not its .post1
    assert releases.paired("vllm-ascend", "0.20.0", path) is None
    assert releases.with_plugin("vllm", "vllm-ascend", path) == (
        "vllm==0.21.0", "vllm==0.22.0", "vllm==0.23.0", "vllm==0.24.0")
    assert releases.with_plugin("vllm", "vllm-ascend", path, finals=True) == ("vllm==0.22.0", "vllm==0.23.0")


def test_the_index_listing_keeps_the_newest_release_candidate_of_a_version_without_a_final() -> None:
    index = ["0.30.0rc2", "0.30.0rc1", "0.29.0rc1", "0.23.0.post1", "0.23.0", "0.23.0rc1", "0.21.0rc1"]
    kept = [v for v in index if releases._newest_pre_without_final(v, index)]
    assert kept == ["0.30.0rc2", "0.29.0rc1", "0.21.0rc1"]


def test_the_shipped_list_pairs_vllm_021_with_the_plugins_release_candidate() -> None:
    # vllm-ascend has no final 0.21.0 on the index (pip index versions vllm-ascend --pre, 2026-12-03)
    assert releases.paired("vllm-ascend", "0.21.0") == "vllm-ascend==0.21.0rc1"
    assert releases.with_plugin("vllm", "vllm-ascend", finals=True)[-1] == "vllm==0.23.0"


@pytest.mark.parametrize("asked, expected", [
    ("sglang==0.5.12", "sglang==0.5.10"),  # newest learned not after it
    ("sglang==0.5.14", "sglang==0.5.14"),  # itself
    ("sglang==0.5.3", "sglang==0.5.10"),  # older than every learned one: the oldest
    ("sglang==0.5.15.post1", "sglang==0.5.14"),
    ("vllm==0.6.0", None),
])
def test_nearest_learned_release(asked: str, expected: str | None) -> None:
    assert releases.nearest(["sglang==0.5.14", "sglang==0.5.10"], asked) == expected


def test_bad_release_names_say_the_form() -> None:
    with pytest.raises(ValueError, match="NAME==VERSION"):
        releases.split("sglang-0.5.21")
    with pytest.raises(ValueError, match="not a release version"):
        releases.version_key("latest")


def test_a_section_is_written_whole_and_sorted(tmp_path: Path) -> None:
    fact = {"value": 8, "how": "measured", "function": "f", "states": 3}
    target = learned.write_section("sglang==0.5.21", "buffers", {"b": fact, "a": fact}, root=tmp_path)
    learned.write_section("sglang==0.5.21", "parser", {"flags": {"value": 1, "how": "read", "source": "x.py:1",
                                                                 "reason": "why"}}, root=tmp_path)
    data = json.loads(target.read_text())
    assert set(data["sections"]) == {"buffers", "parser"} and list(data["sections"]["buffers"]) == ["a", "b"]
    first = target.read_bytes()
    learned.write_section("sglang==0.5.21", "parser", data["sections"]["parser"], root=tmp_path)
    assert target.read_bytes() == first  # learning the same thing twice changes no byte


@pytest.mark.parametrize("fact, problem", [
    ({"value": 1, "how": "measured", "states": 3}, "needs 'function'"),
    ({"value": 1, "how": "read", "source": "f.py:1"}, "needs 'reason'"),
    ({"value": 1, "how": "guessed"}, "is not one of"),
    ({"how": "absent", "reason": "r"}, "needs a value"),
])
def test_an_incomplete_fact_is_refused(tmp_path: Path, fact: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        learned.write_section("sglang==0.5.21", "buffers", {"x": {"y": fact}}, root=tmp_path)
