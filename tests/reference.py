"""Independent plain-Python statements of the formulas of docs/semantics.md, for expected values in tests.

Nothing here imports the code under test: each function is that page's arithmetic written out
again, in loops, so that a mistake in the library cannot also be a mistake in the expectation.
"""

from __future__ import annotations


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def request_table_width(ctx: int, ps: int, d: int, steps: int = 1, topk: int = 1, draft_kv: bool = True,
                        gen: str = "g1") -> int:
    extra = 4 + d if d else 4
    if d and ps > 1 and gen != "g1":
        if ps == 1 or topk == 1 or not draft_kv:
            per_decode = max(steps * topk, d)
        else:
            per_decode = max(ceil_div(ps - 1 + steps, ps) * ps * topk, d)
        reserve = 2 * per_decode
        if gen == "g2" and topk > 1:
            extra = max(extra, reserve)
        if gen == "g3":
            extra = max(extra, reserve + ps - 1)
    return ctx + extra


def npu_width_pages(rule: str, ctx: int, ps: int, d: int, w: int) -> int:
    if rule == "context-floor":  # sglang 0.5.4.post1 ascend_backend.py:113-120: max_context_len // page_size
        return ctx // ps
    if rule == "context":
        return ceil_div(ctx, ps)
    fixed = (ctx + ps - 1 + d) // ps
    return fixed if rule == "context-plus-draft" else max(fixed, ceil_div(w, ps))


def dsa_width_tokens(rule: str, ctx: int, d: int, w: int) -> int:
    return {"context": ctx, "context-plus-draft": ctx + d, "req-to-token": w}[rule]


def alloc_decode(ps: int, seq_lens: list[int], last_loc: list[int], free_pages: list[int],
                 gather: str) -> tuple[str, list[int] | None, list[int]]:
    """(outcome, out_cache_loc, free_pages_after) by docs/semantics.md#the-paged-allocator, row by row."""
    opens = [s % ps == 1 % ps for s in seq_lens]
    n_new = sum(opens)
    if gather != "cuda-masked" and n_new > len(free_pages):
        return "out-of-memory", None, free_pages
    out: list[int] = []
    taken = 0
    for row in range(len(seq_lens)):
        start = sum(opens[:row])  # exclusive prefix count of page-opening rows
        if gather == "npu-legacy" and n_new and start >= len(free_pages):
            return "index-error", None, free_pages  # every row gathers, even rows opening no page
        if opens[row]:
            if start >= len(free_pages):
                return "silent-overread", None, free_pages  # cuda-masked: read, then check
            out.append(free_pages[start] * ps)
            taken += 1
        else:
            out.append(last_loc[row] + 1)
    return "ok", out, free_pages[taken:]


def alloc_extend(ps: int, prefix: int, seq: int, last_loc: int, free_pages: list[int]) -> list[int]:
    """Slots for positions prefix..seq-1 of one request: old page first, then fresh pages."""
    out = []
    new_page_index = 0
    for pos in range(prefix, seq):
        if pos < ceil_div(prefix, ps) * ps:
            out.append(last_loc + 1 + pos - prefix)
        else:
            if pos % ps == 0:
                new_page_index += 1
            out.append(free_pages[new_page_index - 1] * ps + pos % ps)
    return out


def copy_error(dst_cols: int, src_cols: int, rows: int) -> str:
    """torch's text for ``dst.copy_(src)`` when only the column counts differ."""
    if dst_cols == 1:  # a one-column destination could broadcast; torch words it differently
        return f"output with shape [{rows}, 1] doesn't match the broadcast shape [{rows}, {src_cols}]"
    return f"The size of tensor a ({dst_cols}) must match the size of tensor b ({src_cols}) at non-singleton dimension 1"


def predict_table_probe(component: str, rule: str, ctx: int, ps: int, d: int, w: int, mode: str, seq_lens: list[int],
                        step_id: int = 0, replay: str = "dynamic", accept_len: int = 1) -> tuple[str, str | None]:
    """(outcome, message) of one valid table step, from the replay pseudocode of docs/semantics.md#replays."""
    bs = len(seq_lens)
    if component == "npu-block-table":
        look = {"target-verify": d, "draft-decode": step_id + 1}.get(mode, 0)
        b = npu_width_pages(rule, ctx, ps, d, w)
        pages = ceil_div(max(seq_lens) + look, ps)
        src = ceil_div(min(max(seq_lens) + look, w), ps)
        dst = min(pages, b)
        if dst != src:
            return "shape-error", copy_error(dst, src, bs)
        for i, s in enumerate(seq_lens):
            if ceil_div(s + look, ps) > b:
                message = f"silent over-read: request {i} reads {s + look} tokens but its block_tables row covers {b * ps}"
                return "silent-overread", message
        return "ok", None
    look = d if mode == "target-verify" else 0
    b = dsa_width_tokens(rule, ctx, d, w)
    rows = bs * {"target-verify": d, "draft-extend": accept_len}.get(mode, 1)
    lk = b if replay == "static" else max(seq_lens) + look
    dst, src = min(lk, b), min(lk, w)
    if dst != src:
        return "shape-error", copy_error(dst, src, rows)
    for i, s in enumerate(seq_lens):
        if s + look > b:
            return "silent-overread", f"silent over-read: request {i} reads {s + look} tokens but its page_table row covers {b}"
    return "ok", None
