"""The resident workbench process: ``python -m workbench.resident.server SOCKET``.

Started by ``client._start`` in a session of its own. It imports torch, the preflight and the
command line once, listens on SOCKET, and runs one command at a time as ``workbench.cli.main``
would in a new process: in the caller's working folder, with the caller's environment, its stdout
and stderr streamed back line by line as JSON (``{"out": ...}``, ``{"err": ...}``), then
``{"status": N}``. It exits after ``$WORKBENCH_RESIDENT_IDLE`` seconds (600) without a command,
when asked to stop (``{"stop": true}``: ``workbench engines stop``), or when its socket is gone.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

from workbench.resident.client import IDLE_ENV


class _Stream(io.TextIOBase):
    """A text stream whose writes go to the client as one JSON line each."""

    def __init__(self, connection: socket.socket, key: str) -> None:
        self._connection = connection
        self._key = key

    def write(self, text: str) -> int:
        if text:
            self._connection.sendall((json.dumps({self._key: text}) + "\n").encode())
        return len(text)

    def writable(self) -> bool:
        return True


@contextlib.contextmanager
def _as_caller(cwd: str, env: dict[str, str]) -> Iterator[None]:
    """The caller's working folder and environment for one command, this process's own after it."""
    saved_cwd, saved_env = os.getcwd(), dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        os.chdir(cwd)
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def _handle(connection: socket.socket) -> str:
    """Run one command: "ran", "probed" (a connection that asked nothing: ``client.running``), or "stop"."""
    from workbench.cli import main

    with connection.makefile("r", encoding="utf-8") as reader:
        line = reader.readline()
    if not line:
        return "probed"
    request: dict[str, Any] = json.loads(line)
    if request.get("stop"):
        return "stop"
    out, err = _Stream(connection, "out"), _Stream(connection, "err")
    try:
        with _as_caller(request["cwd"], request["env"]), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(request["argv"], cast(IO[str], out))
        connection.sendall((json.dumps({"status": status}) + "\n").encode())
    except (BrokenPipeError, ConnectionResetError):  # the caller went away (Ctrl-C): the next one is served
        pass
    except Exception as error:  # a bug of the workbench's: said to this caller, the process goes on
        with contextlib.suppress(OSError):
            connection.sendall((json.dumps({"err": f"workbench: internal error: {type(error).__name__}: {error}\n"}) + "\n"
                                + json.dumps({"status": 1}) + "\n").encode())
    return "ran"


def serve(path: Path, idle_seconds: float) -> None:
    import workbench.cli  # noqa: F401  # what every command needs, imported once, before listening
    import workbench.preflight  # noqa: F401

    path.unlink(missing_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(8)
        last_command = time.monotonic()  # a probe (``client.running``) is no use: it keeps nothing alive
        try:
            while path.exists():
                listener.settimeout(max(0.01, idle_seconds - (time.monotonic() - last_command)))
                try:
                    connection, _ = listener.accept()
                except TimeoutError:
                    return
                connection.settimeout(None)
                with connection:
                    done = _handle(connection)
                if done == "stop":
                    return
                if done == "ran":
                    last_command = time.monotonic()
        finally:
            path.unlink(missing_ok=True)


if __name__ == "__main__":
    serve(Path(sys.argv[1]), float(os.environ.get(IDLE_ENV, "600")))
