"""What one function answered for one state, in a form both sides give and JSON can carry.

An answer is a plain dict: ``outcome`` ("ok", "raised", "none" for an allocator's None), the
exception as ``"TypeName: message"`` when it raised, and the buffers it left behind as nested
lists of ints (shapes as lists). Comparing the two sides is then ``==`` on dicts, and a
disagreement can be printed as it is.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import torch

from workbench.engines.sandbox.standins import StandInCalled

Answer = dict[str, Any]


MADE_HERE = "_made_by_conformance"  # set on the engine objects conformance builds with object.__new__

# The fill of the page tables both sides of a page-builder row start from: no builder stores it,
# so an entry still -7 is one the kernel (or the replay) did not write.
UNWRITTEN = -7


class Moved(RuntimeError):
    """The engine version has no method of the shape conformance calls (its signature moved)."""


def raised(error: BaseException) -> Answer:
    return {"outcome": "raised", "error": f"{type(error).__name__}: {error}"}


def ok(**fields: Any) -> Answer:
    return {"outcome": "ok", **fields}


def none(**fields: Any) -> Answer:
    return {"outcome": "none", **fields}


class Table:
    """A tensor in an answer: compared with ``torch.equal`` (fast on million-entry tables), shown
    as shape, dtype and its first entries (``summary``) only where a disagreement is printed."""

    def __init__(self, value: torch.Tensor) -> None:
        self.value = value.detach().cpu()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Table):
            return NotImplemented
        a, b = self.value, other.value
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))

    __hash__ = None  # type: ignore[assignment]

    def first_mismatch(self, other: Table) -> str:
        if self.value.shape != other.value.shape:
            return f"shape {list(self.value.shape)} vs {list(other.value.shape)}"
        if self.value.dtype != other.value.dtype:
            return f"dtype {self.value.dtype} vs {other.value.dtype}"
        index = (self.value != other.value).nonzero()[0].tolist()
        return f"at {index}: {self.value[tuple(index)].item()} vs {other.value[tuple(index)].item()}"

    def summary(self, limit: int = 24) -> dict[str, Any]:
        flat = self.value.reshape(-1)
        shown = flat[:limit].tolist()
        return {"shape": list(self.value.shape), "dtype": str(self.value.dtype).replace("torch.", ""),
                "values": shown if flat.numel() <= limit else [*shown, "..."]}


def tensor(value: torch.Tensor | None) -> Table | None:
    return None if value is None else Table(value)


def catching(call: Callable[[], Answer]) -> Answer:
    """``call()``'s answer, or the answer that it raised (every exception is an answer here)."""
    try:
        return call()
    except (StandInCalled, Moved):
        raise  # not the engine's answer: a library that is not here, or a method that moved
    except TypeError as error:
        if _call_shape(error):
            # The release's function takes other arguments than the ones the call gives (a
            # signature that moved): not the engine's answer to the state.
            raise Moved(f"this version's function takes other arguments: {error}") from error
        return raised(error)
    except AttributeError as error:
        if getattr(getattr(error, "obj", None), MADE_HERE, False):
            # The version reads an attribute the set-up does not give its object: ours is not
            # enough for this version, which says nothing about the engine.
            raise Moved(f"this version reads {type(error.obj).__name__}.{error.name}, which conformance "
                        f"does not set up") from error
        return raised(error)
    except Exception as error:  # noqa: BLE001 - an engine's exception is data to compare
        return raised(error)


_BINDING = ("positional argument", "unexpected keyword argument", "missing a required argument",
            "too many positional arguments", "required positional argument", "required keyword-only argument")


def _call_shape(error: TypeError) -> bool:
    """Whether a TypeError is the call not fitting the function's signature: raised where the
    call is made (conformance's own call module), or by triton binding a kernel's arguments."""
    if not any(text in str(error) for text in _BINDING):
        return False
    frames = traceback.extract_tb(error.__traceback__)
    last = frames[-1].filename if frames else ""
    return last.endswith(("sglang_calls.py", "sglang_calls_older.py")) or "/triton/" in last


def first_difference(engine: Answer, model: Answer) -> str:
    """A short path to where two answers part, for the table (``block_tables.values[1][3]``)."""
    return _diff(engine, model, "") or "(equal)"


def _diff(a: Any, b: Any, path: str) -> str | None:
    if isinstance(a, Table) and isinstance(b, Table):
        return None if a == b else f"{path} {a.first_mismatch(b)}"
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


def shown(answer: Answer) -> Answer:
    """The answer in JSON form, tables cut to their first entries (for printing a disagreement)."""
    return {key: value.summary() if isinstance(value, Table) else value for key, value in answer.items()}
