"""``workbench check`` answered by the resident workbench process (``workbench/resident/``): the
same output and exit status as a check in a process of its own, the caller's working folder and
environment honoured, one process reused, stopped when idle or asked, a new one for changed code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench.resident import client

ROOT = Path(__file__).resolve().parents[1]
NOT_A_LAUNCH = "echo hi"  # refused by the check itself: no engine process needed


@pytest.fixture()
def run_dir() -> Iterator[Path]:
    """A short run folder of the test's own (a Unix socket's path is at most 107 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="wb-res-"))
    yield folder
    subprocess.run([sys.executable, "-m", "workbench", "engines", "stop"], env=_env(folder), capture_output=True,
                   timeout=120)
    shutil.rmtree(folder, ignore_errors=True)


def _env(run_dir: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "WORKBENCH_RUN_DIR": str(run_dir), "PYTHONPATH": str(ROOT),
            "HF_HUB_CACHE": str(ROOT / "tests" / "data" / "hf_cache" / "hub"), **extra}


def _check(args: list[str], env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workbench", "check", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_a_refusal_comes_back_as_from_a_process_of_its_own(run_dir: Path) -> None:
    alone = _check(["--cmd", NOT_A_LAUNCH], _env(run_dir, WORKBENCH_RESIDENT="0"))
    first = _check(["--cmd", NOT_A_LAUNCH], _env(run_dir))
    again = _check(["--cmd", NOT_A_LAUNCH], _env(run_dir))
    assert alone.returncode == first.returncode == again.returncode == 2
    assert "no SGLang or vLLM launch in 'echo hi'" in alone.stderr
    assert "starting a resident workbench process" in first.stderr
    assert first.stderr.replace("workbench: starting a resident workbench process (once; later checks reuse it)...\n", "") \
        == again.stderr == alone.stderr
    assert _resident_count(run_dir) == 1  # one process answered both


def _resident_count(run_dir: Path) -> int:
    done = subprocess.run([sys.executable, "-c", "from workbench.resident import client; print(len(client.running()))"],
                          env=_env(run_dir), capture_output=True, text=True, timeout=60)
    return int(done.stdout.strip())


def test_it_stops_when_idle_and_when_asked(run_dir: Path) -> None:
    _check(["--cmd", NOT_A_LAUNCH], _env(run_dir, WORKBENCH_RESIDENT_IDLE="2"))
    assert _resident_count(run_dir) == 1
    deadline = time.monotonic() + 60
    while _resident_count(run_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _resident_count(run_dir) == 0  # idle for 2 s: gone (the probes above keep nothing alive)
    _check(["--cmd", NOT_A_LAUNCH], _env(run_dir))
    stopped = subprocess.run([sys.executable, "-m", "workbench", "engines", "stop"], env=_env(run_dir),
                             capture_output=True, text=True, timeout=120)
    assert "resident workbench" in stopped.stdout
    assert _resident_count(run_dir) == 0


def test_changed_code_gets_a_process_of_its_own(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    module = package / "a.py"
    module.write_text("x = 1\n")
    before = client.code_digest(package)
    assert client.code_digest(package) == before
    module.write_text("x = 22\n")  # another size
    assert client.code_digest(package) != before
    (package / "b.py").write_text("")
    assert client.code_digest(package) != before


@pytest.mark.engine
def test_a_check_answered_warm_is_the_check_of_its_own_process(run_dir: Path, tmp_path: Path) -> None:
    record = next(r for r in map(json.loads, (ROOT / "tests" / "data" / "launch_commands.jsonl").read_text().splitlines())
                  if r["id"] == "sgl-cookbook-glm5-fp8-eagle-mtp")
    (tmp_path / "launch.sh").write_text(record["command"])
    alone = _check(["--from-file", "launch.sh"], _env(run_dir, WORKBENCH_RESIDENT="0"), cwd=tmp_path)
    warm = [_check(["--from-file", "launch.sh"], _env(run_dir), cwd=tmp_path) for _ in range(2)]
    assert alone.returncode == 0 and "verdict: SAFE" in alone.stdout  # the README's command, as it answers
    for done in warm:  # the relative file read in the caller's folder, the same answer
        assert (done.returncode, done.stdout) == (alone.returncode, alone.stdout)
    assert "starting a resident" not in warm[1].stderr
    # the caller's environment: a Hugging Face cache without the model is the caller's, not the resident's
    empty = tmp_path / "empty-hub"
    empty.mkdir()
    offline = _check(["--from-file", "launch.sh"], _env(run_dir, HF_HUB_CACHE=str(empty), HF_HUB_OFFLINE="1"), cwd=tmp_path)
    assert offline.returncode == 3 and "zai-org/GLM-5-FP8" in offline.stdout
    after = _check(["--from-file", "launch.sh"], _env(run_dir), cwd=tmp_path)
    assert (after.returncode, after.stdout) == (alone.returncode, alone.stdout)
