"""Values set outside a command (``$HOME``, ``$node0_ip``, ``<model>``): which of them the check needs.

A shell variable or a documentation placeholder left in a command is a value only its author
knows. It stops the check only where that value reaches something the check reads: a setting that
changes a modelled buffer, the model (its config), or the engine's refusal (``--tp $TP``: the
parser cannot read ``$TP`` as a number, so what it would do with the real value is unknown).
Elsewhere (``--download-dir $HOME/models``, ``--data-parallel-address $node0_ip``, ``--host
<your_server_ip>``) the engine reads the text as written, no buffer depends on it, and the verdict
names it and goes on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from workbench.engines.commands.adapters import FlagUse
from workbench.preflight.deployment import Setting


@dataclass(frozen=True)
class Use:
    """One value set outside the command and the options whose values hold it."""

    text: str  # "$HOME", "<model>"
    options: tuple[str, ...]  # as written: "--download-dir"; "" for a positional


def option_words(argv: Sequence[str], found: Sequence[str]) -> list[Use]:
    """For each of ``found``, the options whose words hold it, read from the words as written
    (``--opt VALUE``, ``--opt=VALUE``; a word after no option is a positional, ``""``)."""
    uses = []
    for text in found:
        options = []
        for i, word in enumerate(argv):
            if text not in word:
                continue
            name, has_value, _ = word.partition("=")
            if word.startswith("-") and has_value:
                options.append(name)
            elif i and argv[i - 1].startswith("-") and "=" not in argv[i - 1]:
                options.append(argv[i - 1])
            else:
                options.append("")
        uses.append(Use(text, tuple(dict.fromkeys(options))))
    return uses


def in_refusal(uses: Sequence[Use], message: str) -> list[Use]:
    """The values the engine's refusal is about: its message quotes the value or names its option
    (``argument --tp-size: invalid int value: '${TP_SIZE}'``, ``argument --speculative-config/-sc``)."""
    return [u for u in uses if u.text in message or any(o and _names(message, o) for o in u.options)]


def _names(message: str, option: str) -> bool:
    return f"{option}:" in message or f"{option}/" in message or f"{option} " in message


def reaching(uses: Sequence[Use], flags: Sequence[FlagUse], settings: Mapping[str, Setting]) -> tuple[list[str], list[str]]:
    """Which values reach a setting that changes a modelled buffer (each said with its setting), and
    which reach none (each said with its options). A value found in no flag's parsed value is taken
    to reach one: nothing shows where the engine put it."""
    blocking, passing = [], []
    for use in uses:
        dests = [f.dest for f in flags if use.text in _text(f.value)]
        modelled = [d for d in dests if settings.get(d) is None or settings[d].modelled]
        where = ", ".join(o or "a positional argument" for o in use.options)
        if not dests:
            blocking.append(f"{use.text} (in {where}; no setting shows where it goes)")
        elif modelled:
            blocking.append(f"{use.text} (in {where}: {', '.join(modelled)}, which changes a modelled buffer)")
        else:
            passing.append(f"{use.text} (in {where})")
    return blocking, passing


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)
