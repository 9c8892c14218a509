"""Each case of an oracle's job answered in a forked child, so that cases never see each other's
state (the engine's modules are loaded once, before): shared by ``engine_oracle.py`` (SGLang) and
``engine_oracle_vllm.py``."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any


def answer_each(cases: list[dict[str, Any]], answer: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Print one JSON line per case: what ``answer`` returned in a child, or the child's error."""
    for case in cases:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            try:
                said = answer(case)
            except BaseException as error:  # noqa: BLE001 - the oracle reports, the test judges
                said = {"oracle_error": f"{type(error).__name__}: {error}"}
            with os.fdopen(write_end, "w") as stream:
                stream.write(json.dumps(said))
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end) as stream:
            text = stream.read()
        os.waitpid(pid, 0)
        print(text, flush=True)
