"""Conformance of the models with SGLang 0.5.23's own code (and, marked slower, older versions).

The expected values are the engine's: each row compares the engine's function with the model on
the same states, so agreement is the test. The wheel is fetched once into the workbench's cache
(``WORKBENCH_CACHE``); without the package index and without a cached copy the test is skipped
with the reason. Deselect it offline with ``-m 'not engine'``.
"""

from __future__ import annotations

import json
import os

import pytest

from workbench.engines import conformance, wheels
from workbench.engines.versions import DEFAULT_VERSIONS

ENGINE = "sglang==0.5.23"
TRITON_ROWS = ("[triton]", "normal_decode_set_metadata")  # may be skipped where triton is absent


def _fetch_or_skip(engine: str) -> None:
    try:
        wheels.fetch(engine)
    except wheels.FetchError as error:
        pytest.skip(str(error))


@pytest.mark.engine
def test_sglang_0_5_23_agrees_on_every_function() -> None:
    _fetch_or_skip(ENGINE)
    rows = conformance.run_version(ENGINE, states=1000, triton=False)  # the interpreted kernels: slow test below
    by_function = {row["function"]: row for row in rows}
    for function, row in by_function.items():
        if row["skipped"]:
            assert any(mark in function for mark in TRITON_ROWS), f"{function} skipped: {row['skipped']}"
            continue
        assert row["states"] >= 1000, f"{function}: only {row['states']} states"
        assert row["agree"] == row["states"], f"{function}: {json.dumps(row['first_disagreement'])[:2000]}"
    assert len([r for r in rows if not r["skipped"]]) >= 13


def _modelled_versions() -> list[str]:
    data = json.loads(DEFAULT_VERSIONS.read_text())
    return [v["engine"] for v in data["versions"] if "conformance" in v]


@pytest.mark.engine
@pytest.mark.engine_versions
@pytest.mark.skipif(not os.environ.get("WORKBENCH_ENGINE_VERSIONS"), reason="slow: set WORKBENCH_ENGINE_VERSIONS=1")
@pytest.mark.parametrize("engine", _modelled_versions())
def test_every_modelled_version_agrees(engine: str) -> None:
    _fetch_or_skip(engine)
    rows = conformance.run_version(engine, states=1000, triton=None)
    assert not [row for row in rows if conformance.disagrees(row)], conformance.format_table(rows)


def test_missing_wheel_is_one_line_and_exit_2(tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A version that is not cached and cannot be fetched: one line on stderr, status 2."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))

    def no_index(engine: str) -> wheels.EngineInstall:
        raise wheels.FetchError(f"cannot fetch {engine} and it is not cached in {tmp_path}: no index")

    monkeypatch.setattr(wheels, "fetch", no_index)
    status = conformance.main([ENGINE], as_json=True, states=1, seed=0, triton=False)
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and "cannot fetch sglang==0.5.23" in err


def test_unknown_version_is_refused() -> None:
    with pytest.raises(ValueError, match="not a modelled version"):
        conformance.behaviour("sglang==0.0.1")


def test_a_vllm_version_is_refused_with_where_its_check_runs() -> None:
    """The worker loads SGLang's functions: a vLLM version used to print a table of skipped rows."""
    with pytest.raises(ValueError, match="'vllm==0.23.0' is not an SGLang version.*tests/test_vllm.py"):
        conformance.behaviour("vllm==0.23.0")
