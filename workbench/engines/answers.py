"""What one function answered for one state, in a form both sides give and JSON can carry.

An answer is a plain dict: ``outcome`` ("ok", "raised", "none" for an allocator's None), the
exception as ``"TypeName: message"`` when it raised, and the buffers it left behind as nested
lists of ints (shapes as lists). Comparing the two sides is then ``==`` on dicts, and a
disagreement can be printed as it is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import torch

from workbench.engines.standins import StandInCalled

Answer = dict[str, Any]


def raised(error: BaseException) -> Answer:
    return {"outcome": "raised", "error": f"{type(error).__name__}: {error}"}


def ok(**fields: Any) -> Answer:
    return {"outcome": "ok", **fields}


def none(**fields: Any) -> Answer:
    return {"outcome": "none", **fields}


SMALL = 4096  # tensors up to this many entries are compared and shown entry by entry


def tensor(value: torch.Tensor | None) -> Any:
    """Shape, dtype and contents of ``value`` (None stays None).

    Large tables (a 1M-token page table has millions of entries) are compared by a digest of
    their bytes, with the first entries kept so that a disagreement still shows something.
    """
    if value is None:
        return None
    head = {"shape": list(value.shape), "dtype": str(value.dtype).replace("torch.", "")}
    if value.numel() <= SMALL:
        return {**head, "values": value.tolist()}
    data = value.detach().cpu().contiguous().view(-1)
    digest = hashlib.blake2b(data.numpy().tobytes(), digest_size=16).hexdigest()
    return {**head, "blake2b": digest, "first": data[:16].tolist()}


def catching(call: Callable[[], Answer]) -> Answer:
    """``call()``'s answer, or the answer that it raised (every exception is an answer here)."""
    try:
        return call()
    except StandInCalled:
        raise  # not the engine's answer: the function needs a library that is not here
    except Exception as error:  # noqa: BLE001 - an engine's exception is data to compare
        return raised(error)


def first_difference(engine: Answer, model: Answer) -> str:
    """A short path to where two answers part, for the table (``block_tables.values[1][3]``)."""
    return _diff(engine, model, "") or "(equal)"


def _diff(a: Any, b: Any, path: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            found = _diff(a.get(key), b.get(key), f"{path}.{key}" if path else str(key))
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path} (length {len(a)} vs {len(b)})"
        for i, (x, y) in enumerate(zip(a, b)):
            found = _diff(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if a == b else path


def shorten(answer: Answer, limit: int = 400) -> Answer:
    """The answer with long value lists cut, so one disagreement stays readable in a table."""
    out: Answer = {}
    for key, value in answer.items():
        if isinstance(value, dict) and "values" in value:
            text = str(value["values"])
            value = {**value, "values": text if len(text) <= limit else text[:limit] + " ..."}
        out[key] = value
    return out
