"""Run vLLM's own functions from an unpacked wheel, on a CPU, in this (separate) process.

Usage: ``python vllm_released.py ROOT [TRITON_DIR]`` reads a JSON list of checks (``{"check": NAME, ...}``) on
stdin and prints a JSON list of their results. ``ROOT`` holds the unpacked ``vllm/`` files (only
those the checks read, unzipped from the cached wheel by the test).

Only the modules named in ``REAL`` run as vLLM ships them; every other ``vllm.*`` module, and every
module that cannot be found (triton, vllm_flash_attn, ...), is a permissive stand-in, so importing
one file does not import the engine. A few stand-ins get real values (``OVERRIDES``): the
context-parallel size, a ``CpuGpuBuffer`` that holds a CPU tensor. vLLM is never installed.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import json
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REAL = {
    "vllm.utils.math_utils",
    "vllm.v1.worker.block_table",
    "vllm.v1.kv_cache_interface",
    "vllm.v1.attention.backends.mla.indexer",
    "vllm.attention.backends.flash_attn",
    "vllm.attention.backends.flashinfer",
    "vllm.attention.backends.utils",
    "vllm.attention.backends.xformers",
}


class _AnyBase:
    """What a class that subclasses a stand-in inherits from: accepts anything."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __init_subclass__(cls, **kwargs: object) -> None:
        pass

    def __class_getitem__(cls, item: object) -> type:
        return cls

    def __getattr__(self, name: str) -> Any:  # methods a stand-in base would have had
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Any()


class _Any:
    """A stand-in value: callable, subscriptable, subclassable; a decorator returns what it decorates."""

    def __call__(self, *args: object, **kwargs: object) -> object:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return _Any()

    def __getattr__(self, name: str) -> _Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Any()

    def __getitem__(self, item: object) -> _Any:
        return _Any()

    def __mro_entries__(self, bases: tuple[object, ...]) -> tuple[type, ...]:
        return (type("_AnyBaseOf", (_AnyBase,), {}),)  # a fresh one: a class may list two stand-ins

    def __or__(self, other: object) -> _Any:
        return _Any()

    __ror__ = __or__

    def __bool__(self) -> bool:
        return False

    def __iter__(self) -> Any:
        return iter(())


