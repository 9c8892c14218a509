"""Asking an engine process to read a command: ``resolve(request)``; ``stop_all()``.

Importing an engine release and its resolution takes 2 to 10 seconds; reading one command with
it, a fraction of a second. So each release (and GPU: engines read the device at import) gets
one long-lived process (``launch_zygote``), found by its socket in the run folder
(``$WORKBENCH_RUN_DIR``, else ``${WORKBENCH_CACHE:-~/.cache/workbench}/run``) and started on
first use, with a note on stderr while it loads. It forks a child per request, so requests
never see each other's state, and exits after ``idle`` seconds without one (600 by default,
``$WORKBENCH_ENGINE_IDLE``). At most ``most_processes()`` live in one run folder: starting one
more stops the least recently used.

A process started from the command line outlives it (the next ``workbench check`` finds it);
one started from a long-lived Python process (a notebook kernel, a test session: ``owner=True``)
also exits when that process does. ``workbench engines stop`` stops them all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from workbench.engines.commands.adapters import LaunchRequest, Resolution, resolution_from_json, to_json
from workbench.engines.store import releases, wheels
from workbench.engines.store.cache_root import cache_root
from workbench.files import exclusive

START_SECONDS = 600  # loading a release on a busy 2-core machine; past this the start has failed
ANSWER_SECONDS = 240


class Stderr:
    """The default of ``progress``: this process's stderr when the call is made (a default of
    ``sys.stderr`` itself would be the stream of import time, replaced since by a notebook or a test)."""


STDERR = Stderr()


def progress_stream(progress: IO[str] | None | Stderr) -> IO[str] | None:
    return sys.stderr if isinstance(progress, Stderr) else progress


class EngineUnavailable(RuntimeError):
    """The release's engine process could not start; the message is one line saying why."""


def run_dir() -> Path:
    configured = os.environ.get("WORKBENCH_RUN_DIR")
    base = Path(configured) if configured else cache_root() / "run"
    base.mkdir(parents=True, exist_ok=True)
    return base


def idle_seconds() -> float:
    return float(os.environ.get("WORKBENCH_ENGINE_IDLE", "600"))


def most_processes() -> int:
    """How many engine processes a run folder keeps (``$WORKBENCH_ENGINE_PROCESSES``, 4 by default):
    each holds a release's modules (a few hundred MB); a notebook's version dropdown walked from
    end to end would otherwise leave one per release alive until their idle time runs out."""
    return max(1, int(os.environ.get("WORKBENCH_ENGINE_PROCESSES", "4")))


def _used(path: Path) -> None:
    path.with_suffix(".used").touch()


def _make_room(keep: Path) -> None:
    """Stop the least recently used engine processes until one more fits under ``most_processes``."""
    live = [p for p in running() if p != keep]
    surplus = len(live) + 1 - most_processes()
    if surplus <= 0:
        return

    def last_use(path: Path) -> float:
        marker = path.with_suffix(".used")
        return marker.stat().st_mtime if marker.exists() else 0.0

    stop_all(paths=sorted(live, key=last_use)[:surplus])


SOCKET_CHARS = 96  # a Unix socket's path is at most 107 bytes; the zygote binds it with ".<pid>" added first


def socket_path(engine: str, gpu: str, libraries: tuple[str, ...] = ()) -> Path:
    """The engine process's socket; one with optional libraries (``resolve`` asks for them) has its
    own, named by them, or by a digest of their names where the run folder leaves no room for them."""
    extra = "".join(f"+{name}" for name in libraries)
    path = run_dir() / f"{engine.replace('==', '-')}-{gpu}{extra}.sock"
    if libraries and len(str(path)) > SOCKET_CHARS:
        digest = hashlib.sha1(extra.encode()).hexdigest()[:8]
        path = path.with_name(f"{engine.replace('==', '-')}-{gpu}+{digest}.sock")
    return path


