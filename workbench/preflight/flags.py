"""The engines' own flag names, and reading their values out of a launch command.

Each engine's table lists the flags a check uses (with the value's kind and allowed range) and
the common flags it accepts but does not need (``--host``, ``--tp-size`` ...). An unknown flag is
bad input, reported with the nearest known one, unless the user allows unknown flags; then it is
skipped with its value (the next token, when that is not itself a flag).

Names are the engines' (SGLang ``srt/arg_groups/fields/*.py``; vLLM ``engine/arg_utils.py``).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from workbench.model.geometry import MAX_CONTEXT_LEN, MAX_DRAFT_TOKENS, MAX_GRAPH_BATCH, MAX_PAGE_SIZE, MAX_SPEC_STEPS, MAX_SPEC_TOPK


class PreflightError(ValueError):
    """Input a check cannot run: one line naming the flag and what is allowed (exit status 2)."""


@dataclass(frozen=True)
class Flag:
    """One flag a check reads: its engine names, where its value goes, its kind and range."""

    names: tuple[str, ...]  # the first is the engine's own spelling; the rest are aliases
    dest: str
    kind: str  # "int", "float", "str", "choice", "json", "bool"
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    fold_case: bool = False  # the engine upper-cases the value (--speculative-algorithm)

    def parse(self, flag: str, text: str) -> object:
        if self.kind == "int":
            return self._in_range(flag, _human_int(flag, text, self._allowed()))
        if self.kind == "float":
            try:
                value = float(text)
            except ValueError:
                raise PreflightError(f"{flag}: {text!r} is not a number (allowed: {self._allowed()})") from None
            return self._in_range(flag, value)
        if self.kind == "choice":
            wanted = text.upper() if self.fold_case else text
            if wanted not in self.choices:
                raise PreflightError(f"{flag}: {text!r} is not one of {', '.join(self.choices)}")
            return wanted
        if self.kind == "json":
            try:
                return json.loads(text)
            except json.JSONDecodeError as err:
                raise PreflightError(f"{flag}: not valid JSON ({err.msg} at character {err.pos}); "
                                     "write it as one quoted JSON object") from None
        return text

    def _allowed(self) -> str:
        low = int(self.low) if self.kind == "int" and self.low is not None else self.low
        high = int(self.high) if self.kind == "int" and self.high is not None else self.high
        if high is None:
            return f"{low} or more"
        return f"{low} to {high}"

    def _in_range(self, flag: str, value: float) -> float:
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            shown = int(value) if self.kind == "int" else value
            raise PreflightError(f"{flag}: {shown} is out of range (allowed: {self._allowed()})")
        return value


_SUFFIXES = {"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def _human_int(flag: str, text: str, allowed: str) -> int:
    """An integer as both engines read lengths: ``32768``, ``350k``, ``1M``, ``128Ki``."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|k|K|M|G)?", text.strip())
    if not match:
        raise PreflightError(f"{flag}: {text!r} is not an integer (allowed: {allowed}; suffixes k, M, Ki, Mi)")
    number, suffix = match.groups()
    if suffix is None:
        if "." in number:
            raise PreflightError(f"{flag}: {text!r} is not an integer (allowed: {allowed})")
        return int(number)
    value = float(number) * _SUFFIXES[suffix]
    if value != int(value):
        raise PreflightError(f"{flag}: {text!r} is not a whole number of tokens (allowed: {allowed})")
    return int(value)


# ---- the engines' tables --------------------------------------------------------------------------

SGLANG_ATTENTION_BACKENDS = (  # srt/arg_groups/choices.py:69-100 (0.5.23)
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3", "fa4", "flashinfer",
    "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla", "trtllm_mha", "hpc_ops",
    "minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx", "ascend", "intel_xpu",
)
SGLANG_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")  # fields/spec.py:31-34
SGLANG_DEVICES = ("cuda", "xpu", "hpu", "npu", "cpu", "musa")  # fields/device.py:24-27

