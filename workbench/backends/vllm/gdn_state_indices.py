"""vLLM v1: the GDN layers' speculative state indices (``spec_state_indices_tensor``) as the recurrent
kernel reads them (vLLM issue 40756, PR 48475).

A hybrid model with Gated-DeltaNet layers (Qwen3-Next, Qwen3.5 / 3.6) keeps each request's
recurrent state in slots of a state pool; under speculative decoding a request holds ``1 + k``
slots, one per token of the step. ``GDNAttentionMetadataBuilder.__init__`` allocates
``spec_state_indices_tensor`` once, ``(decode_cudagraph_max_bs, 1 + k)`` with
``decode_cudagraph_max_bs = min(max_num_seqs * (1 + k), max_cudagraph_capture_size)``; each step
``build`` copies the step's rows into it (padded rows: ``NULL_BLOCK_ID``, 0) where a full graph
replays the step, or hands the block table's rows to the kernel eagerly.

The recurrent kernel (``fused_recurrent_gated_delta_rule_fwd_kernel``) starts a row's recurrence
from the state of the last accepted token: it loads ``i_t = num_accepted_tokens[row] - 1`` and
reads ``ssm_state_indices[row * (1 + k) + i_t]``, unbounded. A row with 0 accepted tokens reads
index -1 of its row: the previous row's last slot (another request's state for its last draft),
or, for the first row, the int32 before the buffer. Nothing raises: the row's state is silently
taken from another request, then written into its own slots; a value read from before the buffer
that names a slot past the state pool is an illegal memory access (the crash of issue 40756).
The clamp of PR 48475 bounds the column at 0.

The model runner counts a row's accepted tokens as its sampled tokens that are not -1
(``(output_token_ids != -1).sum(dim=1)``): a row whose sampled tokens were all discarded counts 0.
Which releases bound the index is read from each release's kernel (``recurrent_state``, in the
engine process); the buffer's shape is the one the release's own builder allocates for the launch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from workbench.backends.case_backend import (
    BackendCase,
    BoolArray,
    CaseBackend,
    CaseSeed,
    IntArray,
    choice_field,
    int_field,
    int_list_field,
    reject_unknown,
)
from workbench.model.outcome import Outcome, ProbeResult, invalid

NAME = "vllm-gdn-state-indices"
LAUNCH_NAME = "gdn-spec-state-indices"  # a launch of a GDN hybrid model with speculative decoding sets it up
INDEX_FORMS = ("unbounded", "clamped")  # the kernel's state column: num_accepted - 1, or bounded at 0
PATHS = ("graph", "eager")  # the builder's persistent buffer (full graph), or the block table's rows
NULL_BLOCK_ID = 0  # vLLM's padding of a row the step does not use: the kernel skips a row whose slot is <= 0
BEFORE = 0x5EED  # what the int32 before the buffer holds here: another allocation's bytes in a real run
MAX_ROWS = 1 << 16


@dataclass(frozen=True, kw_only=True)
class StateCase(BackendCase):
    """One speculative step of a GDN layer: the buffer, the step's rows and their accepted counts."""

    rows: int  # the buffer's rows (the builder's decode_cudagraph_max_bs)
    drafts: int  # k: the buffer has 1 + k columns
    accepted: tuple[int, ...]  # each speculative row's accepted tokens of the previous step, 0 to 1 + k
    index: str  # the release's kernel: "unbounded" or "clamped"
    path: str  # "graph" or "eager"


SEED_48475 = CaseSeed(
    name="vllm-pr-48475-zero-accepted",
    story="vLLM 0.25.1, Qwen3.6-27B (hybrid GDN) with MTP 6 and max_num_seqs 4: two concurrent requests, "
          "the second arriving with 0 accepted tokens, reads the first request's state slot",
    failing={"component": NAME, "rows": 28, "drafts": 6, "accepted": [3, 0], "index": "unbounded", "path": "graph"},
    expected_error=("silent over-read: row 1 (0 accepted tokens) reads spec_state_indices_tensor[0][6] (state slot 7, "
                    "request 0's slot for its last draft) as its own state; the kernel carries that state into row 1's "
                    "slots"),
    passing=(
        {"component": NAME, "rows": 28, "drafts": 6, "accepted": [3, 1], "index": "unbounded", "path": "graph"},
        {"component": NAME, "rows": 28, "drafts": 6, "accepted": [3, 0], "index": "clamped", "path": "graph"},
    ),
)


def slot_of(row: int, column: int, drafts: int) -> int:
    """The state slot this model gives a live row's column: distinct and above NULL_BLOCK_ID."""
    return 1 + row * (1 + drafts) + column


def read_column(accepted: int, index: str) -> int:
    """The column of its row the kernel reads a row's starting state from."""
    column = accepted - 1
    return max(column, 0) if index == "clamped" else column


def starting_slots(case: StateCase, device: torch.device | str = "cpu") -> list[int]:
    """The slot each row of the step starts its recurrence from: the buffer laid out as ``build``
    fills it (live rows ``slot_of``, padded rows ``NULL_BLOCK_ID``) inside memory holding ``BEFORE``,
    read at the kernel's flat index ``row * (1 + k) + column`` (conformance compares it with the
    release's kernel run under Triton's interpreter, ``engines/vllm/gdn_kernel.py``)."""
    width, live = 1 + case.drafts, len(case.accepted)
    rows = case.rows if case.path == "graph" else live
    memory = torch.full((width + rows * width + width,), BEFORE, dtype=torch.int32, device=device)
    buffer = memory[width:width + rows * width].view(rows, width)
    filled = torch.tensor([[slot_of(r, c, case.drafts) for c in range(width)] for r in range(live)],
                          dtype=torch.int32, device=device)
    buffer[:live].copy_(filled)
    buffer[live:].fill_(NULL_BLOCK_ID)
    flat = memory.cpu()
    return [int(flat[width + row * width + read_column(count, case.index)]) for row, count in enumerate(case.accepted)]


