"""``workbench repro``: the standalone reproducers of the atlas's reachable findings and the seeds.

Fast (every ``make test``): every finding of the newest SGLang release and each seed renders a
script that compiles, is ruff-clean, imports nothing of the workbench, and says in its header how
the state is reached and which releases carry it; the command line's bad input is one line; the
findings page has an entry per finding. Marked ``engine``: one script (the allocator seed, a few
seconds) run with the cached wheel, the workbench blocked on the path. Marked ``repro_all``
(``WORKBENCH_REPRO_ALL=1``): every finding's script run the same way and compared with its atlas
row: the same first failing length and outcome, one below passing, the fix passing. Marked
``repro_venv`` (``WORKBENCH_REPRO_VENV=1``): one script in a real fresh virtual environment.
The expected values are the atlas's (the workbench's model) and the scripts' outputs are the
engine's own code: agreement is the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.engines.store import wheels
from workbench.repro.command import format_list
from workbench.repro.conditions import backend_entry, conditions, model_caveat
from workbench.repro.findings import Finding, by_id, findings, newest_release, seed_findings
from workbench.repro.page import findings_markdown
from workbench.repro.render import plan, script, script_name
from workbench.repro.runner import run_script

ROOT = Path(__file__).resolve().parent.parent

# Atlas rows whose worst setting the engine's own code does not fail where the atlas says: the
# script shows the engine's first failing length instead. FA3's topk > 1 draft and verify split the
# read (the prefix through page_table with cache_seqlens = s, the drafts through a small expand
# table), which the FA3 model does not: kept visible here until the model learns it.
# Findings whose script the engine's code contradicts (none since the FA3 model reads the prefix
# only with topk above 1, as the engine's _spec_read_seq_len_delta does): id -> what the engine does
ENGINE_DISAGREES: dict[str, str] = {}


@pytest.fixture(scope="module")
def release_findings() -> list[Finding]:
    return findings(newest_release())  # the atlas of the newest release (a few seconds) and the seeds


def test_every_reachable_finding_and_seed_is_listed(release_findings: list[Finding]) -> None:
    ids = [f.id for f in release_findings]
    assert {"seed/npu-block-table", "seed/dsa-page-table", "seed/allocator"} <= set(ids)
    atlas = [f for f in release_findings if f.status != "seed"]
    assert atlas and all(f.status == "reachable" and f.first_failing <= (f.reachable_len or 0) for f in atlas)
    assert len(set(ids)) == len(ids)
    listing = format_list(release_findings)
    assert all(f.id in listing and script_name(f) in listing for f in release_findings)


def test_every_script_renders_standalone_and_lint_clean(release_findings: list[Finding], tmp_path: Path) -> None:
    for f in release_findings:
        text = script(f)
        compile(text, script_name(f), "exec")  # valid Python
        assert "import workbench" not in text and "from workbench" not in text, f.id
        path = tmp_path / script_name(f)
        path.write_text(text)
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", "--select", "E9,F",
                           str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_headers_say_how_the_state_is_reached(release_findings: list[Finding]) -> None:
    for f in release_findings:
        text = script(f)
        header = text.split('"""')[1]
        c = conditions(f)
        for part in ("Reached by:", "Scheduler:", "Batch:", "KV pool:", "Releases affected:", "Fix:",
                     f"pip install --no-deps {f.release}", c.launch_command.split()[0]):
            assert part in header, (f.id, part)
        assert str(f.first_failing) in header and f.outcome in header
        p = plan(f)
        assert ("pip install triton" in header) == p.needs_triton, f.id
        if "+" in f.engine:
            assert "is not a release" in header, f.id  # a pseudo-version says what it is


HF_CACHE = Path(__file__).parent / "data" / "hf_cache" / "hub"
PRESET_CONFIGS = {"QwQ-32B": "models--Qwen--Qwen3-32B", "GLM-5": "models--zai-org--GLM-5",
                  "GLM-5.2": "models--zai-org--GLM-5.2-FP8", "DeepSeek-V3.2": "models--deepseek-ai--DeepSeek-V3.2"}


