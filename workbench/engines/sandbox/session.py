"""A worker process that holds one release's modules while a learner asks it task after task.

Engine-neutral: the worker module (``python -m <module>``) reads a set-up line, then one JSON
task per line, and answers each with one JSON line. Importing a release's attention modules takes
tens of seconds, so one process answers every task of a release, and the learner chooses each
next task from the answers so far. A worker that dies (a segfault in a kernel, an import that
kills the interpreter) ends the session with a ``SessionDied`` naming the task it was on and the
last line it wrote on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from types import TracebackType
from typing import IO, Any


class SessionDied(RuntimeError):
    """The worker process ended while a task was running; the message is one line."""


class Session:
    def __init__(self, module: str, setup: Mapping[str, Any]) -> None:
        # Bytecode is written into the cache folder: a release's modules compile once, not per run.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        self._stderr: IO[str] = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed by close()
        self._process = subprocess.Popen([sys.executable, "-m", module], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env)
        self._send(setup)

    def _send(self, message: Mapping[str, Any]) -> None:
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(json.dumps(message) + "\n")
            self._process.stdin.flush()
        except BrokenPipeError:
            raise SessionDied(f"the worker stopped before {message.get('name', 'set-up')}: {self._last_error()}") from None

    def ask(self, task: Mapping[str, Any]) -> dict[str, Any]:
        """The worker's answer to ``task`` (which must have a ``name``)."""
        self._send(task)
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            status = self._process.wait()
            raise SessionDied(f"the worker stopped (status {status}) in {task['name']}: {self._last_error()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _last_error(self) -> str:
        self._stderr.seek(0)
        lines = [line.strip() for line in self._stderr.read().splitlines() if line.strip()
                 and "Warning" not in line and not line.startswith("warnings.warn")]
        return lines[-1][:300] if lines else "no output"

    def close(self) -> None:
        if self._process.stdin is not None and not self._process.stdin.closed:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._stderr.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if error is not None and self._process.poll() is None:
            self._process.kill()  # interrupted: nothing of the worker's is kept
        self.close()


class Sessions:
    """A release's main worker and, opened on first use, a second one with a real triton (its
    kernels interpreted): importing triton changes what some releases' modules do at import, so
    only the tasks that need it (a Triton kernel, ``triton.cdiv``) go there."""

    def __init__(self, main: Session, module: str, triton_setup: Mapping[str, Any] | None) -> None:
        self.main = main
        self._module, self._triton_setup = module, triton_setup
        self._triton: Session | None = None
        self.triton_error: str | None = None

    def ask(self, task: Mapping[str, Any]) -> dict[str, Any]:
        return self.main.ask(task)

    def ask_triton(self, task: Mapping[str, Any]) -> dict[str, Any] | None:
        """The answer of the triton worker, or None where triton is not cached or it did not load."""
        if self._triton_setup is None or self.triton_error is not None:
            return None
        if self._triton is None:
            self._triton = Session(self._module, self._triton_setup)
            loaded = self._triton.ask({"name": "load", "kind": "load", "modules": []})
            if "error" in loaded:
                self.triton_error = loaded["error"]
                return None
        try:
            return self._triton.ask(task)
        except SessionDied as error:
            self.triton_error = str(error)
            return None

    def close(self) -> None:
        for session in (self.main, self._triton):
            if session is not None:
                session.close()
