"""The start-up decisions older SGLang releases make in the model runner, not in ``ServerArgs``.

Up to about 0.5.2 the attention backend is picked by ``ModelRunner.model_specific_adjustment``
and the CUDA-graph batch sizes by the graph runner's ``get_batch_sizes_to_capture``, both after
the arguments are resolved, on the runner. Both are run here, as the release's own functions, on
a *runner stand-in*: an object carrying the few fields the runner's ``__init__`` sets before
calling them (the model config, the speculative algorithm, the page size, whether the model
takes the MLA backend), each as that ``__init__`` computes it (``RUNNER_FIELDS``, with the line it
is set at). Anything else the functions read is missing, which fails the function: the setting
is then not decided, and the check says which function could not run.

Releases that decide these values in ``ServerArgs`` (every one where ``attention_backend`` and
``cuda_graph_max_bs`` come out set) skip this stage.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from workbench.engines.commands.adapter_common import one_line, short_path
from workbench.engines.commands.adapters import ENGINE, Setting

# The runner fields the two functions read, as ModelRunner.__init__ sets them from its arguments.
RUNNER_FIELDS = ("server_args", "model_config", "tp_size", "page_size", "spec_algorithm", "use_mla_backend",
                 "is_multimodal", "is_multimodal_chunked_prefill_supported", "mem_fraction_static", "req_to_token_pool")
# Requests the runner's request pool holds: the largest graph batch the engine would keep. Only a
# pool smaller than the largest batch (--max-running-requests) changes the batches.
POOL_WITHOUT_LIMIT = 4096


class RunnerStandIn(SimpleNamespace):
    """The runner's fields the functions read; reading any other is an AttributeError naming it."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"the runner stand-in has no {name!r} (the function needs the running engine)")


def _field_lines(runner_file: Path, package_dir: Path) -> str:
    """``model_runner.py:191-202``: where ``__init__`` sets the stand-in's fields."""
    text = runner_file.read_text(errors="replace").splitlines()
    lines = [n for n, line in enumerate(text, 1)
             if re.match(r"\s+self\.(use_mla_backend|spec_algorithm|page_size|is_multimodal)\s*=", line)]
    span = f"{min(lines)}-{max(lines)}" if lines else "?"
    return f"{short_path(str(runner_file), package_dir)}:{span}"


def _runner(server_args: Any, model_config: Any) -> RunnerStandIn:
    attention = importlib.import_module("sglang.srt.configs.model_config").AttentionArch
    spec = importlib.import_module("sglang.srt.speculative.spec_info").SpeculativeAlgorithm
    pool = server_args.max_running_requests or POOL_WITHOUT_LIMIT
    return RunnerStandIn(
        server_args=server_args, model_config=model_config, tp_size=server_args.tp_size, page_size=server_args.page_size,
        spec_algorithm=spec.from_string(server_args.speculative_algorithm),
        use_mla_backend=model_config.attention_arch == attention.MLA, is_multimodal=model_config.is_multimodal,
        is_multimodal_chunked_prefill_supported=model_config.is_multimodal_chunked_prefill_supported,
        mem_fraction_static=server_args.mem_fraction_static, req_to_token_pool=SimpleNamespace(size=pool),
    )


def _site(function: Any, package_dir: Path) -> str:
    code = function.__code__
    return f"{function.__qualname__} ({short_path(code.co_filename, package_dir)}:{code.co_firstlineno})"


def run_runner_stage(server_args: Any, resolved: dict[str, Any], model_config: Any, package_dir: Path
                     ) -> tuple[dict[str, Setting], list[str]]:
    """Run the runner's decisions where the resolution (``resolved``: its values) left them open:
    the settings they gave (``cuda_graph_max_bs``; the attention backend is written on
    ``server_args`` itself, and seen there) and notes for what could not run."""
    settings: dict[str, Setting] = {}
    notes: list[str] = []
    needs_backend = "attention_backend" in resolved and resolved["attention_backend"] is None
    needs_batches = ("cuda_graph_max_bs" in resolved and resolved["cuda_graph_max_bs"] is None
                     and "cuda_graph_config" not in resolved and not resolved.get("disable_cuda_graph"))
    if not (needs_backend or needs_batches):
        return settings, notes
    try:
        runner_module = importlib.import_module("sglang.srt.model_executor.model_runner")
        runner = _runner(server_args, model_config)
    except BaseException as error:  # noqa: BLE001 - the runner's module needs the device: say so
        return settings, [f"the model runner's start-up decisions could not run: {one_line(error)}"]
    where = f"on a runner stand-in with ModelRunner.__init__'s fields ({_field_lines(Path(str(runner_module.__file__)), package_dir)})"
    adjust: Any = getattr(runner_module.ModelRunner, "model_specific_adjustment", None)
    if needs_backend and adjust is None:
        notes.append("the attention backend is left open and ModelRunner has no model_specific_adjustment")
    elif needs_backend:
        try:
            adjust(runner)
        except BaseException as error:  # noqa: BLE001
            notes.append(f"{_site(adjust, package_dir)} could not run {where}: {one_line(error)}")
    if needs_batches:
        try:
            graphs = importlib.import_module("sglang.srt.model_executor.cuda_graph_runner")
            capture = graphs.get_batch_sizes_to_capture
            found = capture(runner)
            batches = found[0] if isinstance(found, tuple) else found
            settings["cuda_graph_max_bs"] = Setting(
                max(batches), ENGINE, f"{_site(capture, package_dir)}, max of the batches it captures, {where}; the request "
                f"pool holds {runner.req_to_token_pool.size} requests (--max-running-requests, else the workbench's "
                "assumption: more than the largest batch)")
        except BaseException as error:  # noqa: BLE001
            notes.append(f"get_batch_sizes_to_capture could not run {where}: {one_line(error)}")
    return settings, notes
