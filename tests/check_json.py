"""Helpers the preflight tests share: a real launch command of the data set by its id, and
``workbench check --json`` run in this process, its status and its one JSON object."""

from __future__ import annotations

import io
import json
from pathlib import Path

from workbench import cli

DATA = Path(__file__).parent / "data"


def launch_command(name: str) -> str:
    """The command of record ``name`` in ``tests/data/launch_commands.jsonl``, as published."""
    text: str = next(r["command"] for r in map(json.loads, (DATA / "launch_commands.jsonl").read_text().splitlines())
                     if r["id"] == name)
    return text


def check_json(argv: list[str]) -> tuple[int, dict[str, object]]:
    """``workbench check --json ARGV``: its exit status and the object it printed."""
    out = io.StringIO()
    status = cli.main(["check", "--json", *argv], out)
    data: dict[str, object] = json.loads(out.getvalue())
    return status, data
