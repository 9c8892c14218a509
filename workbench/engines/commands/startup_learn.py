"""Which of the atlas's settings a release starts with, asked of its own start-up checks.

A setting the engine refuses at start-up is not a deployment: a failure the atlas finds there is
no finding. Whether a release starts a setting is decided by its own resolution (``ServerArgs``
and the hooks it runs), not by the workbench: ``learn(engine)`` launches one probe command per
backend, speculative recipe and page size the atlas runs, in the release's engine process
(``launch_service``) on the GPU the backend's platform stands for (``data/repro.json``:
``launch.gpu``; TRT-LLM starts only on Blackwell, AITER only on ROCm), and records the answer in
the release's learned file, section ``startup``:

    {"settings": {"value": {"sglang-fa3-page-table": {"NGRAM-16-1-10": {"64": "refused: ..."}}},
                  "how": "measured", "function": "...", "states": 180}, ...}

each cell ``"accepted"`` or ``"refused: <the engine's message> (<its function>)"``. The probe model
is the Llama-shaped config of ``launch_learn`` (the refusals it finds are about the recipe, the
page size, the backend and the GPU, not the model's weights). ``startup_section.refusal(engine,
backend, recipe, page_size)`` reads it back for the atlas, whose rows for a refused setting say ``refused`` with the
message; a release without the section has no setting refused.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from workbench.engines.commands import launch_service
from workbench.engines.commands.adapters import REJECTED, RESOLVED, LaunchRequest
from workbench.engines.commands.launch_learn import PROBE_MODEL
from workbench.engines.commands.launch_service import STDERR, Stderr, progress_stream
from workbench.engines.store import gpus, learned, wheels
from workbench.engines.store.startup_section import SECTION, recipe_key
from workbench.model.geometry import ServingGeometry

FUNCTION = "prepare_server_args + the release's resolution (its start-up checks)"


def _recipe_flags(g: ServingGeometry, model: str) -> list[str]:
    if g.draft_tokens == 0:
        return []
    if not g.draft_has_kv:
        return ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(g.draft_tokens),
                "--speculative-ngram-max-bfs-breadth", str(g.spec_topk)]
    return ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", model, "--speculative-num-steps",
            str(g.spec_steps), "--speculative-eagle-topk", str(g.spec_topk), "--speculative-num-draft-tokens",
            str(g.draft_tokens)]


def probes() -> Iterator[tuple[str, dict[str, Any], ServingGeometry]]:
    """(backend label, its launch entry, a geometry) for every backend, recipe and page size the
    atlas runs whose launch the repro data describes (an attention backend and a GPU)."""
    from workbench import backends
    from workbench.atlas.pooled import PAGE_SIZES as POOLED_PAGE_SIZES
    from workbench.atlas.rows import configurations
    from workbench.repro.conditions import backend_entry

    seen: set[tuple[str, str, int]] = set()
    pooled = set(_pooled_settings(POOLED_PAGE_SIZES))
    # every setting, those a release refused when last asked too (asked again, the answer may change)
    table = {(backends.backend_of(c.backend).name, c.setting.geometry) for c in configurations(with_refused=True)}
    for label, g in sorted(table | pooled, key=lambda item: (item[0], recipe_key(item[1]), item[1].page_size)):
        try:
            launch = backend_entry(label).get("launch", {})
        except ValueError:  # no launch data for it (its findings are not reproduced yet): not asked
            continue
        if not isinstance(launch, dict) or "attention_backend" not in launch or "gpu" not in launch:
            continue
        key = (label, recipe_key(g), g.page_size)
        if key not in seen:
            seen.add(key)
            yield label, launch, g


def _pooled_settings(page_sizes: tuple[int, ...]) -> Iterator[tuple[str, ServingGeometry]]:
    from workbench import backends
    from workbench.analysis.memory import load_presets
    from workbench.atlas.rows import settings

    for backend in backends.POOLED_BACKENDS:
        for setting in settings(page_sizes, "g1", load_presets()):
            yield backend.name, setting.geometry


def learn(engine: str, *, write: bool = True, progress: IO[str] | None | Stderr = STDERR) -> dict[str, Any]:
    """Ask ``engine``'s start-up checks about every atlas setting; write its ``startup`` section."""
    progress = progress_stream(progress)
    install = wheels.fetch(engine)
    folder = probe_model_folder()
    found: dict[str, dict[str, dict[str, str]]] = {}
    asked = 0
    used_gpus: set[str] = set()
    try:
        for label, launch, g in probes():
            used_gpus.add(str(launch["gpu"]))
            said = ask(install, folder, launch, g, progress)
            asked += 1
            found.setdefault(label, {}).setdefault(recipe_key(g), {})[str(g.page_size)] = said
    finally:
        for name in used_gpus:
            launch_service.stop(install.engine, name)
        shutil.rmtree(folder.parent, ignore_errors=True)
    section = {
        "settings": {"value": found, "how": "measured", "function": FUNCTION, "states": asked},
        "probe_model": {"value": PROBE_MODEL, "how": "read", "source": "workbench/engines/commands/launch_learn.py",
                        "reason": "a Llama-shaped config of the workbench's, in a local directory"},
    }
    if write:
        learned.write_section(engine, SECTION, section)
    return section


def ask(install: wheels.EngineInstall, model: Path, launch: dict[str, Any], g: ServingGeometry,
        progress: IO[str] | None = None) -> str:
    """The release's answer to one probe: ``accepted``, ``refused: ...`` or ``unknown: ...``."""
    argv = ["--model-path", str(model), *[str(x) for x in launch.get("device_flags", [])],
            "--attention-backend", str(launch["attention_backend"]), "--page-size", str(g.page_size),
            *_recipe_flags(g, str(model))]
    request = LaunchRequest(install.engine, "learn", tuple(argv), {}, gpus.gpu(str(launch["gpu"])))
    return _said(launch_service.resolve(request, install, owner=True, progress=progress))


def probe_model_folder() -> Path:
    """A fresh folder holding the probe model's config.json (the caller removes its parent)."""
    folder = Path(tempfile.mkdtemp(prefix="workbench-startup-")) / "llama-8b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(PROBE_MODEL))
    return folder


def _said(answer: Any) -> str:
    if answer.status == RESOLVED:
        return "accepted"
    message = " ".join(answer.message.split())[:240]
    if answer.status == REJECTED:
        return f"refused: {message} ({answer.rejected_by})"
    return f"unknown: {message}"
