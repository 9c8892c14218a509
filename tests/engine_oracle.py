"""The engine's own answer for launch commands, computed without the workbench's adapter: an oracle.

Run as ``python tests/engine_oracle.py`` with one JSON object on stdin:
``{"engine": "sglang==0.5.23", "package_dir": ..., "deps": ..., "gpu": {...Gpu...}, "hf_cache": DIR,
"cases": [{"argv": [...], "env": {...}, "names": [...]}]}``. It loads the release from the wheel
cache the way conformance does (the accelerator libraries and the GPU stood in), then for each
case, in a forked child so that cases do not see each other: builds the release's parser
(``ServerArgs.add_cli_args`` on ``argparse.ArgumentParser``), and either prints the parser's
error, or calls ``prepare_server_args`` and ``resolve_once`` (where the release has it) and the
release's ``ModelConfig``, and prints the resolved values asked for (or the exception's text).

The tests compare ``workbench check`` with this: none of the adapter's code (its parser reuse,
its tracing, its process) is on this path.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle_cases import answer_each  # noqa: E402 - beside this file


def _plain(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)


def _case(case: dict[str, Any], hf_cache: str) -> dict[str, Any]:
    os.environ.update(case.get("env", {}))
    os.environ.update({"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": hf_cache})
    import huggingface_hub.constants as constants

    constants.HF_HUB_CACHE, constants.HF_HUB_OFFLINE = hf_cache, True
    import sglang.srt.server_args as server_args_module

    parser = argparse.ArgumentParser(prog="sglang serve")
    server_args_module.ServerArgs.add_cli_args(parser)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parser.parse_args(case["argv"])
    except SystemExit:
        return {"parser_error": stderr.getvalue().strip().splitlines()[-1].split("error: ", 1)[1]}
    try:
        server_args = server_args_module.prepare_server_args(case["argv"])
        if hasattr(server_args, "resolve_once"):
            server_args.resolve_once()
        if hasattr(server_args_module, "model_config_of"):
            model_config = server_args_module.model_config_of(server_args)
        else:
            from sglang.srt.configs.model_config import ModelConfig

            model_config = ModelConfig.from_server_args(server_args)
    except Exception as error:  # noqa: BLE001 - the engine's own message is the answer
        return {"error": str(error), "type": type(error).__name__}
    resolved = server_args.resolved_dict() if hasattr(server_args, "resolved_dict") else vars(server_args)
    out = {name: _plain(resolved.get(name)) for name in case["names"]}
    out["context_len"] = model_config.context_len
    return out


def main() -> int:
    job = json.loads(sys.stdin.read())
    from workbench.engines.checking import checks
    from workbench.engines.commands.adapters import gpu_from_json
    from workbench.engines.sandbox import platform_standins, standins

    platform_standins.install(gpu_from_json(job["gpu"]))
    checks.settle_torch_without_triton()
    standins.install(Path(job["package_dir"]), Path(job["deps"]))
    answer_each(job["cases"], lambda case: _case(case, job["hf_cache"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
