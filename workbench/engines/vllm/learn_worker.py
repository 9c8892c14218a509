"""The learn worker of one vLLM release: ``python -m workbench.engines.vllm.learn_worker``.

Reads a set-up line (the release's cached install and the GPU to stand in for), installs the
release (``loader``), then answers one JSON task per line (``sandbox.session``):

* ``locate``: what the release has for each buffer (``vllm_buffers.locate``);
* ``parser``: the launch adapter's load report and the parser's facts (``launch_adapters.vllm``);
* ``resolve``: a reference launch command read by the release's own parser and resolution;
* ``table_width`` / ``indexer_width`` / ``v0_width``: widths at each of ``points``;
* ``indexer_fill`` / ``v0_rows``: what the release's fill does on each of ``states``;
* ``kv_slots``: the blocks the v1 KV cache manager gives a request at each of ``states``;
* ``waiting_pad``: what the release's own scheduler schedules for a prompt sent again near
  ``max_model_len`` (``vllm_buffers.waiting_pad``), at each of ``states``;
* ``decode_step``: whether the release stops a running request at a length, and what its scheduler
  gives the request's next step with drafts (``vllm_buffers.decode_step``), at each of ``states``.

A task that fails answers ``{"error": one line}``; a point that fails answers its error in place.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import workbench
from workbench.engines.vllm.reference_models import REFERENCE_MODELS, REFERENCE_TOKENIZER

_WORKBENCH = str(Path(workbench.__file__).resolve().parent) + os.sep


def _one_line(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__) if error.__traceback__ else []
    # the release's own frames: a vllm/ folder that is not the workbench's (engines/vllm/ is ours)
    inside = [f for f in frames if "/vllm/" in f.filename and not f.filename.startswith(_WORKBENCH)]
    where = inside[-1] if inside else (frames[-1] if frames else None)
    place = f" ({where.filename[where.filename.rfind('/vllm/') + 1:] if where in inside else Path(where.filename).name}" \
            f":{where.lineno})" if where else ""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}{place}"[:400]


class Worker:
    def __init__(self, setup: dict[str, Any]) -> None:
        from workbench.engines.store.gpus import gpu
        from workbench.engines.vllm import loader as vllm_loader

        self.gpu = gpu(setup.get("gpu", "h100"))
        self.package_dir = Path(setup["package_dir"])
        vllm_loader.install(self.package_dir, Path(setup["deps"]), self.gpu,
                            [Path(p) for p in setup.get("extra_paths", [])])
        self.folder = Path(tempfile.mkdtemp(prefix="workbench-learn-vllm-"))
        self.adapter: Any = None
        self.indexer: Any = None
        self.configs: dict[tuple[Any, ...], Any] = {}  # engine configs built, by what they were built for

    def _adapter(self) -> Any:
        if self.adapter is None:
            from workbench.engines.vllm.launch_adapter import VLLMAdapter

            self.adapter = VLLMAdapter()
            self.report = self.adapter.load(self.gpu)
        return self.adapter

    def parser(self, task: dict[str, Any]) -> dict[str, Any]:
        from workbench.engines.commands.adapters import to_json

        adapter = self._adapter()
        facts = adapter.describe_parser() if self.report.parser == "loaded" else {}
        return {"load": to_json(self.report), "parser": facts}

    def resolve(self, task: dict[str, Any]) -> dict[str, Any]:
        """A reference command, read in a forked child (the resolution changes global state)."""
        from workbench.engines.commands.adapters import LaunchRequest, to_json

        adapter = self._adapter()
        model = self._model(task.get("model", "dsa"))
        argv = tuple(model if a == "{model}" else a for a in task["argv"])
        request = LaunchRequest(f"vllm=={adapter.version}", "vllm serve", argv, {}, self.gpu, cwd=str(self.folder))
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                answer = to_json(adapter.resolve(request))
            except BaseException as error:  # noqa: BLE001
                answer = {"status": "unloadable", "message": _one_line(error)}
            with os.fdopen(write, "w") as out:
                out.write(json.dumps(answer))
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as stream:
            text = stream.read()
        os.waitpid(pid, 0)
        resolved: dict[str, Any] = json.loads(text or '{"status": "unloadable", "message": "the child died"}')
        return resolved

    def _model(self, kind: str) -> str:
        folder = self.folder / f"reference-{kind}"
        if not folder.exists():
            folder.mkdir()
            (folder / "config.json").write_text(json.dumps(REFERENCE_MODELS[kind]))
            for name, content in (REFERENCE_TOKENIZER.items() if kind == "llama" else ()):
                (folder / name).write_text(json.dumps(content))
        return str(folder)

    def locate(self, task: dict[str, Any]) -> dict[str, Any]:
        from workbench.engines.vllm import buffers as vllm_buffers

        return vllm_buffers.locate()

    def _points(self, function: Callable[..., Any], points: list[list[Any]]) -> dict[str, Any]:
        values: list[Any] = []
        for point in points:
            try:
                values.append(function(*point))
            except Exception as error:  # noqa: BLE001 - a point that fails says why, in place
                values.append({"error": _one_line(error)})
        return {"values": values}

    def table_width(self, task: dict[str, Any]) -> dict[str, Any]:
        from workbench.engines.vllm import buffers as vllm_buffers

        return self._points(vllm_buffers.block_table_width, task["points"])

    def _indexer(self) -> Any:
        if self.indexer is None:
            from workbench.engines.vllm import buffers as vllm_buffers

            adapter = self._adapter()
            # max_num_seqs covers the fill's largest batch (96 requests, 192 query rows): 0.20.x sizes
            # the builder's arange by max_num_seqs (times next_n, 1 here), a batch above it is no
            # state the engine's scheduler makes
            config = adapter.engine_config([self._model("dsa"), "--max-model-len", "4096", "--block-size", "64",
                                            "--max-num-batched-tokens", "512", "--max-num-seqs", "256"])
            self.indexer = vllm_buffers.IndexerBench(config)
        return self.indexer

    def indexer_width(self, task: dict[str, Any]) -> dict[str, Any]:
        return self._points(self._indexer().width, task["points"])

    def indexer_fill(self, task: dict[str, Any]) -> dict[str, Any]:
        bench = self._indexer()
        return self._points(lambda s: bench.fill(s["max_model_len"], s["block_size"], s["dcp"], s["decode_lens"],
                                                 s["table_width"]), [[s] for s in task["states"]])

    def v0_width(self, task: dict[str, Any]) -> dict[str, Any]:
        from workbench.engines.vllm import buffers as vllm_buffers

        return self._points(vllm_buffers.v0_width, task["points"])

    def v0_rows(self, task: dict[str, Any]) -> dict[str, Any]:
        from workbench.engines.vllm import buffers as vllm_buffers

        return self._points(lambda s: vllm_buffers.v0_rows(s["backend"], s["graph_width"], s["seq_lens"],
                                                           s["block_tables"]), [[s] for s in task["states"]])

    def waiting_pad(self, task: dict[str, Any]) -> dict[str, Any]:
        """Each state's ``vllm_buffers.waiting_pad`` on the reference Llama, served with prefix caching,
        asynchronous scheduling and ``k`` speculative tokens of ``ngram_gpu`` (a drafter asynchronous
        scheduling takes)."""
        from workbench.engines.vllm import buffers as vllm_buffers

        def one(state: dict[str, Any]) -> dict[str, Any]:
            speculative = json.dumps({"method": "ngram_gpu", "num_speculative_tokens": state["k"],
                                      "prompt_lookup_max": 3, "prompt_lookup_min": 1})
            config = self._config(("pad", state["max_model_len"], state["block_size"], state["k"]), [[
                "--max-model-len", str(state["max_model_len"]), "--block-size", str(state["block_size"]),
                "--enable-prefix-caching", "--async-scheduling", "--skip-tokenizer-init",
                "--speculative-config", speculative]])
            if isinstance(config, Exception):
                return self._refused(config)
            return vllm_buffers.waiting_pad(copy.deepcopy(config), state["prompt_len"])

        return self._points(one, [[s] for s in task["states"]])

    def _config(self, key: tuple[Any, ...], variants: list[list[str]], *, first_refusal: bool = False) -> Any:
        """The engine config the release builds from the first of ``variants`` (argument lists on the
        reference Llama) its parser takes, kept under ``key``; the last refusal where none is taken
        (the first with ``first_refusal``: the later variants are fallbacks whose refusals say less)."""
        if key not in self.configs:  # an engine config takes seconds: the states share a few
            found: Any = None
            for argv in variants:
                try:
                    found = self._adapter().engine_config([self._model("llama"), *argv])
                    break
                except Exception as error:  # noqa: BLE001 - the release's refusal answers every state of it
                    found = error if not (first_refusal and isinstance(found, Exception)) else found
            self.configs[key] = found
        return self.configs[key]

    def _refused(self, error: Exception) -> dict[str, Any]:
        """A refused configuration's one line (its message names the model's temporary folder: not kept)."""
        return {"error": _one_line(error).replace(self._model("llama"), "<reference llama>")}

    def decode_step(self, task: dict[str, Any]) -> dict[str, Any]:
        """Each state's ``vllm_buffers.decode_step`` on the reference Llama, served with ``k`` tokens
        of the ``ngram`` drafter, synchronous scheduling (``--no-async-scheduling`` where the parser
        has it) and no prefix caching."""
        from workbench.engines.vllm import buffers as vllm_buffers

        def one(state: dict[str, Any]) -> dict[str, Any]:
            speculative = json.dumps({"method": "ngram", "num_speculative_tokens": state["k"],
                                      "prompt_lookup_max": 3, "prompt_lookup_min": 1})
            argv = ["--max-model-len", str(state["max_model_len"]), "--block-size", str(state["block_size"]),
                    "--no-enable-prefix-caching", "--skip-tokenizer-init", "--speculative-config", speculative]
            config = self._config(("decode", state["max_model_len"], state["block_size"], state["k"]),
                                  [[*argv, "--no-async-scheduling"], argv])
            if isinstance(config, Exception):
                return self._refused(config)
            if getattr(config.scheduler_config, "async_scheduling", False):
                return {"error": "the release schedules this configuration asynchronously"}
            return vllm_buffers.decode_step(copy.deepcopy(config), state["computed"], state["k"])

        return self._points(one, [[s] for s in task["states"]])

    def async_steps(self, task: dict[str, Any]) -> dict[str, Any]:
        """Each state's ``vllm_buffers.async_steps`` on the reference Llama, served with ``k`` draft
        tokens, asynchronous scheduling and no prefix caching. The drafter is the first the release
        schedules asynchronously: ``ngram``, else ``ngram_gpu``, else the reference Llama as an EAGLE
        head or as its own draft model (which drafter it is changes nothing the scheduler does with
        the count of drafts)."""
        from workbench.engines.vllm import buffers as vllm_buffers

        def one(state: dict[str, Any]) -> dict[str, Any]:
            k = state["k"]
            drafters: list[dict[str, Any]] = [
                {"method": "ngram", "prompt_lookup_max": 3, "prompt_lookup_min": 1},
                {"method": "ngram_gpu", "prompt_lookup_max": 3, "prompt_lookup_min": 1},
                {"method": "eagle", "model": self._model("llama")},
                {"method": "draft_model", "model": self._model("llama")}]
            base = ["--max-model-len", str(state["max_model_len"]), "--block-size", str(state["block_size"]),
                    "--no-enable-prefix-caching", "--skip-tokenizer-init", "--async-scheduling"]
            variants = [[*base, "--speculative-config", json.dumps({**d, "num_speculative_tokens": k})] for d in drafters]
            config = self._config(("async", state["max_model_len"], state["block_size"], k), variants, first_refusal=True)
            if isinstance(config, Exception):
                return self._refused(config)
            if not getattr(config.scheduler_config, "async_scheduling", False):
                return {"error": "the release does not schedule this configuration asynchronously"}
            return vllm_buffers.async_steps(copy.deepcopy(config), state["computed"], k, state["accepted"])

        return self._points(one, [[s] for s in task["states"]])

    def v0_decode_step(self, task: dict[str, Any]) -> dict[str, Any]:
        from workbench.engines.vllm import buffers as vllm_buffers

        return self._points(lambda s: vllm_buffers.v0_decode_step(s["max_model_len"], s["block_size"], s["computed"],
                                                                  s["async_output"]), [[s] for s in task["states"]])

    def kv_slots(self, task: dict[str, Any]) -> dict[str, Any]:
        from workbench.engines.vllm import buffers as vllm_buffers

        return self._points(lambda s: vllm_buffers.kv_slots(s["max_model_len"], s["block_size"], s["computed"],
                                                            s["new_tokens"], s["lookahead"]), [[s] for s in task["states"]])


def main() -> int:
    setup = json.loads(sys.stdin.readline())
    stdout = sys.stdout
    sys.stdout = sys.stderr  # the engine's prints go to the log, never into the answers
    try:
        worker = Worker(setup)
    except BaseException as error:  # noqa: BLE001 - the release does not install: every task says so
        failure = _one_line(error)
        worker = None
    for line in sys.stdin:
        task = json.loads(line)
        if worker is None:
            answer: dict[str, Any] = {"error": f"the release does not load: {failure}"}
        else:
            try:
                answer = getattr(worker, task["name"])(task)
            except Exception as error:  # noqa: BLE001 - one task's failure is its answer
                answer = {"error": _one_line(error)}
        stdout.write(json.dumps(answer) + "\n")
        stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
