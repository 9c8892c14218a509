"""Crash isolation: a child that returns, raises, dies, is killed or hangs; the parent records it and goes on."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Mapping

import pytest

from workbench.analysis.seeds import EXACT_FIT, QWQ_NPU
from workbench.devices.isolation import (
    describe_exit,
    died_record,
    isolated_probe,
    needs_isolation,
    probe_payload,
    raised_record,
    run_isolated,
)

# ---- child targets: module level, so a spawned child can import them by name ----------------------


def _echo(payload: Mapping[str, object]) -> dict[str, object]:
    return {"outcome": "ok", "error": None, "pid_differs": os.getpid() != payload["parent"]}


def _exit_three(payload: Mapping[str, object]) -> dict[str, object]:
    os._exit(3)


def _kill_self(payload: Mapping[str, object]) -> dict[str, object]:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)
    return {}


def _assert_then_die(payload: Mapping[str, object]) -> dict[str, object]:
    # What a CUDA kernel prints before the runtime tears the process down.
    sys.stderr.write("Indexing.cu:1422: indexSelectLargeIndex: block: [0,0,0], thread: [0,0,0] "
                     "Assertion `srcIndex < srcSelectDimSize` failed.\n")
    sys.stderr.flush()
    os._exit(134)


def _raise_device_assert(payload: Mapping[str, object]) -> dict[str, object]:
    raise RuntimeError("CUDA error: device-side assert triggered\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")


def _raise_value_error(payload: Mapping[str, object]) -> dict[str, object]:
    raise ValueError("boom")


def _hang(payload: Mapping[str, object]) -> dict[str, object]:
    time.sleep(60)
    return {}


# ---- tests --------------------------------------------------------------------------------------


def test_a_returning_child_hands_back_its_record() -> None:
    assert run_isolated(_echo, {"parent": os.getpid()}) == {"outcome": "ok", "error": None, "pid_differs": True}


def test_a_dying_child_is_recorded_and_the_sweep_goes_on() -> None:
    results = [run_isolated(target, {"parent": os.getpid()}) for target in (_exit_three, _kill_self, _echo)]
    assert results[0] == {"outcome": "crashed", "error": "child died: exit code 3", "child_exit": 3}
    assert results[1] == {"outcome": "crashed", "error": "child died: signal 9 (SIGKILL)", "child_exit": -9}
    assert results[2]["outcome"] == "ok"  # the parent is unharmed and runs the next one


def test_a_child_that_dies_after_a_device_assert_is_an_index_error() -> None:
    record = run_isolated(_assert_then_die, {})
    assert record["outcome"] == "index-error"
    assert record["child_exit"] == 134
    assert str(record["error"]).endswith("Assertion `srcIndex < srcSelectDimSize` failed. (child died: exit code 134)")


def test_a_raising_child_is_classified_by_its_message() -> None:
    assert run_isolated(_raise_device_assert, {}) == {
        "outcome": "index-error", "error": "CUDA error: device-side assert triggered", "child_exit": None}
    assert run_isolated(_raise_value_error, {}) == {
        "outcome": "crashed", "error": "child raised ValueError: boom", "child_exit": None}


def test_a_hung_child_is_killed_at_the_timeout() -> None:
    start = time.monotonic()
    record = run_isolated(_hang, {}, timeout_s=3)
    assert record == {"outcome": "crashed", "error": "child timed out after 3 s", "child_exit": -signal.SIGKILL}
    assert time.monotonic() - start < 30


def test_the_seed_gather_in_a_child_gives_torchs_own_message() -> None:
    record = run_isolated(probe_payload, {"case": EXACT_FIT.before, "device": "cpu"})
    assert record["outcome"] == "index-error"
    assert record["error"] == EXACT_FIT.expected_error


def test_classification_without_a_child() -> None:
    assert describe_exit(-15) == "child died: signal 15 (SIGTERM)"
    assert describe_exit(0) == "child died: exit code 0"
    assert died_record(1, "warming up\n[ERROR] EZ9999: Inner Error! The aicore execution is abnormal.\n")["outcome"] == "index-error"
    assert died_record(1, "Segmentation fault\n")["error"] == "child died: exit code 1: Segmentation fault"
    assert raised_record("IndexError", "index 1 is out of bounds for dimension 0 with size 1")["outcome"] == "index-error"
    assert raised_record("RuntimeError", "The size of tensor a (2) must match")["outcome"] == "crashed"


@pytest.mark.parametrize(("component", "device", "isolated"), [
    ("allocator", "cpu", False), ("allocator", "cuda", True), ("allocator", "npu:0", True),
    ("npu-block-table", "npu", False), ("dsa-page-table", "cuda", False),
])
def test_only_device_gathers_are_isolated(component: str, device: str, isolated: bool) -> None:
    assert needs_isolation({"component": component}, device) is isolated


def test_on_the_cpu_probes_run_in_process() -> None:
    record = isolated_probe(QWQ_NPU.before, "cpu")
    assert (record["outcome"], record["error"], record["path"]) == ("shape-error", QWQ_NPU.expected_error, "eager")
    assert isolated_probe({"component": "gpu"}, "cpu")["outcome"] == "invalid"
