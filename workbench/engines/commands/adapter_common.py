"""Helpers every adapter shares, run in the engine process: an argparse parser's view of a command,
who wrote each resolved value, and whether an exception is the engine refusing or the CPU failing.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import io
import re
import sys
import traceback
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.engines.commands.adapters import REJECTED, UNDECIDED, FlagUse, JSONValue, Resolution
from workbench.engines.sandbox.standins import names_stand_in, stand_in_named

# ---- the parser ---------------------------------------------------------------------------------


def parser_error(parse: Callable[[], object]) -> str | None:
    """The text of the parser's own error (``argparse``'s ``prog: error: ...`` line), or None.

    ``parse`` runs the parse; argparse prints the usage and the error to stderr and exits 2."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parse()
    except SystemExit as stop:
        if stop.code in (0, None):
            return None
        lines = [line for line in stderr.getvalue().splitlines() if ": error: " in line or line.startswith("error: ")]
        return lines[-1].split("error: ", 1)[1] if lines else (stderr.getvalue().strip().splitlines() or [str(stop)])[-1]
    return None


def _optional(parser: argparse.ArgumentParser, token: str) -> tuple[argparse.Action, str] | None:
    """The action and option string argparse matches ``token`` to (abbreviations included)."""
    found: Any = parser._parse_optional(token)
    if isinstance(found, list):  # Python 3.12.7+: a list of candidate tuples
        found = found[0] if len(found) == 1 else None
    if not found or found[0] is None:
        return None
    return found[0], found[1]


def flag_uses(parser: argparse.ArgumentParser, argv: Sequence[str], values: dict[str, Any]) -> list[FlagUse]:
    """Every option ``argv`` writes, as the parser matched it, with the value it parsed to."""
    uses = []
    with contextlib.redirect_stderr(io.StringIO()):
        for token in argv:
            if not token.startswith("-") or token == "--":
                continue
            try:
                matched = _optional(parser, token)
            except SystemExit:  # an ambiguous abbreviation: the parse itself reports it
                continue
            if matched is None:
                continue
            action, option = matched
            if action.dest in ("help", argparse.SUPPRESS):
                continue
            canonical = max(action.option_strings, key=len) if action.option_strings else option
            uses.append(FlagUse(token.split("=", 1)[0], canonical, action.dest, jsonable(values.get(action.dest))))
    return uses


def describe(parser: argparse.ArgumentParser) -> dict[str, JSONValue]:
    """The parser's facts for the learned file: its options, the aliases among them, and the
    values each option with a fixed set of choices takes."""
    actions = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    by_dest: dict[str, list[str]] = {}
    for action in actions:
        by_dest.setdefault(action.dest, []).extend(action.option_strings)
    aliases = {dest: sorted(names) for dest, names in by_dest.items() if len(names) > 1}
    choices = {option: values for action in actions if (values := choices_as_written(action)) is not None
               for option in action.option_strings}
    return {"options": len(actions), "option_strings": sorted(s for a in actions for s in a.option_strings),
            "aliases": aliases, "abbreviations": bool(parser.allow_abbrev), "choices": dict(sorted(choices.items()))}


def choices_as_written(action: argparse.Action) -> list[str] | None:
    """The values ``action`` takes, as a command writes them, when argparse compares the word
    itself with its choices (one value, no conversion or ``type=str``, every choice a string);
    None otherwise (no choices, or a conversion the learned file could not redo)."""
    if action.choices is None or action.nargs not in (None, "?") or action.type not in (None, str):
        return None
    try:
        values = list(action.choices)
    except TypeError:  # a container argparse can test but not list
        return None
    return values if all(isinstance(v, str) for v in values) else None


# ---- values -----------------------------------------------------------------------------------------


