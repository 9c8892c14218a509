"""What each release's parser and resolution are, learned by running them: ``learn(engine)``.

For one release this starts its engine process (``launch_service``), asks what loaded and what the
parser holds, and resolves a few probe commands on a small probe model (a Llama-shaped config of
the workbench's own, given as ``--model-config``): plain, EAGLE with topk above 1, NGRAM. The
findings go into the release's learned file (``learned.write_section``), two sections:

* ``parser``: the number of options, the option strings, the aliases (several strings for one
  setting), whether abbreviations are taken, the values of each option with fixed choices: each
  a ``measured`` fact of ``add_cli_args``;
* ``launch``: whether the parser and the resolution load, the resolution functions that ran, and
  per probe what the release resolved (status, attention backend, page size, graph batch limit,
  speculative shape), or why it could not.

``table(engines)`` renders those sections as a table of releases; ``page()`` frames every listed SGLang
release's as the docs page ``docs/releases-sglang-launch-table.md``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any

from workbench.engines.commands import launch_service
from workbench.engines.commands.adapters import RESOLVED, LaunchRequest, Resolution, to_json
from workbench.engines.commands.launch_service import STDERR, Stderr, progress_stream
from workbench.engines.docs_pages import generated_page, page_path
from workbench.engines.store import gpus, learned, releases, wheels

PROBE_MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
               "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 32000,
               "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
PROBES = {  # {model}: a local directory holding PROBE_MODEL's config.json (the target and the draft)
    "plain": ["--model-path", "{model}"],
    "eagle-topk4": ["--model-path", "{model}", "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path",
                    "{model}", "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
                    "--speculative-num-draft-tokens", "8"],
    "ngram": ["--model-path", "{model}", "--speculative-algorithm", "NGRAM"],
}
PARSER_FACTS = ("options", "aliases", "abbreviations", "option_strings", "choices")  # describe_parser's facts
SHOWN = ("attention_backend", "page_size", "cuda_graph_max_bs", "speculative_num_steps", "speculative_eagle_topk",
         "speculative_num_draft_tokens", "disable_overlap_schedule")


def _measured(value: Any, function: str) -> dict[str, Any]:
    return {"value": value, "how": "measured", "function": function, "states": 1}


def _probe_result(resolution: Resolution) -> dict[str, Any]:
    if resolution.status != RESOLVED:
        return {"status": resolution.status, "message": resolution.message[:300], "by": resolution.rejected_by}
    settings = resolution.settings
    found = {name: settings[name].value for name in SHOWN if name in settings}
    decode = settings.get("cuda_graph_config")
    if "cuda_graph_max_bs" not in found and decode is not None and isinstance(decode.value, dict):
        found["cuda_graph_max_bs"] = decode.value.get("decode", {}).get("max_bs")
    origins = {name: settings[name].source for name in ("attention_backend", "cuda_graph_max_bs") if name in settings}
    return {"status": RESOLVED, "settings": found, "set_by": origins, "context_len": resolution.model.context_length
            if resolution.model else None, "notes": list(resolution.notes)}


def learn(engine: str, *, gpu_name: str = "h100", write: bool = True, progress: IO[str] | None | Stderr = STDERR) -> dict[str, Any]:
    """Learn ``engine``'s parser and resolution; write its ``parser`` and ``launch`` sections."""
    gpu = gpus.gpu(gpu_name)
    install = wheels.fetch(engine)
    report = launch_service.report(install, to_json(gpu), owner=True, progress=progress)
    loaded = report["load"]
    folder = Path(tempfile.mkdtemp(prefix="workbench-probe-")) / "llama-8b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(PROBE_MODEL))
    probes: dict[str, Any] = {}
    functions: list[str] = []
    if loaded["parser"] == "loaded":
        for name, argv in PROBES.items():
            request = LaunchRequest(engine, "learn", tuple(a.format(model=folder) for a in argv), {}, gpu)
            resolution = launch_service.resolve(request, install, owner=True, progress=progress)
            probes[name] = _probe_result(resolution)
            functions += [f for f in resolution.functions if f not in functions]
    launch_service.stop(install.engine, gpu_name)
    shutil.rmtree(folder.parent, ignore_errors=True)
    parser = report.get("parser") or {}
    function = "ServerArgs.add_cli_args on argparse.ArgumentParser"
    parser_section = ({name: _measured(parser[name], function) for name in PARSER_FACTS} if parser else
                      {"options": {"value": None, "how": "absent", "reason": loaded["parser"]}})
    launch_section = {
        "parser": _measured(loaded["parser"], "prepare_server_args"),
        "resolution": _measured(loaded["resolution"], ", ".join(loaded["functions"]) or "none"),
        "functions": _measured(functions, "the resolution of the probe commands"),
        "gpu": {"value": gpu_name, "how": "read", "source": "data/gpus.json", "reason": "the stand-in GPU the probes ran on"},
        "probe_model": {"value": PROBE_MODEL, "how": "read", "source": "workbench/engines/commands/launch_learn.py",
                        "reason": "a Llama-shaped config of the workbench's, in a local directory"},
        "probes": {name: _measured(result, "prepare_server_args + the release's resolution") for name, result in probes.items()},
        "load_seconds": _measured(loaded["seconds"], "the engine process's load"),
        "extra_paths": _measured([Path(p).name for p in report.get("extra_paths", [])],
                                 "the folders the release needed beside its own (torchvision for some pins)"),
    }
    if write:
        learned.write_section(engine, "parser", parser_section)
        learned.write_section(engine, "launch", launch_section)
    return {"parser": parser_section, "launch": launch_section}


