"""Parameter checks shared by the notebooks.

Every notebook starts with a papermill ``parameters`` cell and then calls these functions, so a
bad value (a typo in ``-p page_sizes ...``, a rule that does not exist) stops the run at the
second cell with one line naming the parameter and what is allowed, instead of failing deep
inside a sweep. Each check returns the value in the shape the library wants (tuples, a resolved
device string, a created ``Path``).

Relative folders (``output_dir = "../reports"``) are read against the notebook's own folder, never
the working directory: ``papermill notebooks/05_atlas.ipynb out.ipynb`` run from anywhere writes into
the checkout's ``reports/``, as JupyterLab does. The notebook's folder is the one JupyterLab names
for the kernel (``JPY_SESSION_NAME``, the notebook's path), else the workbench's ``notebooks/``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from workbench.devices.device import resolve_device
from workbench.devices.kinds import DEVICE_CHOICES


class ParameterError(ValueError):
    """A notebook parameter the notebook cannot run with; the message names it."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_list(name: str, value: object) -> list[object]:
    # papermill passes YAML/JSON lists; a bare scalar is accepted as a one-element list.
    if isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, (int, str)):
        items = [value]
    else:
        raise ParameterError(f"{name}: {value!r} is not a list")
    if not items:
        raise ParameterError(f"{name}: the list is empty (give at least one value)")
    return items


def check_int(name: str, value: object, low: int, high: int) -> int:
    """One integer in ``[low, high]``."""
    if not _is_int(value):
        raise ParameterError(f"{name}: {value!r} is not an integer (allowed: {low} to {high})")
    assert isinstance(value, int)
    if not low <= value <= high:
        raise ParameterError(f"{name}: {value} is out of range (allowed: {low} to {high})")
    return value


def check_ints(name: str, value: object, low: int, high: int) -> tuple[int, ...]:
    """A non-empty list of integers in ``[low, high]``, sorted and without repeats."""
    items = [check_int(f"{name}[{i}]", item, low, high) for i, item in enumerate(_as_list(name, value))]
    return tuple(sorted(set(items)))


def check_choices(name: str, value: object, allowed: Iterable[str]) -> tuple[str, ...]:
    """A non-empty list of names from ``allowed``, in the order ``allowed`` gives them."""
    options = tuple(allowed)
    items = _as_list(name, value)
    for item in items:
        if item not in options:
            raise ParameterError(f"{name}: {item!r} is not one of {', '.join(options)}")
    return tuple(option for option in options if option in items)


def check_choice(name: str, value: object, allowed: Iterable[str]) -> str:
    options = tuple(allowed)
    if value not in options:
        raise ParameterError(f"{name}: {value!r} is not one of {', '.join(options)}")
    assert isinstance(value, str)
    return value


def check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ParameterError(f"{name}: {value!r} is not a boolean (allowed: True, False)")
    return value


def check_device(value: object) -> str:
    """``auto``, ``cpu``, ``cuda`` or ``npu``, resolved to the device the tensors will live on."""
    name = check_choice("device", value, DEVICE_CHOICES)
    try:
        return str(resolve_device(name))
    except ValueError as err:  # e.g. "cuda" asked for on a machine without one
        raise ParameterError(str(err)) from None  # the message already names "device"


NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"


def notebook_folder() -> Path:
    """The running notebook's folder: JupyterLab's session path when it names a notebook that exists,
    else the workbench's ``notebooks/`` (papermill tells the kernel nothing of its input path)."""
    session = Path(os.environ.get("JPY_SESSION_NAME", ""))
    if session.suffix == ".ipynb" and session.is_absolute() and session.is_file():
        return session.parent
    return NOTEBOOKS_DIR


def resolve_folder(value: str | Path) -> Path:
    """A folder parameter as an absolute path: a relative one is read against ``notebook_folder()``."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else (notebook_folder() / path).resolve()


def check_cache_dir(value: object) -> Path | None:
    """The sweep cache folder (relative: to the notebook's folder), or None for no cache."""
    if value is None:
        return None
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise ParameterError(f"cache_dir: {value!r} is not a folder name (or None for no cache)")
    return resolve_folder(value)


def check_output_dir(value: object) -> Path:
    """The output folder (created; relative: to the notebook's folder), with its ``figures/``
    subfolder where notebooks write figures."""
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise ParameterError(f"output_dir: {value!r} is not a folder name")
    path = resolve_folder(value)
    try:
        (path / "figures").mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ParameterError(f"output_dir: cannot create {str(path)!r} ({err.strerror})") from None
    return path
