"""What a vLLM release resolves for commands, with the workbench's Ray stand-in or with the real Ray.

Run as ``python tests/ray_probe.py`` with one JSON object on stdin: ``{"engine": "vllm==0.11.0",
"ray": "stand-in" | "real", "hf_cache": DIR, "commands": [[argv...], ...]}``. Loads the release
through its launch adapter as an engine process does (``vllm_loader``, which registers
``ray_standin``); with ``"ray": "real"`` the stand-in's finder is taken off ``sys.meta_path``
before anything imports Ray, so the release imports the Ray installed here. Prints one JSON line
per command: its status, the engine's message, and the executor backend the release chose
(``parallel_config.distributed_executor_backend``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    job = json.loads(sys.stdin.readline())
    from workbench.engines.commands.adapters import LaunchRequest, adapter
    from workbench.engines.sandbox import standins
    from workbench.engines.store import gpus, wheels
    from workbench.engines.vllm import ray_standin

    install = wheels.cached(job["engine"])
    assert install is not None, f"{job['engine']} is not in the workbench's engine cache"
    gpu = gpus.gpu("h100")
    engine_adapter = adapter("vllm")
    engine_adapter.install(install.package_dir, install.deps, [], gpu)
    if job["ray"] == "real":
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, ray_standin.Finder)]
    engine_adapter.load(gpu)
    for argv in job["commands"]:
        request = LaunchRequest(job["engine"], "vllm serve", tuple(argv), {}, gpu, lookup_env={"HF_HUB_CACHE": job["hf_cache"]})
        resolution = engine_adapter.resolve(request)
        backend = resolution.settings.get("parallel_config.distributed_executor_backend")
        ray = sys.modules.get("ray")
        print(json.dumps({"status": resolution.status, "message": resolution.message.splitlines()[0] if resolution.message else "",
                          "rejected_by": resolution.rejected_by, "backend": backend.value if backend else None,
                          "ray": "stand-in" if isinstance(ray, standins.StandInModule) else type(ray).__name__}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
