"""vllm-ascend: the block table an ACL graph's draft steps read (vllm-ascend
issue 9098, the reset of PR 10117; docs/engine-facts.md#vllm-ascend-block-table).

Read from the vllm-ascend source at commit 182b75e (August 2026; there is no wheel on the package
index, only an sdist that builds against CANN):

* ``worker/model_runner_v1.py`` 4498-4513: each attention group's table is
  ``cdiv(max_model_len, block_size * dcp)`` blocks wide: no alignment, and no room for draft
  tokens (the KV manager caps a request's slots at ``max_model_len``).
* ``spec_decode/llm_base_proposer.py`` 968 and 1598-1634: after the first draft forward, each of
  the ``k - 1`` further draft steps adds 1 to every ``seq_len`` and replays the graph, whose
  captured block table is updated in place. Since PR 10117 a ``seq_len`` past ``max_model_len``
  is set to 1 (``masked_fill_(seq_lens > max_model_len, 1)``), so the attention kernel reads one
  block. Without that reset (the state of the 9098 report) the kernel reads
  ``cdiv(seq_len, block_size * dcp)`` blocks through a row that holds fewer: it reads past the
  row, into the next request's, and nothing raises.

Worked example: ``max_model_len`` 32768, block size 128: rows of 256 blocks (32768 tokens). With
k = 3 draft tokens, a request entering the drafter at ``seq_len`` 32767 reaches 32769 at draft
step 2: 257 blocks, one past the row. With the reset it attends 1 token.

Release by release: a case that names ``engine`` (``vllm-ascend==0.23.0``) takes the drafter its
release has, read from its code by ``workbench engines learn vllm-ascend==X`` (the drafter cannot
run on a CPU: ``vllm_ascend.learn``); a ``drafter`` the case gives itself wins. Not modelled: the
guards between (#2708 masked by position, #9221 skipped the drafter when ``max_seq_len + k``
passed the drafter's length).

In a launch check (``launch_case``): a vLLM command on an NPU is resolved by vLLM with the
vllm-ascend plugin's platform loaded (its release of the same version), which gives the block size
and the speculative settings; a drafter of k >= 2 model steps sets up ``draft-steps``, and the row
is this drafter's last step, under the plugin release's learned drafter.
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
from workbench.engines.store import vllm_releases
from workbench.model.geometry import cdiv
from workbench.model.outcome import Outcome, ProbeResult, invalid

NAME = "vllm-ascend-block-table"
DRAFTERS = ("reset", "no-reset")  # since PR 10117; the 9098 report's drafter
RESET_SEQ_LEN = 1  # what PR 10117 sets a seq_len past max_model_len to
MAX_MODEL_LEN = 1 << 24  # rows past 16M tokens: no model serves them


@dataclass(frozen=True, kw_only=True)
class AscendDraftCase(BackendCase):
    """One draft step of the multi-step drafter, replayed through the ACL graph."""

    max_model_len: int
    block_size: int
    dcp: int = 1
    num_speculative_tokens: int  # k: the drafter runs k - 1 steps after its first forward
    draft_step: int | None = None  # 1 .. k - 1; None: the last, which reads the most
    seq_lens: tuple[int, ...]  # committed lengths entering the drafter (each <= max_model_len)
    drafter: str = "reset"
    engine: str = ""  # the vllm-ascend release whose drafter this is ("": the drafter given)

    @property
    def step(self) -> int:
        return self.num_speculative_tokens - 1 if self.draft_step is None else self.draft_step

    @property
    def width(self) -> int:
        """Blocks per row: ``cdiv(max_model_len, block_size * dcp)``, unaligned."""
        return cdiv(self.max_model_len, self.block_size * self.dcp)

    def step_seq_len(self, seq_len: int) -> int:
        """The ``seq_len`` draft step ``step`` attends: one more per step, reset past the model length."""
        advanced = seq_len + self.step
        return RESET_SEQ_LEN if self.drafter == "reset" and advanced > self.max_model_len else advanced


def drafters() -> dict[str, str]:
    """The drafter of every learned vllm-ascend release (``reset`` or ``no-reset``), by release."""
    found = vllm_releases.learned_facts(NAME, "vllm-ascend")
    return {engine: str(facts["drafter"]["value"]) for engine, facts in found.items()
            if facts.get("drafter", {}).get("value") in DRAFTERS}


def _release_drafter(data: Mapping[str, object]) -> str:
    """The drafter of the case's ``engine`` (the default ``reset`` without one)."""
    if "engine" not in data:
        return "reset"
    return drafters()[choice_field(data, "engine", tuple(drafters()))]


SEED_9098 = CaseSeed(
    name="vllm-ascend-9098",
    story="a draft step advances seq_len past max_model_len: the kernel reads one block past the row",
    failing={"component": NAME, "drafter": "no-reset", "max_model_len": 32768, "block_size": 128,
             "num_speculative_tokens": 3, "seq_lens": [32767]},
    expected_error="silent over-read: request 0 reads 257 blocks but its block_table row holds 256",
    passing=({"component": NAME, "drafter": "reset", "max_model_len": 32768, "block_size": 128,
              "num_speculative_tokens": 3, "seq_lens": [32767]},),
)


