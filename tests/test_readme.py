"""The README's launch command is checked as pasted, and its output is what ``workbench check`` prints.

The README shows one real command (SGLang's cookbook recipe for GLM-5, whose config is in the test
data's Hugging Face cache) and the output it gets. This test reads both from the README, runs the
command the way the README says (``HF_HUB_CACHE`` relative to the checkout, the checkout as working
directory) and compares: a README whose example no longer runs, or whose output is no longer the
tool's, fails here. What the output says is checked elsewhere against worked cases and the engine's
own code (``test_preflight.py``, ``test_launch_engine.py``); this checks that the front page shows
a real run.
"""

from __future__ import annotations

import io
import shlex
from pathlib import Path

import pytest

from workbench import cli

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "$ "


def readme_example(readme: str) -> tuple[dict[str, str], list[str], str]:
    """The README's one pasted check: (the variables it sets, the arguments after ``workbench``, the
    output shown below it), from the fenced block whose first line is ``$ ... workbench check ...``."""
    blocks = readme.split("```")[1::2]  # the fenced blocks' contents (their language word included)
    shown = [b.split("\n", 1)[1] for b in blocks if b.split("\n", 1)[1].startswith(PROMPT) and " workbench check " in b]
    assert len(shown) == 1, f"the README shows {len(shown)} pasted checks, not one"
    lines = shown[0].splitlines()
    end = next(i for i, line in enumerate(lines) if not line.endswith("\\"))  # the command's last line
    words = shlex.split(" ".join(line.removesuffix("\\") for line in lines[:end + 1])[len(PROMPT):])
    env = {}
    while "=" in words[0]:
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    assert words[0] == "workbench", words
    return env, words[1:], "\n".join(lines[end + 1:]) + "\n"


def test_the_example_is_found_with_its_command_and_output() -> None:
    text = "x\n```bash\nmake test\n```\n```\n$ A=b workbench check --gpu h200 -- vllm serve \\\n  m \\\n  --tp 2\nout 1\nout 2\n```\n"
    assert readme_example(text) == ({"A": "b"}, ["check", "--gpu", "h200", "--", "vllm", "serve", "m", "--tp", "2"],
                                    "out 1\nout 2\n")


@pytest.mark.engine  # runs SGLang 0.5.23's own parser and resolution (its wheel, fetched once)
def test_the_readmes_launch_command_prints_what_the_readme_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    env, argv, shown = readme_example((ROOT / "README.md").read_text(encoding="utf-8"))
    assert env == {"HF_HUB_CACHE": "tests/data/hf_cache/hub"} and (ROOT / env["HF_HUB_CACHE"]).is_dir()
    monkeypatch.chdir(ROOT)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = io.StringIO()
    status = cli.main(argv, out)
    assert out.getvalue() == shown
    assert status == 0  # the README says: exit status 0 (SAFE)