class _StandIn(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Any()


class _CpuGpuBuffer:
    """``vllm.v1.utils.CpuGpuBuffer`` on the CPU only: the block table keeps its tensor in ``.cpu``."""

    def __init__(self, *size: int, dtype: Any = None, device: Any = None, pin_memory: bool = False,
                 with_numpy: bool = True) -> None:
        import torch

        self.cpu = torch.zeros(*size, dtype=dtype)
        self.gpu = self.cpu
        self.np = self.cpu.numpy() if with_numpy else None


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stand-ins for ``vllm.*`` modules not in REAL, and for any module nothing else finds."""

    def __init__(self, root: Path, overrides: dict[str, dict[str, object]], last: bool) -> None:
        self.root, self.overrides, self.last = root, overrides, last

    def find_spec(self, name: str, path: Sequence[str] | None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        top = name.split(".")[0]
        if self.last and top in sys.stdlib_module_names:  # the standard library's own optional imports
            return None
        if self.last or (top == "vllm" and name not in REAL):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandIn(spec.name)
        folder = self.root.joinpath(*spec.name.split("."))
        module.__path__ = [str(folder)] if folder.is_dir() else []  # REAL files below it still load
        for key, value in self.overrides.get(spec.name, {}).items():
            setattr(module, key, value)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


CP_SIZE = {"dcp": 1}  # what get_total_cp_world_size answers: each check sets it


def install(root: Path, triton_dir: str | None) -> None:
    overrides: dict[str, dict[str, object]] = {
        "vllm.v1.worker.cp_utils": {"get_total_cp_world_size": lambda: CP_SIZE["dcp"]},
        "vllm.v1.utils": {"CpuGpuBuffer": _CpuGpuBuffer},
    }
    if triton_dir:  # a real triton (its own folder), run by its interpreter on CPU tensors
        sys.path.insert(0, triton_dir)
        import triton
        import triton.language as tl

        overrides["vllm.triton_utils"] = {"triton": triton, "tl": tl}
    sys.meta_path.insert(0, _Finder(root, overrides, last=False))
    sys.meta_path.append(_Finder(root, overrides, last=True))
    sys.path.insert(0, str(root))


# ---- the checks ---------------------------------------------------------------------------------


def table_width(args: dict[str, Any]) -> object:
    """``MultiGroupBlockTable``'s width for one attention group of ``block_size``.

    0.23.0 takes ``max_model_len`` and divides by the CP size itself; 0.33.0 takes the group's
    ``max_num_blocks`` from ``AttentionSpec.max_num_blocks_per_req`` (run here too).
    """
    module = importlib.import_module("vllm.v1.worker.block_table")
    names = module.MultiGroupBlockTable.__init__.__code__.co_varnames
    size, length = args["block_size"], args["max_model_len"]
    kwargs: dict[str, Any] = dict(max_num_reqs=2, max_num_batched_tokens=8, pin_memory=False, device="cpu",
                                  block_sizes=[size])
    if "max_model_len" in names:
        kwargs.update(max_model_len=length, kernel_block_sizes=[size])
    else:  # the group's blocks from the engine's AttentionSpec (dcp_sharded: divided by the DCP size)
        specs = importlib.import_module("vllm.v1.kv_cache_interface")
        spec = object.__new__(specs.AttentionSpec)
        object.__setattr__(spec, "block_size", size)
        config = types.SimpleNamespace(parallel_config=types.SimpleNamespace(decode_context_parallel_size=args["dcp"]))
        kwargs["max_num_blocks"] = [spec.max_num_blocks_per_req(config, length)]
    table = module.MultiGroupBlockTable(**kwargs)
    return table.block_tables[0].max_num_blocks_per_req


def indexer_variable(args: dict[str, Any]) -> object:
    """``_prepare_decode_tensors`` on its variable-length path, with the buffer and table given."""
    import torch

    module = importlib.import_module("vllm.v1.attention.backends.mla.indexer")
    builder = object.__new__(module.DeepseekV32IndexerMetadataBuilder)
    lens = args["decode_lens"]
    tokens = sum(lens)
    builder.expanded_block_table_buffer = torch.zeros((tokens, args["buffer_width"]), dtype=torch.int32)
    builder.decode_seq_lens_buffer = torch.zeros(tokens, dtype=torch.int32)
    builder.decode_lens_buffer = torch.zeros(tokens, dtype=torch.int32)
    builder.arange_buffer = torch.arange(tokens, dtype=torch.int32)
    table = torch.arange(1, len(lens) * args["table_width"] + 1, dtype=torch.int32).view(len(lens), -1)
    decode_lens = torch.tensor(lens, dtype=torch.int32)
    seq_lens = torch.full((len(lens),), 1000, dtype=torch.int32)
    query_start_loc = torch.cumsum(decode_lens, 0) - decode_lens
    try:
        builder._prepare_decode_tensors(seq_lens, table, decode_lens, decode_lens, query_start_loc, len(lens),
                                        tokens, False, max(lens), max(lens))
    except TypeError:  # 0.33.0 passes more arguments: its parameters by name
        return {"signature": str(module.DeepseekV32IndexerMetadataBuilder._prepare_decode_tensors.__code__.co_varnames)}
    except RuntimeError as err:
        return {"error": str(err)}
    return {"error": None, "rows": builder.expanded_block_table_buffer.tolist()}


def indexer_uniform(args: dict[str, Any]) -> object:
    """``_prepare_uniform_decode_kernel`` (0.23.0) itself, by triton's interpreter: the buffer it fills."""
    import torch

    module = importlib.import_module("vllm.v1.attention.backends.mla.indexer")
    requests, next_n = args["requests"], args["next_n"]
    tokens = requests * next_n
    table = torch.arange(1, (requests + 1) * args["table_width"] + 1, dtype=torch.int32).view(requests + 1, -1)
    buffer = torch.zeros((tokens, args["buffer_width"]), dtype=torch.int32)
    seq_lens = torch.full((requests,), 1000, dtype=torch.int32)
    module._prepare_uniform_decode_kernel[(tokens,)](
        seq_lens, torch.zeros(tokens, dtype=torch.int32), table, table.stride(0), buffer, buffer.stride(0),
        torch.zeros(tokens, dtype=torch.int32), next_n, BLOCK_SIZE=1024)
    return buffer.tolist()


def v0_graph_rows(args: dict[str, Any]) -> object:
    """A V0 metadata builder's ``build`` on a decode batch that replays the captured graph."""
    import numpy as np

    module = importlib.import_module(args["module"])
    builder = object.__new__(getattr(module, args["builder"]))
    width = args["graph_width"]
    runner = types.SimpleNamespace(graph_block_tables=np.zeros((len(args["block_tables"]), width), dtype=np.int32),
                                   device="cpu")
    builder.runner = runner
    builder.input_builder = types.SimpleNamespace(inter_data_list=[], chunked_prefill_enabled=False)
    builder.prefill_seq_lens, builder.curr_seq_lens = [], list(args["seq_lens"])
    builder.num_decode_tokens = len(args["seq_lens"])
    builder.num_prefills = builder.num_prefill_tokens = 0
    builder.slot_mapping, builder.block_tables = [], [list(b) for b in args["block_tables"]]
    builder.context_lens, builder.query_start_loc = [], []
    error = None
    try:
        builder.build(list(args["seq_lens"]), [1] * len(args["seq_lens"]), 0, len(args["seq_lens"]))
    except ValueError as err:
        error = str(err)
    except Exception as err:  # past the row writes, the stand-ins end the build: the rows are what it wrote
        error = f"after the rows: {type(err).__name__}"
    return {"error": error, "rows": runner.graph_block_tables.tolist()}


CHECKS: dict[str, Callable[[dict[str, Any]], object]] = {
    "table-width": table_width, "indexer-variable": indexer_variable, "indexer-uniform": indexer_uniform,
    "v0-graph-rows": v0_graph_rows,
}

def run(requests: list[dict[str, Any]]) -> list[object]:
    results = []
    for request in requests:
        CP_SIZE["dcp"] = int(request.get("dcp", 1))
        results.append(CHECKS[request["check"]](request))
    return results


if __name__ == "__main__":
    install(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
    print(json.dumps(run(json.load(sys.stdin))))
