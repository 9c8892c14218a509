"""Run SGLang's own page-table builders (Triton, under the interpreter) against the workbench's replays.

For XPU, TRT-LLM MHA (graph and eager), FlashMLA, TRT-LLM MLA and AITER: the engine's kernel fills a
table through a view of the first ``rows`` rows of a buffer one row taller (so a store past the
last row lands where it can be seen, not in foreign memory), the backend's ``replay`` fills a
table of the same shape, and the two must be equal entry for entry, spill included.

Usage (nothing is installed into the project's environment):

    pip install --no-deps --target ~/.cache/workbench/triton triton
    unzip -q sglang-0.5.23-*.whl 'sglang/kernels/*' -d /tmp/sg
    .venv/bin/python scripts/check_sglang_page_builders.py --src /tmp/sg [--triton ~/.cache/workbench/triton]

Prints one line per case and exits 0 when all agree, 1 on a disagreement, 77 when Triton or the
engine's source is not there (the reason is printed).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

SKIP = 77
KERNELS = "sglang/kernels/ops/attention"


def _load(src: Path, name: str) -> ModuleType:
    """One kernel file as a module of its own: the engine's package __init__ files are never run."""
    path = src / KERNELS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"sglang_kernel_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=os.environ.get("WORKBENCH_SGLANG_SRC"),
                        help="the unpacked wheel (the folder holding sglang/)")
    parser.add_argument("--triton", type=Path, default=Path.home() / ".cache/workbench/triton",
                        help="a folder triton was installed into with pip --target")
    args = parser.parse_args(argv)
    if args.src is None or not (args.src / KERNELS / "metadata.py").exists():
        print(f"skip: no SGLang kernel source under {args.src} (give --src, the unpacked wheel)")
        return SKIP
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: kernels run as numpy on the CPU
    if args.triton.exists():
        sys.path.insert(0, str(args.triton))
    try:
        import triton  # noqa: F401
    except ImportError as err:
        print(f"skip: triton cannot be imported ({err}); install it with pip --target {args.triton}")
        return SKIP
    return _check(args.src)