def test_the_atlas_launch_command_runs_the_rows_setting(release_findings: list[Finding],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The header's command, read back by the workbench's own preflight, resolves to the row's setting."""
    from workbench.preflight import resolve

    monkeypatch.setenv("HF_HUB_CACHE", str(HF_CACHE))
    for f in release_findings:
        if f.status == "seed":
            continue
        if model_caveat(f):  # a DSA preset on another backend: the engine would force dsa, ps 64
            assert "is a DSA model" in script(f).split('"""')[1], f.id
            continue
        # The model's config as the engine reads it: the launch's own model where the test data's Hugging
        # Face cache holds it (DeepSeek-V3 for the MLA rows), else a model of the preset's family, the draft likewise.
        command = conditions(f).launch_command.replace("DRAFT_MODEL", "Qwen/Qwen3-8B")
        launch = backend_entry(f.backend).get("launch", {})
        assert isinstance(launch, dict)
        config = None if "model" in launch else HF_CACHE / PRESET_CONFIGS[str(f.setting.get("preset"))]
        # On the GPU its platform stands for: the engine's start-up checks refuse TRT-LLM off Blackwell
        gpu = str(launch["gpu"]) if "gpu" in launch else None
        deployment = resolve(command, engine=f.engine, gpu=gpu,
                             model_config=str(next(config.glob("snapshots/*/config.json"))) if config else None)
        assert deployment is not None, f.id
        g, s = deployment.geometry, f.setting
        assert (g.context_len, g.page_size, g.draft_tokens, g.spec_topk) == (
            s["context_len"], s["page_size"], s["draft_tokens"], s["spec_topk"]), f.id
        if g.draft_has_kv:
            assert g.spec_steps == s["spec_steps"], f.id


def test_findings_page_has_an_entry_per_finding(release_findings: list[Finding]) -> None:
    page = findings_markdown(release_findings, results={})
    for f in release_findings:
        assert f"## `{f.id}`" in page
        section = page.split(f"## `{f.id}`")[1].split("\n## ")[0]
        assert f"workbench repro {f.id} --out repro/" in section and "**Fix**" in section
        assert "**Public report or fix**" in section and ("none found" in section or "](https://github.com/" in section)


@pytest.mark.parametrize("argv, message", [
    (["repro"], "give finding ids, --all or --list"),
    (["repro", "seed/allocator"], "--out DIR is needed"),
    (["repro", "seed/nope", "--out", "x"], "'seed/nope' is not one of"),
    (["repro", "seed/allocator", "--out", "x", "--record", "r.json"], "--record needs --run"),
])
def test_repro_bad_input_is_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_repro_writes_a_seed_script(tmp_path: Path) -> None:
    assert main(["repro", "seed/allocator", "--out", str(tmp_path)]) == 0
    written = tmp_path / script_name(by_id(seed_findings(), "seed/allocator"))
    assert written.exists() and os.access(written, os.X_OK)


# ---- the engine's own code --------------------------------------------------------------------------------


def _fetch_or_skip(engine: str) -> None:
    try:
        wheels.fetch(engine)
    except wheels.FetchError as error:
        pytest.skip(str(error))


def check_against_row(f: Finding, out: Path) -> None:
    """Run ``f``'s script with the cached wheel; its steps must be the atlas row's."""
    _fetch_or_skip(f.release)
    path = out / script_name(f)
    path.write_text(script(f))
    done = run_script(f, path, workdir=out / "run")
    assert done.summary is not None, done.output[-4000:]
    first, below = done.step("first failing length"), done.step("one below")
    assert first is not None and below is not None, done.output[-4000:]
    assert (first["length"], first["outcome"]) == (f.first_failing, f.outcome), done.output[-4000:]
    assert below["outcome"] == "ok", done.output[-4000:]
    fixed = [s for s in done.steps() if s is not first and s is not below and s["label"] in
             ("first failing length", "reachable length")]
    assert fixed and all(s["outcome"] == "ok" for s in fixed), done.output[-4000:]
    assert done.reproduced and done.returncode == 0, done.output[-4000:]


@pytest.mark.engine
def test_allocator_seed_script_reproduces_with_the_cached_wheel(tmp_path: Path) -> None:
    check_against_row(by_id(seed_findings(), "seed/allocator"), tmp_path)


def _all_ids() -> list[object]:
    """Every finding of the newest release and the seeds; a row the engine's code contradicts runs
    too, as a strict expected failure (it must keep failing until the model or the engine changes)."""
    if not os.environ.get("WORKBENCH_REPRO_ALL"):
        return ["(set WORKBENCH_REPRO_ALL=1)"]
    return [pytest.param(f.id, marks=pytest.mark.xfail(strict=True, reason=ENGINE_DISAGREES[f.id]))
            if f.id in ENGINE_DISAGREES else f.id for f in findings(newest_release())]


@pytest.mark.repro_all
@pytest.mark.parametrize("finding_id", _all_ids())
def test_script_reproduces_its_atlas_row(finding_id: str, tmp_path: Path) -> None:
    if not os.environ.get("WORKBENCH_REPRO_ALL"):
        pytest.skip("every finding's script: slow (tens of seconds each); set WORKBENCH_REPRO_ALL=1")
    check_against_row(by_id(findings(newest_release()), finding_id), tmp_path)


@pytest.mark.repro_venv
def test_one_script_in_a_fresh_virtual_environment(tmp_path: Path) -> None:
    """The header's own recipe: a fresh venv, torch (CPU), the wheel without dependencies, the small
    packages, then the script, from a folder with no workbench in sight."""
    if not os.environ.get("WORKBENCH_REPRO_VENV"):
        pytest.skip("builds a virtual environment and downloads torch; set WORKBENCH_REPRO_VENV=1")
    f = by_id(seed_findings(), "seed/allocator")
    text = script(f)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    header = text.split('"""')[1]
    for line in header.splitlines():
        line = line.strip().split("   #")[0].strip()
        if line.startswith("pip install"):
            subprocess.run([str(python), "-m", *line.split()], check=True, capture_output=True, timeout=1800)
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / script_name(f)).write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(python), script_name(f)], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0 and "REPRODUCED" in done.stdout, done.stdout[-4000:] + done.stderr[-4000:]
    shutil.rmtree(venv, ignore_errors=True)