class AscendBlockTableBackend(CaseBackend[AscendDraftCase]):
    name = NAME
    engine = "vllm-ascend"
    device_family = "ascend-npu"
    buffer_name = "block_table"
    fields = frozenset({"component", "max_model_len", "block_size", "dcp", "num_speculative_tokens", "draft_step",
                        "seq_lens", "drafter", "engine"})
    scan_field = "seq_lens"
    atlas_mode = "draft-decode"  # the drafter's step reads one block past the row (9098)
    scan_label = "seq_len"  # the search runs one request
    seeds = (SEED_9098,)
    boundary_rejects = ("seq_lens",)
    launch_names = ("draft-steps",)  # a launch whose drafter runs k - 1 steps (preflight's resolve_vllm)

    def launch_case(self, engine: str, max_model_len: int, block_size: int,
                    extra: Mapping[str, object]) -> AscendDraftCase | None:
        """The drafter's last step (it reads the most) for a launch the vllm-ascend plugin's platform
        resolved (``extra["platform_plugin"]``: ``vllm-ascend==X``, whose learned drafter it takes);
        None when that release's drafter was never learned or has no multi-step drafter."""
        plugin = str(extra.get("platform_plugin") or "")
        k = int(str(extra.get("num_speculative_tokens") or 0))
        if plugin not in drafters() or k < 2:
            return None
        return self.parse({"component": self.name, "engine": plugin, "max_model_len": max_model_len,
                           "block_size": block_size, "dcp": int(str(extra.get("dcp_size", 1))),
                           "num_speculative_tokens": k, "seq_lens": [1]})

    def release_cases(self) -> tuple[dict[str, object], ...]:
        """9098's deployment under each learned vllm-ascend release, its drafter the release's own."""
        failing = {k: v for k, v in SEED_9098.failing.items() if k != "drafter"}
        return tuple({**failing, "engine": engine} for engine in drafters())

    def parse(self, data: Mapping[str, object], *, boundary: bool = False) -> AscendDraftCase:
        reject_unknown(data, self.fields)
        length = int_field(data, "max_model_len", high=MAX_MODEL_LEN)
        return AscendDraftCase(
            component=str(data["component"]), max_model_len=length, block_size=int_field(data, "block_size"),
            dcp=int_field(data, "dcp", 1), num_speculative_tokens=int_field(data, "num_speculative_tokens", low=2),
            draft_step=int_field(data, "draft_step") if "draft_step" in data else None,
            seq_lens=(1,) if boundary else int_list_field(data, "seq_lens"),  # a boundary sets its own
            drafter=choice_field(data, "drafter", DRAFTERS, _release_drafter(data)),
            engine=str(data.get("engine", "")) if "drafter" not in data else "",
        )

    def case_problem(self, case: AscendDraftCase) -> str | None:
        if not 1 <= case.step < case.num_speculative_tokens:
            return f"draft_step: {case.step} is out of range (allowed: 1 to {case.num_speculative_tokens - 1})"
        for s in case.seq_lens:
            if not 1 <= s <= case.max_model_len:
                return f"seq_lens: {s} is out of range (allowed: 1 to max_model_len {case.max_model_len})"
        return None

    def probe(self, case: AscendDraftCase, device: torch.device | str = "cpu") -> ProbeResult:
        problem = self.case_problem(case)
        if problem:
            return invalid(problem)
        span = case.block_size * case.dcp  # tokens per block on one DCP rank
        width, bs = case.width, len(case.seq_lens)
        # Blocks the KV manager gave each request: its slots are capped at max_model_len, so <= width.
        held = [cdiv(min(s + case.step, case.max_model_len), span) for s in case.seq_lens]
        table = torch.zeros((bs, width), dtype=torch.int32, device=device)  # (bs, width): the captured table
        ids = torch.arange(1, bs * width + 1, dtype=torch.int32, device=device).view(bs, width)
        for row, blocks in enumerate(held):  # the in-place update before the graph replay
            table[row, :blocks].copy_(ids[row, :blocks])
        tokens = [case.step_seq_len(s) for s in case.seq_lens]  # what the attention kernel attends
        reads = [cdiv(t, span) for t in tokens]  # blocks it follows through the row
        seen = [table[row, :n].numel() for row, n in enumerate(reads)]  # slicing clamps at the row's end
        # One table: no second width to set beside it (table_width stays None).
        done = ProbeResult(Outcome.OK, None, buffer_width=width, reads=max(tokens), device=str(torch.device(device)))
        for row, (n, got) in enumerate(zip(reads, seen)):
            if got < n:
                message = f"silent over-read: request {row} reads {n} blocks but its block_table row holds {got}"
                return ProbeResult(Outcome.SILENT_OVERREAD, message, buffer_width=width, reads=max(tokens),
                                   device=done.device)
        return done

    def at(self, case: AscendDraftCase, value: int) -> AscendDraftCase:
        return AscendDraftCase(component=case.component, max_model_len=case.max_model_len, block_size=case.block_size,
                               dcp=case.dcp, num_speculative_tokens=case.num_speculative_tokens,
                               draft_step=case.draft_step, seq_lens=(value,), drafter=case.drafter, engine=case.engine)

    def scan_range(self, case: AscendDraftCase) -> tuple[int, int]:
        """Every committed length the drafter can start from."""
        return 1, case.max_model_len

    def fails_grid(self, case: AscendDraftCase, values: IntArray) -> BoolArray:
        """Closed form: without the reset, a step fails once ``cdiv(s + step, span)`` passes the
        width, i.e. from ``s = width * span - step + 1``; with it, the advanced lengths that pass
        ``max_model_len`` read one block and the others fit, so it never fails."""
        if case.drafter == "reset":
            return np.zeros(len(values), dtype=bool)
        span = case.block_size * case.dcp
        return np.asarray((values + case.step + span - 1) // span > case.width, dtype=bool)


BACKEND = AscendBlockTableBackend()
