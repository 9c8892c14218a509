"""Each distinct table state's boundary, executed once per content of the code and kept.

A table state (``TableCase``: backend, rule, mode, replay, options and geometry) fails first where the
closed form says (``analysis.closed_form``, checked against executed scans by the tests). The atlas
needs more than the number: a row carries the executed step's outcome and its exact message (torch's
or the workbench's own), so every failing state's step is executed at its predicted first failing
length, and a prediction that step does not confirm raises ``PredictionMismatch``. The step one
below it (or, for a safe state, the step at the table's bound) confirms the other side; it is executed
for the states whose rows the summary shows (``confirm``), where a disagreement would mislead, not for
the thousands of settings that only count toward it.

The states are the same across releases whose data give a backend the same fields and across
presets with the same table geometry, and they do not change with a release's reach or refusals:
``BoundaryStore`` keeps every state's result on disk, keyed by the state and the code that executes
it (the package's source and torch's version: the messages are torch's), so a release whose learned
data changed executes only the states no other release already had.

    ${WORKBENCH_CACHE:-~/.cache/workbench}/results/boundaries-<code key>.pkl   {TableCase: Found}
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from workbench.analysis.boundary import PredictionMismatch, confirm_boundary, predict_boundaries, probe_step
from workbench.atlas.result_cache import OFF_ENV, cache_folder, code_digest, store_pickle
from workbench.devices.device import one_torch_thread
from workbench.model.cases import TableCase
from workbench.model.outcome import ProbeResult


@dataclass(frozen=True)
class Found:
    """A state's first failing committed length (None: nothing the table holds fails), the step
    executed there, and whether the other side (the step below, or the bound) was executed too."""

    first_failing_seq_len: int | None
    failing: ProbeResult | None
    confirmed: bool


def execute(cases: Sequence[TableCase], device: str, confirm: bool = False) -> list[Found]:
    """Every case's closed-form boundary with its failing step executed (``confirm``: and the step
    below it, or the bound's); a top-level function, so process pools can run it."""
    predicted = predict_boundaries(cases)
    out = []
    with one_torch_thread():
        for case, first in zip(cases, predicted):
            if confirm:
                both = confirm_boundary(case, first, device=device)  # raises PredictionMismatch
                out.append(Found(both.first_failing_seq_len, both.failing, True))
            elif first is None:
                out.append(Found(None, None, False))
            else:
                failing = probe_step(case, first, device)
                if not failing.outcome.failed:
                    raise PredictionMismatch(f"predicted first failure at {first}, but execution gave "
                                             f"{failing.outcome.value} there ({case.component} {case.mode.value})")
                out.append(Found(first, failing, False))
    return out


class BoundaryStore:
    """Found boundaries by state, loaded from and saved to the result cache (nothing on disk with
    ``WORKBENCH_RESULT_CACHE=0``). ``executed`` counts the states this store had to execute."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self.executed = 0
        self._on = os.environ.get(OFF_ENV, "1") != "0"
        self._path: Path = cache_folder() / f"boundaries-{code_digest()}-{device.replace(':', '_')}.pkl"
        self._found: dict[TableCase, Found] = self._load() if self._on else {}
        self._changed = False

    def _load(self) -> dict[TableCase, Found]:
        try:
            with open(self._path, "rb") as handle:
                found: dict[TableCase, Found] = pickle.load(handle)
            return found
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError):
            return {}  # none yet, or unreadable: every state is executed again

    def missing(self, cases: Iterable[TableCase], confirmed: bool = False) -> list[TableCase]:
        """The cases with no result kept (``confirmed``: or with one not yet confirmed)."""
        return [c for c in cases if c not in self._found or (confirmed and not self._found[c].confirmed)]

    def add(self, cases: Sequence[TableCase], found: Sequence[Found]) -> None:
        self._found.update(zip(cases, found))
        self.executed += len(cases)
        self._changed = self._changed or bool(cases)

    def __getitem__(self, case: TableCase) -> Found:
        return self._found[case]

    def save(self) -> None:
        if self._on and self._changed:
            store_pickle(self._path, self._found)
            self._changed = False