def _cell(value: object) -> str:
    return str(value).replace("|", "/")


def table(engines: list[str]) -> str:
    """The table of releases: per release, what was loaded from it and what its probes resolved to."""
    lines = ["| release | parser options (aliases) | resolution | plain | EAGLE topk 4 | NGRAM |", "|---|---|---|---|---|---|"]
    for engine in engines:
        parser = learned.section(engine, "parser") or {}
        launch = learned.section(engine, "launch") or {}
        options = parser.get("options", {}).get("value")
        aliases = len(parser.get("aliases", {}).get("value", {}) or {})
        reason = _cell(parser.get("options", {}).get("reason"))
        shown_parser = f"{options} ({aliases})" if options is not None else f"not loaded: {reason}"
        resolution = launch.get("resolution", {}).get("value", "not learned")
        cells = []
        for name in PROBES:
            probe = launch.get("probes", {}).get(name, {}).get("value")
            if not probe:
                cells.append("-")
            elif probe["status"] != RESOLVED:
                cells.append(f"{probe['status']}: {_cell(probe['message'])[:90]}")
            else:
                s = probe["settings"]
                cells.append(f"{s.get('attention_backend')}, ps {s.get('page_size')}, bs {s.get('cuda_graph_max_bs')}"
                             + (f", ({s.get('speculative_num_steps')}, {s.get('speculative_eagle_topk')}, "
                                f"{s.get('speculative_num_draft_tokens')})" if name != "plain" else ""))
        lines.append(f"| {engine} | {shown_parser} | {_cell(resolution)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)



def page() -> str:
    """The docs page of every listed SGLang release's table, as ``workbench engines launch-table`` prints it."""
    return generated_page(
        title="SGLang releases read by their own code: parser, resolution and three probe commands",
        command=f"workbench engines launch-table > {page_path('sglang-launch')}",
        source="the learned files' `parser` and `launch` sections, `data/engines/sglang/`",
        about="What each column means: [preflight.md](preflight.md#releases-read-by-their-own-code).",
        table=table(list(releases.releases("sglang"))))

def learn_all(name: str, *, progress: IO[str] | None | Stderr = STDERR) -> list[str]:
    """Learn every listed release of engine ``name`` (skipping those learned already); the releases done."""
    stream = progress_stream(progress)
    done = []
    for engine in releases.releases(name):
        if (learned.section(engine, "launch") or {}).get("probes"):
            continue
        if stream is not None:
            stream.write(f"workbench: learning {engine}'s parser and resolution\n")
        try:
            learn(engine, progress=progress)
        except (wheels.FetchError, launch_service.EngineUnavailable) as err:
            learned.write_section(engine, "launch", {"parser": {"value": None, "how": "absent", "reason": str(err)}})
        done.append(engine)
    return done


def learn_parser(engine: str, *, gpu_name: str = "h100", progress: IO[str] | None | Stderr = STDERR) -> dict[str, Any]:
    """Learn ``engine``'s ``parser`` section alone from a fresh engine process (one started by an
    older workbench would describe its parser as that workbench did). Facts already in the section
    stay, each with the function it names; the choices are (re)written. Returns the section."""
    install = wheels.fetch(engine)
    launch_service.stop(install.engine, gpu_name)
    try:
        report = launch_service.report(install, to_json(gpus.gpu(gpu_name)), owner=True, progress=progress)
    finally:
        launch_service.stop(install.engine, gpu_name)
    facts = report.get("parser") or {}
    section = dict(learned.section(engine, "parser") or {})
    if not facts:
        if "option_strings" not in section:
            section["options"] = {"value": None, "how": "absent", "reason": report["load"]["parser"]}
            learned.write_section(engine, "parser", section)
        return section
    if "choices" not in facts:  # an engine process that describes its parser without them
        raise launch_service.EngineUnavailable(f"{engine}: its engine process does not report the parser's choices")
    known = section.get("option_strings")
    function = str(known["function"]) if isinstance(known, dict) and known.get("function") else \
        "the release's parser as its entry point builds it (the launch adapter's describe_parser)"
    for name in PARSER_FACTS:
        if name == "choices" or not isinstance(section.get(name), dict) or section[name].get("value") is None:
            section[name] = _measured(facts[name], function)
    learned.write_section(engine, "parser", section)
    return section


def learn_parsers(engines: list[str], *, progress: IO[str] | None | Stderr = STDERR) -> list[str]:
    """``learn_parser`` for each of ``engines`` whose parser section has no choices yet (resumable:
    an interrupted run redoes only what it had not written); the releases done."""
    stream = progress_stream(progress)
    done = []
    for number, engine in enumerate(engines, 1):
        if "choices" in (learned.section(engine, "parser") or {}):
            continue
        if stream is not None:
            stream.write(f"workbench: [{number}/{len(engines)}] learning {engine}'s parser (options and choices)\n")
        try:
            learn_parser(engine, progress=progress)
        except (wheels.FetchError, launch_service.EngineUnavailable) as err:
            if stream is not None:
                stream.write(f"workbench: {engine}: not learned: {err}\n")
            continue
        done.append(engine)
    return done