def _send(path: Path, message: dict[str, Any], timeout: float) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        connection.connect(str(path))
        connection.sendall((json.dumps(message) + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = connection.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    if not data:
        raise EngineUnavailable(f"{path.name}: the engine process closed the connection without an answer")
    answer: dict[str, Any] = json.loads(data)
    return answer


def _reachable(path: Path) -> bool:
    if not path.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(2)
            probe.connect(str(path))
        return True
    except OSError:
        return False


def _lock(path: Path) -> contextlib.AbstractContextManager[None]:
    """One starter per release and GPU: a second caller waits for the first one's process."""
    return exclusive(path.with_suffix(".lock"))


def _start(install: wheels.EngineInstall, gpu_json: dict[str, Any], path: Path, owner: bool, progress: IO[str] | None,
           extra_paths: list[str] | None = None, libraries: tuple[str, ...] = ()) -> dict[str, Any]:
    """Start the engine process; its ready line (what it loaded)."""
    log = path.with_suffix(".log")
    job = {"engine": install.engine, "package_dir": str(install.package_dir), "deps": str(install.deps),
           "extra_paths": extra_paths or [], "gpu": gpu_json,
           "socket": str(path), "idle": idle_seconds(), "owner": os.getpid() if owner else 0}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # the release's modules compile once
    env.update({"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
                "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[3]), env.get("PYTHONPATH", "")])})
    if progress is not None:
        with_paths = f" with {' and '.join(libraries)}" if libraries else ""
        progress.write(f"workbench: loading {install.engine}'s parser and resolution on a stand-in {gpu_json['name']}"
                       f"{with_paths} (once; later checks reuse it)...\n")
        progress.flush()
    started = time.monotonic()
    with open(log, "w") as log_stream:
        process = subprocess.Popen([sys.executable, "-m", "workbench.engines.commands.launch_zygote"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=log_stream, env=env, text=True, start_new_session=True)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(job) + "\n")
    process.stdin.close()
    process.wait(timeout=60)  # it forks the engine process and exits
    ready_now, _, _ = select.select([process.stdout], [], [], START_SECONDS)
    line = process.stdout.readline() if ready_now else ""  # the ready line, or nothing when it died or hangs
    process.stdout.close()
    if not ready_now:
        _stop_by_pid_file(path)
        raise EngineUnavailable(f"{install.engine}: the engine process did not load within {START_SECONDS} s (log: {log})")
    if not line.startswith("{"):
        tail = [x for x in log.read_text(errors="replace").splitlines() if x.strip()][-1:] or ["no output"]
        raise EngineUnavailable(f"{install.engine}: the engine process stopped while loading: {tail[0][:300]} (log: {log})")
    if progress is not None:
        progress.write(f"workbench: {install.engine} loaded in {time.monotonic() - started:.1f} s\n")
        progress.flush()
    ready: dict[str, Any] = json.loads(line)
    return ready


def ensure(install: wheels.EngineInstall, gpu_json: dict[str, Any], *, owner: bool, progress: IO[str] | None,
           libraries: tuple[str, ...] = ()) -> Path:
    """The socket of a live engine process for this release and GPU (and optional libraries,
    which ``resolve`` asks for), started when there is none."""
    path = socket_path(install.engine, str(gpu_json["name"]), libraries)
    if _reachable(path):
        return path
    with _lock(path):
        if not _reachable(path):
            path.unlink(missing_ok=True)
            _make_room(path)
            if libraries:
                paths = library_paths(install, libraries)
                if paths is None:  # resolve() asks only for what the cache has
                    raise EngineUnavailable(f"{install.engine}: {' and '.join(libraries)} not in the cache")
                _start(install, gpu_json, path, owner, progress, [str(p) for p in paths], libraries)
                return path
            ready = _start(install, gpu_json, path, owner, progress)
            if _needs_torchvision(ready) and install.torchvision.exists():
                # Some releases' pinned transformers refuse to register the engine's image processors
                # without torchvision; others fail when it is there: it is added only when asked for.
                stop_all(paths=[path])
                _start(install, gpu_json, path, owner, progress, [str(install.torchvision)], ("torchvision",))
    return path


def _stop_by_pid_file(path: Path) -> None:
    """End an engine process that never became ready (it answers no stop message)."""
    import signal

    pid_file = path.with_suffix(".pid")
    if pid_file.exists():
        with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
            os.kill(int(pid_file.read_text()), signal.SIGTERM)


def _needs_torchvision(ready: dict[str, Any]) -> bool:
    """The release's transformers wants torchvision: it says so, or it read the stand-in's missing
    version ("Invalid version: 'N/A'") while the engine's modules load."""
    load = ready.get("load", {})
    said = f"{load.get('parser', '')} {load.get('resolution', '')}".lower()
    return "torchvision" in said or "invalid version: 'n/a'" in said


def library_paths(install: wheels.EngineInstall, libraries: tuple[str, ...]) -> list[Path] | None:
    """The cache's folder of each optional library, or None when one cannot be had: torchvision
    (with Pillow, about 30 MB) is fetched here on first use; triton (about 1 GB) only when asked
    for (``workbench engines fetch --triton``); a listed engine's name (a platform plugin such as
    vllm-ascend) is its release paired with the release's own version (``releases.paired``), fetched on
    first use."""
    paths = []
    version = wheels.split_engine(install.engine)[1]
    for name in libraries:
        if name == "torchvision":
            try:
                paths.append(wheels.fetch_vision())
            except wheels.FetchError:
                return None
        elif name == "triton" and (triton := wheels.triton_dir()) is not None:
            paths.append(triton)
        elif name in releases.ENGINES and (plugin := releases.paired(name, version)) is not None:
            try:
                paths.append(wheels.fetch(plugin).src)
            except wheels.FetchError:
                return None
        else:
            return None
    return paths


def _plugin(name: str) -> bool:
    """A library that is an engine's platform plugin (a listed engine), not a library every GPU install has."""
    return name in releases.ENGINES


def resolve(request: LaunchRequest, install: wheels.EngineInstall, *, owner: bool = True,
            progress: IO[str] | None | Stderr = STDERR) -> Resolution:
    """The engine's reading of ``request``, from the release's engine process; asked again of a
    process that has the libraries a real deployment has, when their absence stopped it (``needs``:
    the model class of Qwen3.5 wants triton, then torchvision)."""
    progress = progress_stream(progress)
    libraries: tuple[str, ...] = ()
    answer = resolution_from_json(_ask(request, install, owner, progress, libraries))
    stopped: list[str] = []
    while answer.needs and not set(answer.needs) <= set(libraries):
        wanted = tuple(sorted({*libraries, *answer.needs}))
        if library_paths(install, wanted) is None:
            missing = [n for n in wanted if library_paths(install, (n,)) is None]
            plugins = [n for n in missing if _plugin(n)]
            if plugins:
                plugin = releases.paired(plugins[0], wheels.split_engine(install.engine)[1])
                return dataclasses.replace(answer, message=f"{answer.message}; its release {plugin} could not be "
                                                           "fetched into the workbench's cache (a wheel for this "
                                                           "Python: `pip download --no-deps --only-binary=:all:`)")
            return dataclasses.replace(answer, message=f"{answer.message}; every GPU install of the engine has "
                                                       f"{' and '.join(missing)}, which the workbench's cache has not: "
                                                       "`workbench engines fetch --triton` fetches it (about 1 GB), then "
                                                       "check again")
        stopped.append(f"without {' and '.join(n for n in wanted if n not in libraries)}: {answer.message}")
        libraries = wanted
        answer = resolution_from_json(_ask(request, install, owner, progress, libraries))
    if not libraries:
        return answer
    version = wheels.split_engine(install.engine)[1]
    plugins = [f"{releases.paired(n, version)}'s platform plugin" for n in libraries if _plugin(n)]
    common = [n for n in libraries if not _plugin(n)]
    said = [*plugins, *([f"{' and '.join(common)}, which every GPU install of the engine has"] if common else [])]
    note = f"read by an engine process with {'; and '.join(said)} ({'; '.join(stopped)})"
    return dataclasses.replace(answer, notes=(*answer.notes, note))


def _ask(request: LaunchRequest, install: wheels.EngineInstall, owner: bool, progress: IO[str] | None,
         libraries: tuple[str, ...]) -> dict[str, Any]:
    path = ensure(install, to_json(request.gpu), owner=owner, progress=progress, libraries=libraries)
    _used(path)
    try:
        return _send(path, {"request": to_json(request)}, ANSWER_SECONDS)
    except (ConnectionRefusedError, FileNotFoundError):  # it exited (idle) between the check and the send
        path = ensure(install, to_json(request.gpu), owner=owner, progress=progress, libraries=libraries)
        return _send(path, {"request": to_json(request)}, ANSWER_SECONDS)


def report(install: wheels.EngineInstall, gpu_json: dict[str, Any], *, owner: bool = True,
           progress: IO[str] | None | Stderr = STDERR) -> dict[str, Any]:
    """What the release's engine process loaded (``LoadReport``) and its parser's facts."""
    progress = progress_stream(progress)
    return _send(ensure(install, gpu_json, owner=owner, progress=progress), {"report": True}, ANSWER_SECONDS)


def running() -> list[Path]:
    return sorted(p for p in run_dir().glob("*.sock") if _reachable(p))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop(engine: str, gpu: str, wait: float = 30) -> list[str]:
    """Stop the engine process of ``engine`` on ``gpu``, if one runs."""
    return stop_all(wait, [socket_path(engine, gpu)])


def stop_all(wait: float = 30, paths: list[Path] | None = None) -> list[str]:
    """Stop every engine process of the run folder (or those of ``paths``) and wait for them to
    exit; the names stopped."""
    stopped, pids = [], []
    for path in sorted(run_dir().glob("*.sock")) if paths is None else paths:
        if not path.exists():
            continue
        pid_file = path.with_suffix(".pid")
        try:
            pid = int(pid_file.read_text()) if pid_file.exists() else 0
            _send(path, {"stop": True}, 10)
            stopped.append(path.stem)
            pids.append(pid)
        except (OSError, ValueError, EngineUnavailable):
            path.unlink(missing_ok=True)
    deadline = time.monotonic() + wait
    while any(pid and _pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return stopped
