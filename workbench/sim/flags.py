"""The flags of ``workbench simulate``. Declared apart from ``workload.py`` (which turns them into a
``Simulation``) so the command line builds its parser without importing torch or the backends."""

from __future__ import annotations

import argparse


def add_simulate_flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--rule", default="context,req-to-token", help="sizing rules, comma separated (default: context,req-to-token)")
    add("--gather", help="alloc_decode gathers, comma separated (default: the exact-fit seed's fixed gather)")
    add("--context-len", type=int, required=True)
    add("--page-size", type=int, default=1)
    add("--draft-tokens", type=int, default=0, help="D; 0 = no speculation (decode steps)")
    add("--spec-steps", type=int, default=1)
    add("--spec-topk", type=int, default=1)
    add("--no-draft-kv", dest="draft_has_kv", action="store_false", help="the drafter keeps no KV cache (NGRAM)")
    add("--width-gen", default="g1")
    add("--max-bs", type=int, default=4, help="captured max batch = most running requests (default 4)")
    add("--num-pages", type=int, help="KV pool pages (default: max_bs requests of the full table width)")
    add("--requests", type=int, default=4, help="requests per run (default 4)")
    add("--prompt-len", default="64", help="N or LOW:HIGH (uniform)")
    add("--output-len", default="64", help="N or LOW:HIGH (uniform)")
    add("--trace", metavar="FILE", help="requests from CSV or JSON lines (prompt_len, output_len)")
    add("--acceptance", default="fixed:1", help="fixed:K, geometric:RATE or trace:K1,K2,...")
    add("--conservativeness", type=float, default=1.0, help="admission reserve; 0 = optimistic (default 1)")
    add("--overshoot", type=int, default=0, help="tokens a committed length may pass ctx - 1 (default 0)")
    add("--replay", default="dynamic", help="DSA replay: dynamic or static")
    add("--continue", dest="continue_past_failure", action="store_true", help="run on past a failure")
    add("--max-steps", type=int, default=20_000)
    add("--seeds", type=int, default=5, help="runs, seeded first-seed .. first-seed + N - 1 (default 5)")
    add("--first-seed", type=int, default=0)
    add("--out", help="write the per-run summary: .json or .parquet")
