"""A pasted launch command: which engine it starts, and its flags in the engine's own names.

Accepted programs: ``python -m sglang.launch_server``, ``sglang serve`` (SGLang);
``vllm serve MODEL``, ``python -m vllm.entrypoints.openai.api_server`` (vLLM). Leading
environment assignments (``CUDA_VISIBLE_DEVICES=0``) and shell line continuations are allowed.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from workbench.preflight.flags import TABLES, ParsedFlags, PreflightError, parse_flags

_PYTHON = re.compile(r"(.*/)?python(\d+(\.\d+)?)?$")
_MODULES = {"sglang.launch_server": "sglang", "vllm.entrypoints.openai.api_server": "vllm"}
_SCRIPTS = {("sglang", "serve"): "sglang", ("vllm", "serve"): "vllm"}
ALLOWED_PROGRAMS = "python -m sglang.launch_server, sglang serve, vllm serve MODEL, python -m vllm.entrypoints.openai.api_server"


@dataclass(frozen=True)
class LaunchCommand:
    engine: str  # "sglang" or "vllm"
    program: str  # as written: "python -m sglang.launch_server"
    flags: ParsedFlags
    text: str  # the command, one line


def split_command(command: str | Sequence[str]) -> list[str]:
    if not isinstance(command, str):
        return list(command)
    text = command.replace("\\\r\n", " ").replace("\\\n", " ")  # shell line continuations
    try:
        return shlex.split(text, comments=True)
    except ValueError as err:  # an unclosed quote
        raise PreflightError(f"command: cannot be split as a shell line ({err}): check the quotes") from None


def _program(tokens: list[str]) -> tuple[str, str, list[str]]:
    """(engine, program as written, the rest) of a command without its environment assignments."""
    if len(tokens) >= 3 and _PYTHON.match(tokens[0]) and tokens[1] == "-m" and tokens[2] in _MODULES:
        return _MODULES[tokens[2]], " ".join(tokens[:3]), tokens[3:]
    if len(tokens) >= 2 and (tokens[0].rsplit("/", 1)[-1], tokens[1]) in _SCRIPTS:
        return _SCRIPTS[(tokens[0].rsplit("/", 1)[-1], tokens[1])], " ".join(tokens[:2]), tokens[2:]
    shown = " ".join(tokens[:3]) if tokens else ""
    raise PreflightError(f"command: {shown!r} is not an SGLang or vLLM launch (allowed: {ALLOWED_PROGRAMS})")


def parse_command(command: str | Sequence[str], *, allow_unknown: bool = False) -> LaunchCommand:
    tokens = split_command(command)
    while tokens and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[0]):
        tokens = tokens[1:]  # VAR=value before the program
    if not tokens:
        raise PreflightError("command: empty (paste the engine's launch command)")
    engine, program, rest = _program(tokens)
    flags = parse_flags(TABLES[engine], rest, allow_unknown=allow_unknown)
    return LaunchCommand(engine, program, flags, shlex.join(tokens))
