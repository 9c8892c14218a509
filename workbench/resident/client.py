"""The command line's side: hand a command to the resident workbench process, stream back what it
prints, return its exit status. Imports no torch: it runs before the command line imports anything.

The process is found by its socket in the run folder (``$WORKBENCH_RUN_DIR``, else the cache's
``run/``), named by a digest of the workbench's source (every module's path, size and modification
time) and the interpreter: code that changed, or another virtual environment, gets a process of
its own, and the old one stops when idle. ``WORKBENCH_RESIDENT=0`` runs every command in its own
process, as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from workbench.engines.store.cache_root import cache_root

OFF_ENV = "WORKBENCH_RESIDENT"
IDLE_ENV = "WORKBENCH_RESIDENT_IDLE"
PACKAGE = Path(__file__).resolve().parents[1]
START_SECONDS = 180.0  # importing torch and the preflight on a loaded laptop


def enabled() -> bool:
    return os.environ.get(OFF_ENV, "1") != "0"


def folder() -> Path:
    configured = os.environ.get("WORKBENCH_RUN_DIR")
    base = (Path(configured) if configured else cache_root() / "run") / "resident"
    base.mkdir(parents=True, exist_ok=True)
    return base


def code_digest(package: Path = PACKAGE) -> str:
    """Which workbench this is: its modules' paths, sizes and modification times, and the interpreter."""
    digest = hashlib.sha256(f"{sys.executable}\0{sys.version}".encode())
    for path in sorted(package.rglob("*.py")):
        stat = path.stat()
        digest.update(f"\0{path.relative_to(package)}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def socket_path() -> Path:
    return folder() / f"{code_digest()}.sock"


def answer(argv: list[str], out: IO[str], err: IO[str]) -> int | None:
    """Run ``workbench ARGV`` in the resident process (started if none answers), its output written to
    ``out`` and ``err`` as it comes; its exit status. None where no resident process can be had or it
    said nothing before it stopped: the caller then runs the command itself."""
    path = socket_path()
    connection = _connect(path) or _start(path, err)
    if connection is None:
        return None
    request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
    said = False
    with connection, connection.makefile("rw", encoding="utf-8") as stream:
        stream.write(json.dumps(request) + "\n")
        stream.flush()
        for line in stream:
            message = json.loads(line)
            if "status" in message:
                return int(message["status"])
            (out if "out" in message else err).write(message.get("out", message.get("err", "")))
            said = True
    if not said:
        return None
    err.write(f"workbench: the resident workbench process stopped before it finished (log: {path.with_suffix('.log')})\n")
    return 1


def _connect(path: Path) -> socket.socket | None:
    if not path.exists():
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(path))
    except OSError:  # a socket left by a process that is gone
        connection.close()
        return None
    return connection


def _start(path: Path, err: IO[str]) -> socket.socket | None:
    """Start the resident process (one starter at a time) and connect once it listens."""
    import fcntl

    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        connection = _connect(path)  # another command started it while this one waited
        if connection is not None:
            return connection
        err.write("workbench: starting a resident workbench process (once; later checks reuse it)...\n")
        err.flush()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")])}
        with open(path.with_suffix(".log"), "w") as log:
            process = subprocess.Popen([sys.executable, "-m", "workbench.resident.server", str(path)], env=env,
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline and process.poll() is None:
            connection = _connect(path)
            if connection is not None:
                return connection
            time.sleep(0.05)
    err.write(f"workbench: no resident workbench process (log: {path.with_suffix('.log')}); running here\n")
    return None


def running() -> list[Path]:
    """The sockets of resident processes that answer."""
    live = []
    for path in sorted(folder().glob("*.sock")):
        connection = _connect(path)
        if connection is not None:
            connection.close()
            live.append(path)
    return live


def stop_all() -> list[str]:
    """Ask every resident process to stop; the names of those that were asked."""
    stopped = []
    for path in running():
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(str(path))
            connection.sendall(b'{"stop": true}\n')
            stopped.append(f"resident workbench {path.stem}")
    return stopped
