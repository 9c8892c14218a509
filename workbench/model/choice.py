"""A closed set of names a case field takes (mode, replay, gather), parsed with one-line errors."""

from __future__ import annotations

import enum
from typing import TypeVar

C = TypeVar("C", bound="Choice")


class Choice(str, enum.Enum):
    """A ``str`` enum whose ``parse`` names the field (the class name, lower case) and the allowed values."""

    @classmethod
    def parse(cls: type[C], value: str | C) -> C:
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise ValueError(f"{cls.__name__.lower()}: {value!r} is not one of {allowed}") from None
