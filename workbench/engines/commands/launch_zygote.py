"""An engine process: one release's parser and resolution, loaded once, a fork per request.

``python -m workbench.engines.commands.launch_zygote`` is started by ``launch_service`` with one JSON
object on stdin (the release, its cached install, the GPU, the socket path, the idle timeout
and the owner's pid). It stands in for the GPU and the accelerator libraries, imports the
release's modules through its adapter (``adapters``), runs one warm-up request in a child
and imports what that child imported (so requests do not pay for modules the engine imports
lazily), then listens on a Unix socket. Each connection carries one JSON line:

* ``{"request": {...}}``: a fork answers it (``Resolution``) and exits, so every request starts
  from the state ``load`` left, whatever the engine's resolution changes;
* ``{"report": true}``: what was loaded (``LoadReport``) and the parser's facts;
* ``{"stop": true}``: the process exits.

It exits by itself after ``idle`` seconds without a request, or when its owner process is gone
(a notebook kernel, a test session), removing its socket and pid file.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from workbench.engines.commands.adapters import (
    UNLOADABLE,
    LaunchAdapter,
    LaunchRequest,
    LoadReport,
    Resolution,
    adapter,
    gpu_from_json,
    request_from_json,
    to_json,
)

REQUEST_SECONDS = 180  # a child that takes longer is stopped (its answer: unloadable)
WARM_MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
              "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1024,
              "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}


def _answer(connection: socket.socket, payload: Any) -> None:
    connection.sendall((json.dumps(payload) + "\n").encode())


def _read_line(connection: socket.socket) -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    parsed: dict[str, Any] = json.loads(data.decode() or "{}")
    return parsed


def _resolve_in_child(engine_adapter: LaunchAdapter, request: LaunchRequest) -> Resolution:
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(REQUEST_SECONDS)
    try:
        return engine_adapter.resolve(request)
    except BaseException as error:  # noqa: BLE001 - an adapter bug is one line, never a hung client
        return Resolution(request.engine, UNLOADABLE, f"the adapter stopped: {type(error).__name__}: {error}")


def _warm_up(engine_adapter: LaunchAdapter, engine: str, gpu_json: dict[str, Any]) -> int:
    """Resolve a small model in a child, then import here every module it imported; the count."""
    folder = Path(tempfile.mkdtemp(prefix="workbench-warm-")) / "warm-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(engine_adapter.warm_model() or WARM_MODEL))
    read_end, write_end = os.pipe()
    before = set(sys.modules)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            request = LaunchRequest(engine, "warm-up", engine_adapter.warm_argv(str(folder)), {}, gpu_from_json(gpu_json))
            _resolve_in_child(engine_adapter, request)
            with os.fdopen(write_end, "w") as out:
                out.write(json.dumps(sorted(set(sys.modules) - before)))
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as stream:
        text = stream.read()
    os.waitpid(pid, 0)
    shutil.rmtree(folder.parent, ignore_errors=True)
    imported = 0
    for name in json.loads(text or "[]"):
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
            imported += 1
        except BaseException:  # noqa: BLE001,S112 - a module that imports only in its own context stays lazy
            continue
    return imported


def _alive(pid: int) -> bool:
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _serve(listener: socket.socket, engine_adapter: LaunchAdapter, report: dict[str, Any], idle: float, owner: int) -> None:
    last = time.monotonic()
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([listener], [], [], 1.0)
        for pid in list(children):
            if os.waitpid(pid, os.WNOHANG)[0]:
                children.discard(pid)
        if not ready:
            if (not children and time.monotonic() - last > idle) or not _alive(owner):
                return
            continue
        connection, _ = listener.accept()
        last = time.monotonic()
        message = _read_line(connection)
        if message.get("stop"):
            _answer(connection, {"stopped": True})
            connection.close()
            return
        if message.get("report"):
            _answer(connection, report)
            connection.close()
            continue
        if "request" not in message:  # a liveness probe connects and closes
            connection.close()
            continue
        pid = os.fork()
        if pid == 0:
            _child(listener, connection, engine_adapter, message["request"])
        children.add(pid)
        connection.close()


def _child(listener: socket.socket, connection: socket.socket, engine_adapter: LaunchAdapter, request: dict[str, Any]) -> None:
    """A forked child: answer one request and exit, whatever happens (never the parent's clean-up)."""
    status = 0
    try:
        listener.close()
        resolution = _resolve_in_child(engine_adapter, request_from_json(request))
        _answer(connection, to_json(resolution))
        connection.close()
    except BaseException:  # noqa: BLE001 - the client sees a closed connection; the log has the trace
        import traceback

        traceback.print_exc()
        status = 1
    finally:
        from workbench.engines.sandbox.model_lookup import cleanup

        cleanup()
        os._exit(status)


def _load(job: dict[str, Any]) -> tuple[LaunchAdapter, dict[str, Any], Path]:
    """Stand in for the GPU and the libraries, load the release through its adapter."""
    start = time.perf_counter()
    import torch

    torch.set_num_threads(1)  # a forked child must not inherit a busy thread pool
    gpu = gpu_from_json(job["gpu"])
    engine_adapter = adapter(job["engine"].split("==", 1)[0])
    tools = engine_adapter.install(Path(job["package_dir"]), Path(job["deps"]),
                                   [Path(p) for p in job.get("extra_paths", [])], gpu)
    loaded = engine_adapter.load(gpu)
    parser = engine_adapter.describe_parser() if loaded.parser == "loaded" else {}
    warmed = _warm_up(engine_adapter, job["engine"], job["gpu"]) if loaded.parser == "loaded" else 0
    loaded = LoadReport(loaded.engine, loaded.parser, loaded.resolution, loaded.functions, loaded.read,
                        round(time.perf_counter() - start, 2))
    return engine_adapter, {"load": to_json(loaded), "parser": parser, "warm_modules": warmed,
                            "extra_paths": job.get("extra_paths", [])}, tools


def main() -> int:
    job = json.loads(sys.stdin.readline())
    if os.fork():  # the starter reaps this one at once; the engine process, a grandchild, is nobody's zombie
        os._exit(0)
    socket_path = Path(job["socket"])
    socket_path.with_suffix(".pid").write_text(str(os.getpid()))  # at once: a start that hangs can be ended
    # Only the ready line goes to the starter: what the engine prints while it loads (vLLM logs to
    # stdout) goes to the log, or the starter would read it in place of the ready line.
    ready_out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    engine_adapter, report, tools = _load(job)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    staging = socket_path.with_name(socket_path.name + f".{os.getpid()}")
    listener.bind(str(staging))
    listener.listen(16)
    staging.replace(socket_path)  # appears whole: a client that sees it can connect
    ready_out.write(json.dumps({"ready": True, **report}) + "\n")
    ready_out.close()
    try:
        _serve(listener, engine_adapter, report, float(job["idle"]), int(job.get("owner", 0)))
    finally:
        listener.close()
        pid_file = socket_path.with_suffix(".pid")
        if pid_file.exists() and pid_file.read_text() == str(os.getpid()):  # not a successor's
            socket_path.unlink(missing_ok=True)
            pid_file.unlink(missing_ok=True)
        shutil.rmtree(tools, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
