"""vLLM's own answer for launch commands, computed without the workbench's adapter: an oracle.

Run as ``python tests/engine_oracle_vllm.py`` with one JSON object on stdin:
``{"engine": "vllm==0.34.0", "package_dir": ..., "deps": ..., "gpu": {...Gpu...}, "hf_cache": DIR,
"cases": [{"program": ..., "argv": [...], "env": {...}}]}`` (``argv``: the words after the program,
``vllm serve`` or ``python -m vllm.entrypoints.openai.api_server``). It loads the
release from the wheel cache as conformance does (``vllm_loader``: the GPU and the accelerator
libraries stood in, the model registry's subprocess run in process), then for each case, in a
forked child: runs the release's own console entry point ``vllm.entrypoints.cli.main.main`` on
``vllm serve ARGV`` (its parser, its serve subcommand's ``validate``), with the serve subcommand's
``cmd`` doing what the server does first instead of starting it: ``AsyncEngineArgs.from_cli_args``
and ``create_engine_config``; the api_server module runs as ``__main__``, and its ``uvloop.run``
hands over the parsed arguments instead of serving. It prints the parser's error, or the exception's text, or ``ok``.

None of the adapter's code (its parser tracing, its process, its message handling) is on this path.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import json
import os
import runpy
import sys
import types
import warnings
from pathlib import Path
from typing import Any

API_SERVER = "python -m vllm.entrypoints.openai.api_server"

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle_cases import answer_each  # noqa: E402 - beside this file


def _create_config(args: Any) -> None:
    """What ``vllm serve`` does with the parsed arguments before any device work."""
    if getattr(args, "model_tag", None) is not None:
        args.model = args.model_tag
    arg_utils = importlib.import_module("vllm.engine.arg_utils")
    engine_args = arg_utils.AsyncEngineArgs.from_cli_args(args)
    extra = {}
    if "usage_context" in inspect.signature(engine_args.create_engine_config).parameters:
        extra["usage_context"] = importlib.import_module("vllm.usage.usage_lib").UsageContext.OPENAI_API_SERVER
    engine_args.create_engine_config(**extra)


def _server_started(server: Any) -> None:
    """``uvloop.run(run_server(args))``, the api_server module's last step: its arguments, configured."""
    args = server.cr_frame.f_locals["args"]  # bound when the coroutine was made; it never runs
    server.close()
    _create_config(args)


def _run(program: str, argv: list[str]) -> None:
    """The program as its console entry runs it: ``vllm serve`` through the CLI's ``main``, the
    deprecated ``python -m vllm.entrypoints.openai.api_server`` as that module's ``__main__``."""
    if program == API_SERVER:
        sys.modules["uvloop"] = types.SimpleNamespace(run=_server_started)  # type: ignore[assignment]
        sys.argv = ["api_server.py", *argv]
        runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=False)
        return
    serve = importlib.import_module("vllm.entrypoints.cli.serve")
    serve.ServeSubcommand.cmd = staticmethod(_create_config)
    sys.argv = ["vllm", "serve", *argv]
    importlib.import_module("vllm.entrypoints.cli.main").main()


def _case(case: dict[str, Any], hf_cache: str) -> dict[str, Any]:
    from workbench.engines.sandbox.model_lookup import apply_hub_env

    os.environ.update(case.get("env", {}))
    apply_hub_env({"HF_HUB_CACHE": os.path.abspath(hf_cache)})  # offline, the test data's cache (read at import)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _run(case.get("program", "vllm serve"), case["argv"])
    except SystemExit:
        said = [line for line in stderr.getvalue().splitlines() if "error: " in line]
        return {"parser_error": said[-1].split("error: ", 1)[1] if said else stderr.getvalue().strip()}
    except Exception as error:  # noqa: BLE001 - the engine's own message is the answer
        return {"error": str(error), "type": type(error).__name__}
    return {"ok": True}


def main() -> int:
    job = json.loads(sys.stdin.read())
    from workbench.engines.commands.adapters import gpu_from_json
    from workbench.engines.vllm import loader as vllm_loader

    vllm_loader.install(Path(job["package_dir"]), Path(job["deps"]), gpu_from_json(job["gpu"]))
    vllm_loader.model_inspection_in_process()
    answer_each(job["cases"], lambda case: _case(case, job["hf_cache"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
