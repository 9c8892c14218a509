"""What one executed engine step came to (docs/semantics.md#outcomes)."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass


class Outcome(str, enum.Enum):
    OK = "ok"  # metadata written, every read inside it
    SHAPE_ERROR = "shape-error"  # a copy_ raised torch's broadcast error
    INDEX_ERROR = "index-error"  # a gather read past its tensor
    SILENT_OVERREAD = "silent-overread"  # nothing raised, but a kernel reads past a row or list
    SILENT_OVERWRITE = "silent-overwrite"  # nothing raised, but a replay wrote past a row into the next one
    # The engine's own host check refused the step (``assert_buffer_fits``): an AssertionError in the
    # forward pass, so the server process dies, loudly, where an unchecked write would have overflowed.
    HOST_ASSERT = "host-assert"
    # The engine's host code raised on the step's own inputs (numpy's ValueError in the model runner's
    # input preparation): the engine core dies, loudly.
    HOST_ERROR = "host-error"
    OUT_OF_MEMORY = "out-of-memory"  # the allocator returned None, as designed
    INVALID = "invalid"  # not a state the engine can be in
    CRASHED = "crashed"  # an isolated probe's child died or hung; the error says how (not an engine verdict)

    @property
    def failed(self) -> bool:
        """True for the outcomes a correct engine must never produce."""
        return self in FAILURES


FAILURES = frozenset({Outcome.SHAPE_ERROR, Outcome.INDEX_ERROR, Outcome.SILENT_OVERREAD, Outcome.SILENT_OVERWRITE,
                      Outcome.HOST_ASSERT, Outcome.HOST_ERROR})


@dataclass(frozen=True)
class Overwrite:
    """A replay's writes past a row's end: request ``writer`` wrote ``entries`` entries into ``row``
    (the next request's row, or past the buffer when ``row`` is None). Neighbouring requests'
    metadata is corrupted: a failure of its own kind, distinct from a silent over-read."""

    writer: int  # the request (0-based, batch order) whose row overflowed
    row: int | None  # the buffer row that received the entries; None: past the buffer's end
    entries: int

    def message(self, buffer_name: str) -> str:
        into = f"into row {self.row}" if self.row is not None else "and past the end of the buffer"
        return (f"silent overwrite: request {self.writer} wrote {self.entries} entries past its {buffer_name} "
                f"row {into}")


@dataclass(frozen=True)
class ProbeResult:
    """One step's outcome; ``error`` is torch's exact message or the workbench's own words."""

    outcome: Outcome
    error: str | None = None
    buffer_width: int | None = None  # pages for the NPU block table, tokens for the DSA page table
    request_table_width: int | None = None  # W
    reads: int | None = None  # tokens the step reads for its longest request
    out_cache_loc: list[int] | None = None
    free_pages_after: list[int] | None = None
    device: str = "cpu"
    path: str = "eager"  # the read after the copy: "graph" (captured, replayed), "eager", or "none" (skipped)
    table_width: int | None = None  # vLLM: the block table's blocks, beside the derived buffer's (omitted when None)

    def to_dict(self, component: str) -> dict[str, object]:
        """The JSON shape of ``workbench probe``: table fields or allocator fields, not both."""
        data = asdict(self)
        data["outcome"] = self.outcome.value
        drop = ("out_cache_loc", "free_pages_after") if component != "allocator" else (
            "buffer_width", "request_table_width", "reads")
        for key in drop:
            data.pop(key)
        if self.table_width is None:  # only vLLM's buffers have a second width: other records stay as they were
            data.pop("table_width")
        return data


def invalid(reason: str) -> ProbeResult:
    return ProbeResult(Outcome.INVALID, reason)