class GdnStateIndicesBackend(CaseBackend[StateCase]):
    name = NAME
    engine = "vllm"
    device_family = "cuda"
    buffer_name = "spec_state_indices_tensor"
    fields = frozenset({"component", "rows", "drafts", "accepted", "index", "path"})
    scan_field = "accepted"
    scan_label = "accepted_tokens"  # the last row's accepted tokens
    scan_is_request_length = False  # a step's accepted counts, not a request's length
    atlas_mode = "target-verify"
    step_state = True
    width_unit = "slots"  # a row's state slots, one per token of the step
    launch_names = (LAUNCH_NAME,)
    eager_path = True  # eagerly the kernel reads the block table's rows the same way
    seeds = (SEED_48475,)

    def launch_case(self, engine: str, max_model_len: int, block_size: int,
                    extra: Mapping[str, object]) -> StateCase | None:
        """Two speculative rows, the second with 0 accepted tokens, in the buffer the release's own
        builder allocated for the launch; None where the builder or the kernel was not observed."""
        shape, index = extra.get("gdn_spec_state_shape"), extra.get("gdn_accepted_index")
        if not isinstance(shape, list) or len(shape) != 2 or index not in INDEX_FORMS:
            return None
        rows, columns = int(shape[0]), int(shape[1])
        return self.parse({"component": self.name, "rows": rows, "drafts": columns - 1,
                           "accepted": [min(2, columns), 0][: max(1, min(2, rows))],
                           "index": index, "path": "graph" if extra.get("graphs") else "eager"})

    def launch_gap(self, engine: str, extra: Mapping[str, object]) -> str:
        return (f"{engine}: the GDN metadata builder's buffer ({extra.get('gdn_spec_state_shape')}) or its kernel's "
                f"read ({extra.get('gdn_accepted_index')}) was not observed")

    def conditions(self, case: StateCase, first_failing: int) -> tuple[str, ...]:
        return ("a speculative row with 0 accepted tokens in a step (the model runner counts a row's sampled tokens "
                "that are not -1: a row whose sampled tokens were all discarded, as after a batch-composition change "
                "under asynchronous scheduling, vLLM issue 40756 and PR 48475)",)

    def parse(self, data: Mapping[str, object], *, boundary: bool = False) -> StateCase:
        reject_unknown(data, self.fields)
        drafts = int_field(data, "drafts", low=1, high=64)
        return StateCase(
            component=str(data["component"]), rows=int_field(data, "rows", high=MAX_ROWS), drafts=drafts,
            accepted=int_list_field(data, "accepted"), index=choice_field(data, "index", INDEX_FORMS),
            path=choice_field(data, "path", PATHS, "graph"),
        )

    def case_problem(self, case: StateCase) -> str | None:
        for count in case.accepted:
            if not 0 <= count <= 1 + case.drafts:
                return f"accepted: {count} is out of range (allowed: 0 to 1 + drafts = {1 + case.drafts})"
        if case.path == "graph" and len(case.accepted) > case.rows:  # build hands such a batch the eager path
            return f"accepted: {len(case.accepted)} rows do not fit the buffer's {case.rows} (the step runs eagerly)"
        return None

    def probe(self, case: StateCase, device: torch.device | str = "cpu") -> ProbeResult:
        """The step's rows written into the buffer inside memory that holds ``BEFORE`` around it, then
        the kernel's read of each row's starting slot; the first read outside its own row is the failure."""
        problem = self.case_problem(case)
        if problem:
            return invalid(problem)
        where, width, live = str(torch.device(device)), 1 + case.drafts, len(case.accepted)
        slots = starting_slots(case, device)
        for row, count in enumerate(case.accepted):
            if read_column(count, case.index) >= 0:
                continue
            if row == 0:
                error = (f"silent over-read: row 0 (0 accepted tokens) reads the int32 before {self.buffer_name} "
                         f"(here {slots[0]}) as its state slot; a value naming a slot past the state pool is an "
                         "illegal memory access")
            else:
                error = (f"silent over-read: row {row} (0 accepted tokens) reads {self.buffer_name}[{row - 1}][{width - 1}] "
                         f"(state slot {slots[row]}, request {row - 1}'s slot for its last draft) as its own state; the "
                         f"kernel carries that state into row {row}'s slots")
            return ProbeResult(Outcome.SILENT_OVERREAD, error, buffer_width=width, reads=live, device=where, path=case.path)
        return ProbeResult(Outcome.OK, None, buffer_width=width, reads=live, device=where, path=case.path)

    def at(self, case: StateCase, value: int) -> StateCase:
        return StateCase(component=case.component, rows=case.rows, drafts=case.drafts,
                         accepted=(*case.accepted[:-1], value), index=case.index, path=case.path)

    def scan_range(self, case: StateCase) -> tuple[int, int]:
        """Every accepted count a row can carry."""
        return 0, 1 + case.drafts

    def fails_grid(self, case: StateCase, values: IntArray) -> BoolArray:
        """Closed form: an unbounded kernel fails on a row with 0 accepted tokens, wherever it sits (the
        scanned last row, or one before it, whatever the last row carries)."""
        if case.index == "clamped":
            return np.zeros(len(values), dtype=bool)
        if 0 in case.accepted[:-1]:
            return np.ones(len(values), dtype=bool)
        return np.asarray(values == 0, dtype=bool)


BACKEND = GdnStateIndicesBackend()