def jsonable(value: Any, depth: int = 0) -> JSONValue:
    """``value`` as plain JSON (enums by value, other objects by their text)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return jsonable(value.value, depth + 1) if isinstance(value.value, (int, str)) else value.name
    if depth > 4:
        return str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v, depth + 1) for v in value]
    if hasattr(value, "__dict__") and not isinstance(value, (type, types.ModuleType, types.FunctionType)):
        return {k: jsonable(v, depth + 1) for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)


# ---- who wrote what ----------------------------------------------------------------------------


@dataclass
class Writes:
    """The last engine code location that wrote each field: ``name -> "function (file:line)"``."""

    package_dir: Path
    where: dict[str, str] = field(default_factory=dict)
    functions: list[str] = field(default_factory=list)  # every writing function, first write order

    def location(self, frame: types.FrameType) -> str | None:
        """``function (pkg/file.py:line)`` of the first frame inside the engine's package, or None."""
        root = str(self.package_dir.parent)
        current: types.FrameType | None = frame
        while current is not None:
            filename = current.f_code.co_filename
            if filename.startswith(str(self.package_dir)):
                return f"{current.f_code.co_qualname if hasattr(current.f_code, 'co_qualname') else current.f_code.co_name} " \
                       f"({filename[len(root) + 1:]}:{current.f_lineno})"
            current = current.f_back
        return None

    def record(self, name: str, frame: types.FrameType) -> None:
        where = self.location(frame)
        if where is None:
            return
        self.where[name] = where
        function = where.split(" (", 1)[0]
        if function not in self.functions:
            self.functions.append(function)


@contextlib.contextmanager
def traced_setattr(cls: type, writes: Writes, skip: Callable[[types.FrameType], bool],
                   transform: Callable[[str, Any], Any] = lambda name, value: value) -> Iterator[None]:
    """Record every attribute write on instances of ``cls`` (``skip``: frames that are construction;
    ``transform``: what to store instead of a written value, e.g. a list that notes its appends)."""
    original: Any = cls.__setattr__

    def traced(self: Any, name: str, value: Any) -> None:
        frame = sys._getframe(1)
        if not skip(frame):
            writes.record(name, frame)
        original(self, name, transform(name, value))

    cls.__setattr__ = traced  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        cls.__setattr__ = original  # type: ignore[method-assign]


# ---- why it stopped ------------------------------------------------------------------------------


def raising_frame(error: BaseException) -> traceback.FrameSummary | None:
    frames = traceback.extract_tb(error.__traceback__) if error.__traceback__ else []
    return frames[-1] if frames else None


def engine_frame(error: BaseException, package_dir: Path) -> traceback.FrameSummary | None:
    """The innermost frame of the traceback inside the engine's package."""
    frames = traceback.extract_tb(error.__traceback__) if error.__traceback__ else []
    inside = [f for f in frames if f.filename.startswith(str(package_dir))]
    return inside[-1] if inside else None


def short_path(filename: str, package_dir: Path) -> str:
    root = str(package_dir.parent)
    return filename[len(root) + 1:] if filename.startswith(root) else Path(filename).name


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def unknown_model_type(error: BaseException) -> str | None:
    """An UNDECIDED line when ``error`` is transformers not knowing the model's type ("has model
    type `glm_moe_dsa` but Transformers does not recognize this architecture"): the model is newer
    than the transformers installed beside the release, which is neither the engine refusing the
    command nor something a CPU cannot run. None for any other error."""
    found = re.search(r"model type `([^`]+)` but Transformers does not recognize", str(error))
    if found is None:
        return None
    module = sys.modules.get("transformers")
    version = getattr(module, "__version__", "?")
    return (f"the transformers {version} installed beside the release does not know the model type `{found.group(1)}`: "
            "a deployment of this model installs a newer one (its page says which); give --engine a newer release, "
            "or --model-config a config of a type this one knows")


# Exceptions an engine's own validation raises on purpose (a command it refuses).
REFUSALS = (ValueError, AssertionError, NotImplementedError, RuntimeError, TypeError, KeyError)
# Texts that say the code needed the machine it is not on (a device, a driver, a missing library);
# a stand-in named anywhere in the error says so too (``stand_in_stop``).
_CPU_SIGNS = ("not compiled with cuda", "torch not compiled", "no cuda gpus", "nvml", "cuda driver",
              "found no nvidia driver", "libcuda", "is not installed", "no module named", "cannot import name",
              "drivers are installed", "nvidia-smi", "rocm-smi", "npu-smi")


_PLAIN_VALUES = ("'list' object", "'dict' object", "'str' object", "'int' object", "'float' object", "'NoneType' object",
                 "'bool' object", "'tuple' object")