SGLANG_FLAGS = (
    Flag(("--model-path", "--model"), "model_path", "str"),
    Flag(("--context-length",), "context_length", "int", 1, MAX_CONTEXT_LEN),
    Flag(("--page-size",), "page_size", "int", 1, MAX_PAGE_SIZE),
    Flag(("--attention-backend",), "attention_backend", "choice", choices=SGLANG_ATTENTION_BACKENDS),
    Flag(("--decode-attention-backend",), "decode_attention_backend", "choice", choices=SGLANG_ATTENTION_BACKENDS),
    Flag(("--prefill-attention-backend",), "prefill_attention_backend", "choice", choices=SGLANG_ATTENTION_BACKENDS),
    Flag(("--speculative-algorithm",), "speculative_algorithm", "choice", choices=SGLANG_ALGORITHMS, fold_case=True),
    Flag(("--speculative-num-steps",), "speculative_num_steps", "int", 1, MAX_SPEC_STEPS),
    Flag(("--speculative-eagle-topk",), "speculative_eagle_topk", "int", 1, MAX_SPEC_TOPK),
    Flag(("--speculative-num-draft-tokens",), "speculative_num_draft_tokens", "int", 1, MAX_DRAFT_TOKENS),
    Flag(("--speculative-ngram-max-bfs-breadth",), "speculative_ngram_max_bfs_breadth", "int", 1, MAX_SPEC_TOPK),
    Flag(("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"), "cuda_graph_max_bs", "int", 1, MAX_GRAPH_BATCH),
    Flag(("--schedule-conservativeness",), "schedule_conservativeness", "float", 0.0, None),
    Flag(("--device",), "device", "choice", choices=SGLANG_DEVICES),
    Flag(("--disable-cuda-graph",), "disable_cuda_graph", "bool"),
    # What the reach and the KV pool depend on (the scheduler's loop order; the pool's size)
    Flag(("--disable-overlap-schedule",), "disable_overlap_schedule", "bool"),
    Flag(("--max-total-tokens",), "max_total_tokens", "int", 1, 1 << 40),
    Flag(("--mem-fraction-static",), "mem_fraction_static", "float", 0.0, 1.0),
    Flag(("--tp-size", "--tp"), "tp_size", "int", 1, 1024),
)
SGLANG_IGNORED_VALUE = (
    "--dp-size", "--dp", "--ep-size", "--pp-size", "--host", "--port",
    "--max-running-requests", "--chunked-prefill-size", "--served-model-name", "--dtype",
    "--kv-cache-dtype", "--quantization", "--speculative-draft-model-path", "--speculative-draft-model",
    "--speculative-draft-model-revision", "--speculative-draft-attention-backend", "--log-level", "--tokenizer-path",
    "--revision", "--nnodes", "--node-rank", "--dist-init-addr", "--reasoning-parser", "--tool-call-parser",
    "--load-format", "--cuda-graph-bs", "--watchdog-timeout", "--api-key", "--json-model-override-args", "--nccl-port",
    "--base-gpu-id", "--moe-runner-backend", "--moe-a2a-backend", "--max-prefill-tokens", "--stream-interval",
    "--random-seed", "--config",
)
SGLANG_IGNORED_BOOL = (
    "--trust-remote-code", "--disable-radix-cache", "--enable-metrics", "--enable-dp-attention",
    "--enable-torch-compile", "--skip-server-warmup", "--enable-mixed-chunk",
    "--disable-custom-all-reduce", "--enable-ep-moe", "--enable-cache-report", "--disable-shared-experts-fusion",
)

VLLM_FLAGS = (
    Flag(("--model",), "model", "str"),
    Flag(("--max-model-len",), "max_model_len", "int", 1, MAX_CONTEXT_LEN),
    Flag(("--block-size",), "block_size", "int", 1, MAX_PAGE_SIZE),
    Flag(("--speculative-config", "-sc"), "speculative_config", "json"),
    Flag(("--max-num-seqs",), "max_num_seqs", "int", 1, MAX_GRAPH_BATCH),
    Flag(("--max-num-batched-tokens",), "max_num_batched_tokens", "int", 1, 1 << 22),
    Flag(("--decode-context-parallel-size", "-dcp"), "decode_context_parallel_size", "int", 1, 64),
    Flag(("--tensor-parallel-size", "-tp"), "tensor_parallel_size", "int", 1, 1024),
    Flag(("--enforce-eager",), "enforce_eager", "bool"),
)
VLLM_IGNORED_VALUE = (
    "--host", "--port", "--gpu-memory-utilization", "--dtype", "--kv-cache-dtype", "--quantization", "-q",
    "--served-model-name", "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp", "--tokenizer", "--revision",
    "--api-key", "--reasoning-parser", "--tool-call-parser", "--load-format", "--seed", "--swap-space",
    "--compilation-config", "-O", "--hf-overrides", "--max-num-partial-prefills", "--download-dir", "--uvicorn-log-level",
    "--attention-backend", "--kv-transfer-config", "--chat-template",
)
VLLM_IGNORED_BOOL = (
    "--trust-remote-code", "--enable-expert-parallel", "--enable-prefix-caching", "--no-enable-prefix-caching",
    "--enable-chunked-prefill", "--disable-log-requests", "--enable-auto-tool-choice", "--disable-log-stats",
)
# Keys of --speculative-config (vllm/config/speculative.py:75-260, the fields of SpeculativeConfig).
VLLM_SPECULATIVE_KEYS = (
    "method", "num_speculative_tokens", "model", "draft_tensor_parallel_size", "tensor_parallel_size", "quantization",
    "moe_backend", "attention_backend", "max_model_len", "revision", "code_revision", "disable_padded_drafter_batch",
    "use_local_argmax_reduction", "prompt_lookup_max", "prompt_lookup_min", "parallel_drafting", "enforce_eager",
    "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob", "rejection_sample_method", "synthetic_acceptance_rates",
    "synthetic_acceptance_length", "draft_sample_method",
)