def _check(src: Path) -> int:
    import torch
    import triton

    from workbench.backends import backend_of
    from workbench.backends.page_writes import PagedTable
    from workbench.model.cases import TableCase
    from workbench.model.geometry import Mode, ServingGeometry, cdiv

    metadata = _load(src, "metadata")
    mha_table = _load(src, "trtllm_mha_page_table")
    mha_graph = _load(src, "trtllm_mha_graph_metadata")
    kv_indices = _load(src, "kv_indices")
    aiter = _load(src, "aiter_unified_page_table")

    def engine_fill(kernel: str, table: torch.Tensor, req_to_token: torch.Tensor, seq_lens: list[int], delta: int,
                    ps: int) -> None:
        bs, width = table.shape
        rows = torch.arange(1, bs + 1, dtype=torch.int64)
        lens = torch.tensor(seq_lens, dtype=torch.int64)
        cache = torch.zeros(bs, dtype=torch.int32)
        cu_k = torch.zeros(bs + 1, dtype=torch.int32)
        if kernel == "xpu":  # xpu_backend.py:1867: max_seq_pages from the batch's max
            metadata.normal_decode_set_metadata(
                cache_seqlens_int32=cache, cu_seqlens_k=cu_k, page_table=table, req_to_token=req_to_token,
                req_pool_indices=rows, max_seq_pages=cdiv(max(seq_lens) + delta, ps), seq_lens=lens,
                seq_len_delta=delta, page_size=ps)
        elif kernel == "trtllm-mha-graph":  # trtllm_mha_backend.py:1013: max_seq_pages = max_num_pages
            mha_graph.update_trtllm_mha_graph_metadata(
                req_pool_indices=rows, seq_lens=lens, req_to_token=req_to_token, cache_seqlens=cache,
                cu_seqlens_k=cu_k, page_table=table, bs=bs, seqlen_offset=delta, max_seq_pages=width, page_size=ps)
        elif kernel == "trtllm-mha-eager":  # _fill_page_table_device with cache_seqlens = s + delta
            mha_table.build_trtllm_mha_page_table(
                req_to_token=req_to_token, req_pool_indices=rows, cache_seqlens=(lens + delta).to(torch.int32),
                page_table=table, page_size=ps)
        elif kernel == "aiter":  # _build_verify_unified_metadata: programs of 1024 pages over the width
            grid = (bs, triton.cdiv(max(width, 1), 1024))
            aiter.scatter_req_to_token_to_page_table_kernel[grid](
                req_to_token, rows, lens, table, req_to_token.stride(0), table.stride(0), None, None,
                DRAFT_NUM=delta, PAGE_SIZE=ps, BLOCK_SIZE=1024, HAS_SWA=False)
        else:  # flashmla / trtllm-mla: create_flashmla_kv_indices_triton over the row stride's programs
            grid = (bs, kv_indices.get_num_kv_index_blocks_flashmla(table.stride(0), ps))
            kv_indices.create_flashmla_kv_indices_triton[grid](
                req_to_token, rows, lens + delta, None, table, req_to_token.stride(0), table.stride(0), PAGED_SIZE=ps)

    cases = [  # kernel, component, path, page size, width, committed lengths, delta (D of a verify)
        ("xpu", "sglang-xpu-page-table", "graph", 16, 4, [62, 20], 4),  # engines.md: 66 tokens, a fifth page
        ("xpu", "sglang-xpu-page-table", "graph", 1, 8, [10, 3, 8], 2),
        ("trtllm-mha-graph", "sglang-trtllm-mha-page-table", "graph", 16, 4, [62, 20], 4),
        ("trtllm-mha-eager", "sglang-trtllm-mha-page-table", "eager", 16, 4, [62, 20], 4),
        ("trtllm-mha-eager", "sglang-trtllm-mha-page-table", "eager", 1024, 4, [4100, 5], 4),  # grid = width
        ("trtllm-mha-eager", "sglang-trtllm-mha-page-table", "eager", 1024, 3, [3100, 5], 4),
        ("flashmla", "sglang-flashmla-page-table", "graph", 64, 3, [190, 70], 4),
        ("flashmla", "sglang-trtllm-mla-page-table", "graph", 64, 64, [4094, 70], 4),
        ("aiter", "sglang-aiter-page-table", "graph", 16, 4, [62, 20], 4),
        ("aiter", "sglang-aiter-page-table", "graph", 1, 1024, [1022, 5], 4),  # grid = width: no spill
    ]
    failures = 0
    for kernel, component, path, ps, width, seq_lens, delta in cases:
        bs = len(seq_lens)
        columns = max((width + 2) * ps, max(seq_lens) + delta)
        req_to_token = torch.zeros((bs + 1, columns), dtype=torch.int32)
        for r in range(1, bs + 1):  # request r holds pages 10 r, 10 r + 1, ...: slot = page * ps + offset
            req_to_token[r] = torch.arange(columns, dtype=torch.int32) + 10 * r * columns
        backing = torch.full((bs + 1, width), -7, dtype=torch.int32)
        engine_fill(kernel, backing[:bs], req_to_token, seq_lens, delta, ps)

        ours = PagedTable.of_width(width, ps, rows=bs + 1, fill=-7)
        g = ServingGeometry(context_len=width * ps, page_size=ps, draft_tokens=delta)
        case = TableCase(component=component, geometry=g, rule="context", mode=Mode.TARGET_VERIFY,
                         seq_lens=tuple(seq_lens), options=(("path", path),) if path != "graph" else ())
        overwrite = backend_of(component).replay(ours, req_to_token, range(1, bs + 1), seq_lens, case, num_slots=0)
        same = torch.equal(backing, ours.page_table)
        failures += not same
        print(f"{'ok' if same else 'DIFFER'}  {kernel:17} ps {ps:4} B {width:3} s {seq_lens} +{delta}: "
              f"overwrite {overwrite}")
        if not same:
            print(f"  engine    {backing.tolist()}\n  workbench {ours.page_table.tolist()}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