def stand_in_stop(error: BaseException, engine: str, where: str) -> str | None:
    """The UNDECIDED line for an engine stopped by a stand-in, or None when ``error`` names none.

    The rule, for every adapter: an error whose message, or what it carries or was raised from,
    names a stand-in (``standins.stand_in_named``: ``<standin.vllm.AQLMConfig ...>`` inside the
    engine's "Unknown quantization method: ..."), is not the engine refusing the user's command,
    however the engine words it: it is a library or device this machine lacks, which the check
    could not stand in for well enough. ``where``: the engine function it stopped in."""
    named = stand_in_named(error)
    if named is None:
        return None
    said = one_line(error)
    source = "" if named in said else f", raised from {_clipped(named, 160)}"
    return (f"{engine}'s start-up stopped on a stand-in for what this machine does not have, not on the command: "
            f"{_clipped(said)} (in {where}{source}); the workbench's stand-ins do not reach this path yet")


def _clipped(text: str, most: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else f"{text[:most]} [...]"


def refusal_naming_stand_in(resolution: Resolution) -> Resolution:
    """``resolution`` as the rule above reads it: a refusal whose text names a stand-in (whoever
    classified it: a parser's message, an adapter's) becomes UNDECIDED saying so; anything else
    is returned as it is."""
    if resolution.status != REJECTED or not names_stand_in(resolution.message):
        return resolution
    by = resolution.rejected_by or "?"
    return dataclasses.replace(
        resolution, status=UNDECIDED, rejected_by="",
        message=f"{resolution.engine}'s refusal ({by}) names a stand-in for what this machine does not have, so it is "
                f"not the engine's answer to the command: {_clipped(resolution.message)}")


def is_refusal(error: BaseException, package_dir: Path) -> bool:
    """True when ``error`` is the engine refusing the command: raised on purpose by the engine's
    own code (the innermost frame is the engine's), of a validation type, not a missing device;
    or the validation of one of the engine's config classes (pydantic's ``ValidationError``, raised
    inside pydantic on the engine's behalf); or the engine's code choking on a plain value the
    command gave (``'list' object has no attribute 'items'``), as it would at start-up. Never an
    error naming a stand-in (``stand_in_stop``)."""
    text = str(error)
    if stand_in_named(error) is not None or any(sign in text.lower() for sign in _CPU_SIGNS):
        return False
    last = raising_frame(error)
    in_engine = last is not None and last.filename.startswith(str(package_dir))
    if type(error).__name__ == "ValidationError" and engine_frame(error, package_dir) is not None:
        return True
    if isinstance(error, (AttributeError, TypeError)) and any(value in text for value in _PLAIN_VALUES):
        return in_engine
    if not isinstance(error, REFUSALS) or isinstance(error, (ImportError, AttributeError)):
        return False
    return in_engine


class _RenameRecorder(argparse.Namespace):
    """A parsed namespace that notes ``args.new = args.old`` copies (a parser destination the
    record's constructor renames: SGLang's ``tensor_parallel_size`` into ``tp_size``)."""

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_"):
            object.__setattr__(self, "_last_read", name)
        return super().__getattribute__(name)

    def __setattr__(self, name: str, value: Any) -> None:
        last = self.__dict__.get("_last_read")
        if last is not None and last != name and self.__dict__.get(last, object()) is value:
            self.__dict__["_renames"][last] = name
        super().__setattr__(name, value)


@contextlib.contextmanager
def recorded_renames(cls: type, method: str = "from_cli_args") -> Iterator[dict[str, str]]:
    """While open, ``cls.<method>(args)`` (a classmethod taking the parsed namespace) is given a
    namespace that records renamed destinations; yields ``{parser dest: field}``."""
    renames: dict[str, str] = {}
    original = cls.__dict__.get(method)
    if not isinstance(original, classmethod):
        yield renames
        return

    def wrapped(klass: type, args: argparse.Namespace, *rest: Any, **named: Any) -> Any:
        proxy = _RenameRecorder()
        proxy.__dict__.update(vars(args))
        proxy.__dict__["_renames"] = renames
        return original.__func__(klass, proxy, *rest, **named)

    setattr(cls, method, classmethod(wrapped))
    try:
        yield renames
    finally:
        setattr(cls, method, original)


def refusal_text(error: BaseException) -> str:
    """The engine's message for a refusal: its text (``Type: text`` unless a ValueError, the usual
    validation error), or for a bare ``assert`` the asserted source line, which is all it says."""
    text = str(error).strip()
    if not text:
        import linecache

        last = raising_frame(error)
        line = linecache.getline(last.filename, last.lineno).strip() if last and last.lineno else ""
        return f"{type(error).__name__}: {line}" if line else type(error).__name__
    return text if isinstance(error, ValueError) else f"{type(error).__name__}: {text}"