# workbench check's own options: written after "--" they are a misplaced option, not an engine flag
CHECK_OPTIONS = ("--engine", "--json", "--model-config", "--allow-unknown", "--overshoot", "--gpu", "--cmd", "--from-file")


@dataclass(frozen=True)
class FlagTable:
    engine: str  # "sglang" or "vllm"
    flags: tuple[Flag, ...]
    ignored_value: tuple[str, ...]
    ignored_bool: tuple[str, ...]

    def lookup(self, name: str) -> Flag | None:
        return next((f for f in self.flags if name in f.names), None)

    def known(self) -> list[str]:
        return [n for f in self.flags for n in f.names] + list(self.ignored_value) + list(self.ignored_bool)


TABLES = {
    "sglang": FlagTable("sglang", SGLANG_FLAGS, SGLANG_IGNORED_VALUE, SGLANG_IGNORED_BOOL),
    "vllm": FlagTable("vllm", VLLM_FLAGS, VLLM_IGNORED_VALUE, VLLM_IGNORED_BOOL),
}


@dataclass(frozen=True)
class ParsedFlags:
    values: Mapping[str, object]  # dest -> value, for the flags a check uses
    spelled: Mapping[str, str]  # dest -> the flag as the command wrote it
    ignored: tuple[str, ...]  # known flags a check does not need
    unknown: tuple[str, ...]  # unknown flags skipped (only with allow_unknown)
    positionals: tuple[str, ...]


def nearest(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.0)
    return close[0] if close else known[0]


def parse_flags(table: FlagTable, tokens: Sequence[str], *, allow_unknown: bool) -> ParsedFlags:
    """Read ``tokens`` (everything after the program) as the engine's argparse would: ``--flag value``
    or ``--flag=value``, the last of a repeated flag winning."""
    values: dict[str, object] = {}
    spelled: dict[str, str] = {}
    ignored: list[str] = []
    unknown: list[str] = []
    positionals: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("-") or token == "-":
            positionals.append(token)
            continue
        name, has_inline, inline = token.partition("=")
        flag = table.lookup(name)
        if flag is not None and flag.kind == "bool":
            if has_inline:
                raise PreflightError(f"{name}: takes no value (it is a switch)")
            values[flag.dest], spelled[flag.dest] = True, name
            continue
        if flag is not None or name in table.ignored_value:
            if not has_inline:
                if i >= len(tokens) or (tokens[i].startswith("--") and flag is not None and flag.kind != "json"):
                    raise PreflightError(f"{name}: expects a value")
                inline, i = tokens[i], i + 1
            if flag is not None:
                values[flag.dest], spelled[flag.dest] = flag.parse(name, inline), name
            else:
                ignored.append(name)
            continue
        if name in table.ignored_bool:
            ignored.append(name)
            continue
        if name in CHECK_OPTIONS:
            raise PreflightError(f"{name}: is an option of workbench check, not of {table.engine}: put it before -- "
                                 "(workbench check [options] -- LAUNCH COMMAND)")
        if not allow_unknown:
            raise PreflightError(f"{name}: unknown {table.engine} flag (nearest: {nearest(name, table.known())}; "
                                 "--allow-unknown skips it)")
        unknown.append(name)
        if not has_inline and i < len(tokens) and not tokens[i].startswith("-"):
            i += 1  # its value, by the only rule there is without the engine's parser
    return ParsedFlags(values, spelled, tuple(ignored), tuple(unknown), tuple(positionals))
