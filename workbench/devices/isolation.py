"""Run a probe that can poison the device context in a child process (issue #7, part 4).

On the CPU an out-of-bounds gather raises ``IndexError`` and the process goes on. On CUDA the same
gather is a device-side assert, and on an Ascend NPU an AI Core error: either leaves the process's
device context unusable (every later call fails) or kills the process. So a sweep runs such probes
in a child started with the ``spawn`` method (a fresh interpreter: forking a process that holds a
CUDA context is unsafe) and gets the result back as a dict over a pipe.

The child's stdout and stderr go to a file, because a device's own message often never reaches
Python: a CUDA kernel's assertion is printed by the device, and an NPU runtime may abort the
process. What the parent records:

    the child returned          its record, unchanged
    the child raised            index-error when the message is a device's out-of-bounds report,
                                else crashed, with the exception's first line
    the child died              index-error when its output says so, else
                                crashed: "child died: exit code N" or "child died: signal N (NAME)"
    the child hung              crashed: "child timed out after T s" (the child is killed)
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from pathlib import Path

from workbench.model.outcome import Outcome

Record = dict[str, object]
Target = Callable[[Mapping[str, object]], Record]

DEFAULT_TIMEOUT_S = 120.0
JOIN_GRACE_S = 10.0  # how long a child that closed its pipe may take to exit
LOG_TAIL_CHARS = 4000
# Lower-case fragments of the messages a device gives for a read past a tensor: CUDA's
# "device-side assert triggered" and the indexing kernels' assertion ("index out of bounds"),
# "an illegal memory access was encountered", index_select's "srcIndex < srcSelectDimSize", and
# the Ascend runtime's AI Core error reports.
INDEX_ERROR_MARKERS = (
    "device-side assert", "out of bounds", "illegal memory access", "srcindex < srcselectdimsize", "aicore", "ai core",
)


def run_isolated(target: Target, payload: Mapping[str, object], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Record:
    """``target(payload)`` in a spawned child; a dead, hung or raising child becomes a record.

    ``target`` must be a module-level function (the child imports it by name) and both the
    payload and the returned record must pickle.
    """
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="workbench-child-") as folder:
        log_path = Path(folder) / "output.txt"
        receiver, sender = context.Pipe(duplex=False)
        child = context.Process(target=_child_main, args=(target, dict(payload), sender, str(log_path)), daemon=True)
        child.start()
        sender.close()  # the parent keeps only the reading end, so a dead child reads as end of file
        try:
            message = _receive(receiver, timeout_s)
        finally:
            receiver.close()
        if message == "timeout":
            child.kill()  # our own child, by its handle
            child.join()
            return crash_record(Outcome.CRASHED, f"child timed out after {timeout_s:g} s", child.exitcode)
        child.join(JOIN_GRACE_S)
        log = _tail(log_path)
    if isinstance(message, tuple) and message[0] == "returned":
        record: Record = message[1]
        return record
    if isinstance(message, tuple) and message[0] == "raised":
        return raised_record(str(message[1]), str(message[2]), log)
    return died_record(child.exitcode, log)


def _child_main(target: Target, payload: Mapping[str, object], sender: Connection, log_path: str) -> None:
    """The child: send back what ``target`` returned or raised; a crash sends nothing."""
    _redirect_output(log_path)
    try:
        reply: tuple[str, object] | tuple[str, str, str] = ("returned", target(payload))
    except BaseException as err:  # whatever it was, the parent decides what it means
        reply = ("raised", type(err).__name__, str(err))
    sender.send(reply)
    sender.close()


def _redirect_output(log_path: str) -> None:
    """Point file descriptors 1 and 2 at the log, so output printed below Python is caught too."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _receive(receiver: Connection, timeout_s: float) -> object:
    """The child's reply, ``"died"`` when the pipe closed without one, ``"timeout"``."""
    if not receiver.poll(timeout_s):
        return "timeout"
    try:
        return receiver.recv()
    except EOFError:  # the child's end closed without a reply: it died
        return "died"


def _tail(path: Path) -> str:
    if not path.exists():
        return ""
    return path.read_text(errors="replace")[-LOG_TAIL_CHARS:]


# ---- classification ----------------------------------------------------------------------------


def crash_record(outcome: Outcome, error: str, child_exit: int | None) -> Record:
    return {"outcome": outcome.value, "error": error, "child_exit": child_exit}


def device_index_message(text: str) -> str | None:
    """The first line of ``text`` in which a device reports a read past a tensor, or None."""
    hits = [line.strip() for line in text.splitlines() if any(m in line.lower() for m in INDEX_ERROR_MARKERS)]
    return hits[0] if hits else None


def raised_record(kind: str, message: str, log: str = "") -> Record:
    """The child raised: a device's out-of-bounds report is an index error, anything else a crash."""
    first = (message.strip().splitlines() or [""])[0]
    device_message = device_index_message(message) or device_index_message(log)
    if kind == "IndexError" or device_message is not None:
        return crash_record(Outcome.INDEX_ERROR, first if kind == "IndexError" else device_message or first, None)
    return crash_record(Outcome.CRASHED, f"child raised {kind}: {first}", None)


def died_record(exitcode: int | None, log: str = "") -> Record:
    """The child died without replying: its exit code or signal, and the device's message if any."""
    device_message = device_index_message(log)
    status = describe_exit(exitcode)
    if device_message is not None:
        return crash_record(Outcome.INDEX_ERROR, f"{device_message} ({status})", exitcode)
    last = next((line.strip() for line in reversed(log.splitlines()) if line.strip()), "")
    return crash_record(Outcome.CRASHED, status + (f": {last}" if last else ""), exitcode)


def describe_exit(exitcode: int | None) -> str:
    """``child died: exit code 3`` or ``child died: signal 9 (SIGKILL)``; multiprocessing gives -N for signal N."""
    if exitcode is None:
        return "child died: still running after its pipe closed"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown"
        return f"child died: signal {-exitcode} ({name})"
    return f"child died: exit code {exitcode}"


# ---- probes ------------------------------------------------------------------------------------


def probe_payload(payload: Mapping[str, object]) -> Record:
    """Child target: ``payload = {"case": <case dict>, "device": "cuda"}`` -> the probe's record."""
    from workbench.analysis.cases import CaseError, parse_case
    from workbench.analysis.probe import probe

    try:
        case = parse_case(payload["case"])
    except CaseError as err:
        return {"outcome": Outcome.INVALID.value, "error": str(err)}
    return probe(case, str(payload["device"])).to_dict(case.component)


def needs_isolation(case: Mapping[str, object], device: str) -> bool:
    """Whether a probe of ``case`` can poison ``device``: an allocator gather off the CPU.

    The table probes' reads are masked by the sequence lengths and cannot leave their tensors;
    the allocator's gathers index the free list unmasked (the NPU's legacy gather on an exactly
    full pool, the CUDA kernel on a shortage).
    """
    return not device.startswith("cpu") and case.get("component") == "allocator"


def isolated_probe(case: Mapping[str, object], device: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Record:
    """A probe's record, run in a child process when it can poison the device, else in-process."""
    payload = {"case": dict(case), "device": device}
    if needs_isolation(case, device):
        return run_isolated(probe_payload, payload, timeout_s=timeout_s)
    return probe_payload(payload)
