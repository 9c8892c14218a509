"""vLLM v1: the scheduler's uniform spec-decode padding of a waiting request, against
``max_model_len`` (docs/engine-facts.md#vllm-v1-waiting-pad).

With speculative decoding, some releases pad a request that enters the running batch with one
token left to compute (a prompt sent again whose other tokens are in the prefix cache, or a
request resumed after preemption) to the batch's uniform ``1 + k`` tokens, so that the step keeps
its full CUDA graph. Prefix caching gives whole blocks of the prompt's first ``L - 1`` tokens, so a
prompt of ``L`` tokens has one token left exactly when ``L - 1`` is a multiple of the block size.

What each release's scheduler does (``waiting_pad``, measured by running its own ``Scheduler`` /
``AsyncScheduler`` on a CPU: ``workbench engines learn``, section ``pad``):

* ``unpadded``: no padding in the waiting loop (0.23.0 and before);
* ``to-limit``: pads when ``hit + 1 + k <= max_model_len`` (``hit``: the cached tokens), so the
  step may end exactly on ``max_model_len``; under asynchronous scheduling the next step is
  scheduled before this one's output stops the request, and the running loop's cap
  ``max_model_len - computed - 1`` gives it ``-1`` tokens: the model runner's ``np.repeat`` of the
  step's scheduled counts raises ``ValueError`` and the engine core dies (vLLM PRs 50342, 53812,
  53962);
* ``to-limit-clamped``: the same padding, but the next step's count is clamped to 0 (0.28.0's
  ``_reserve_prefill_lookahead`` returns ``max(n, 0)``): the request waits for its output;
* ``with-room``: pads only when the sampled token fits too (``hit + 1 + k + 1 <= max_model_len``),
  else schedules the one token unpadded (the fix of PR 53962, 0.31.0 on).

Worked example (0.25.0, ngram-gpu with 3 drafts, block size 16, ``max_model_len`` 1012): a prompt
of 1009 tokens sent again has 1008 tokens (63 blocks) cached and one left; beside a running decode
it is padded to 4 tokens, its computed tokens land on 1012, and the next step schedules
``min(4, 1012 - 1012 - 1) = -1``. A prompt of 1008 tokens has 992 cached (62 blocks) and 16
left, so it is not padded. Only ``L = max_model_len - k`` with ``L - 1`` a multiple of the block
size fails, so a deployment can fail only when ``max_model_len - k - 1`` is a multiple of its block
size (and a run meets it only when such a prompt is sent twice, or resumed after preemption).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
from workbench.model.outcome import Outcome, ProbeResult, invalid

NAME = "vllm-v1-waiting-pad"
SECTION = "pad"  # the learned section its fact lives in (its own learner: ``vllm.learn_pad``)
FORMS = ("unpadded", "to-limit", "to-limit-clamped", "with-room")
MAX_MODEL_LEN = 1 << 24


def cached_tokens(prompt_len: int, block_size: int) -> int:
    """The tokens of a prompt sent again that the prefix cache gives: whole blocks of all but its last."""
    return (prompt_len - 1) // block_size * block_size


def first_step(form: str, max_model_len: int, block_size: int, drafts: int, prompt_len: int) -> dict[str, Any]:
    """What the release's scheduler does with a prompt of ``prompt_len`` tokens sent again beside a
    running decode: ``{"scheduled": its tokens in the step that admits it (0: not admitted this
    step), "negative": whether the next step, scheduled before this one's output, gets a negative
    count}``: the model side of the ``pad`` conformance row."""
    hit = cached_tokens(prompt_len, block_size)
    left = prompt_len - hit
    padded = 1 + drafts
    if form == "unpadded" or left != 1 or drafts == 0:
        return {"scheduled": left, "negative": False}
    if form == "with-room":
        fits = hit + padded + 1 <= max_model_len
        return {"scheduled": padded if fits else 1, "negative": False}
    if hit + padded > max_model_len:  # "to-limit": it prefers not scheduling to scheduling unpadded
        return {"scheduled": 0, "negative": False}
    return {"scheduled": padded, "negative": form == "to-limit" and hit + padded == max_model_len}


def releases() -> dict[str, str]:
    """Every learned vLLM release whose ``pad`` section measured the form, oldest first."""
    found = vllm_releases.learned_facts(NAME, section_name=SECTION)
    return {engine: str(facts["waiting_pad"]["value"]) for engine, facts in found.items()
            if facts.get("waiting_pad", {}).get("value") in FORMS}


def bracketing_release(engine: str) -> str | None:
    """The measured release whose form a launch of ``engine`` takes (``vllm_releases.bracketing``)."""
    return vllm_releases.bracketing(releases(), engine)


@dataclass(frozen=True, kw_only=True)
class PadCase(BackendCase):
    """A prompt sent again (all but its last token cached) while another request decodes."""

    engine: str  # "vllm==0.25.0"
    max_model_len: int
    block_size: int
    drafts: int  # k: the speculative tokens of every decode step
    prompt_lens: tuple[int, ...]

    @property
    def form(self) -> str:
        return releases()[self.engine]


SEED_V025_PAD = CaseSeed(
    name="vllm-0.25.0-pad-to-max-model-len",
    story="vLLM 0.25.0, async scheduling, 3 drafts, block size 16, max_model_len 1012: a prompt of 1009 "
          "tokens sent again is padded onto max_model_len, and the next step schedules -1 tokens",
    failing={"component": NAME, "engine": "vllm==0.25.0", "max_model_len": 1012, "block_size": 16, "drafts": 3,
             "prompt_lens": [1009]},
    expected_error="ValueError: repeats may not contain negative values.",
    passing=(
        {"component": NAME, "engine": "vllm==0.25.0", "max_model_len": 1012, "block_size": 16, "drafts": 3,
         "prompt_lens": [1008]},
        {"component": NAME, "engine": "vllm==0.34.0", "max_model_len": 1012, "block_size": 16, "drafts": 3,
         "prompt_lens": [1009]},
    ),
)


class WaitingPadBackend(CaseBackend[PadCase]):
    name = NAME
    engine = "vllm"
    device_family = "cuda"
    buffer_name = "num_scheduled_tokens"
    fields = frozenset({"component", "engine", "max_model_len", "block_size", "drafts", "prompt_lens"})
    scan_field = "prompt_lens"
    scan_label = "prompt_len"  # the search varies the prompt sent again
    boundary_rejects = ("prompt_lens",)
    # V1 launches on a CUDA GPU with speculative decoding, asynchronous scheduling and prefix caching
    launch_names = ("v1-waiting-pad",)
    eager_path = True  # the scheduler pads, and the runner repeats a negative count, with or without graphs
    seeds = (SEED_V025_PAD,)

    def launch_case(self, engine: str, max_model_len: int, block_size: int,
                    extra: Mapping[str, object]) -> PadCase | None:
        """The launch's prompts sent again, their length searched; None where the release's
        scheduler was never run."""
        release = bracketing_release(engine)
        if release is None:
            return None
        return self.parse({"component": self.name, "engine": release, "max_model_len": max_model_len,
                           "block_size": block_size, "drafts": int(str(extra.get("num_speculative_tokens") or 0))},
                          boundary=True)

    def launch_gap(self, engine: str, extra: Mapping[str, object]) -> str:
        own = vllm_releases.learned_facts(NAME, section_name=SECTION).get(engine, {}).get("waiting_pad", {})
        if own.get("how") == "absent":  # run, but the learner's configuration did not start there
            return f"{engine}'s scheduler could not be asked ({str(own.get('reason'))[:160]})"
        return (f"{engine}'s scheduler was never run (workbench engines learn {engine}), and the measured "
                "releases on either side of it differ or are missing")

    def conditions(self, case: PadCase, first_failing: int) -> tuple[str, ...]:
        return (f"a prompt of {first_failing} tokens sent again, all but its last token in the prefix cache (or "
                "resumed after preemption), while another request decodes, under asynchronous scheduling",)

    def release_cases(self) -> tuple[dict[str, object], ...]:
        return tuple({**SEED_V025_PAD.failing, "engine": engine} for engine in releases())

    def parse(self, data: Mapping[str, object], *, boundary: bool = False) -> PadCase:
        reject_unknown(data, self.fields)
        return PadCase(
            component=str(data["component"]), engine=choice_field(data, "engine", tuple(releases())),
            max_model_len=int_field(data, "max_model_len", high=MAX_MODEL_LEN),
            block_size=int_field(data, "block_size"), drafts=int_field(data, "drafts", 0, low=0),
            prompt_lens=(1,) if boundary else int_list_field(data, "prompt_lens"),  # a boundary sets its own
        )

    def case_problem(self, case: PadCase) -> str | None:
        for length in case.prompt_lens:
            if not 1 <= length < case.max_model_len:  # the engine refuses a prompt of max_model_len tokens
                return (f"prompt_lens: {length} is out of range (allowed: 1 to max_model_len - 1 = "
                        f"{case.max_model_len - 1})")
        return None

    def probe(self, case: PadCase, device: torch.device | str = "cpu") -> ProbeResult:
        """Two steps of the scheduler per prompt (the model's counts), then what the model runner
        does with the second step's counts: ``np.repeat`` of each request's index by its count,
        with the running decode's ``1 + k`` beside it."""
        problem = self.case_problem(case)
        if problem:
            return invalid(problem)
        done = ProbeResult(Outcome.OK, None, reads=max(case.prompt_lens), device=str(torch.device(device)))
        for length in case.prompt_lens:
            step = first_step(case.form, case.max_model_len, case.block_size, case.drafts, length)
            following = -1 if step["negative"] else 1 + case.drafts
            counts = np.asarray([1 + case.drafts, following], dtype=np.int64)
            try:  # the model runner's request index of every scheduled token
                np.repeat(np.arange(len(counts)), counts)
            except ValueError as error:
                return ProbeResult(Outcome.HOST_ERROR, f"ValueError: {error}", reads=length, device=done.device)
        return done

    def at(self, case: PadCase, value: int) -> PadCase:
        return PadCase(component=case.component, engine=case.engine, max_model_len=case.max_model_len,
                       block_size=case.block_size, drafts=case.drafts, prompt_lens=(value,))

    def scan_range(self, case: PadCase) -> tuple[int, int]:
        """Every prompt length the engine admits."""
        return 1, case.max_model_len - 1

    def fails_grid(self, case: PadCase, values: IntArray) -> BoolArray:
        """Closed form: only ``to-limit`` fails, at the prompt whose padded step ends on
        ``max_model_len`` with one token left after the cache: ``L + k == max_model_len`` and
        ``L - 1`` a multiple of the block size."""
        if case.form != "to-limit" or case.drafts == 0:
            return np.zeros(len(values), dtype=bool)
        return np.asarray((values + case.drafts == case.max_model_len) & ((values - 1) % case.block_size == 0),
                          dtype=bool)


BACKEND = WaitingPadBackend()
