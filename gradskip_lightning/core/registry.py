"""A name -> entry table in registration order, for the choices of one axis (methods of a family,
model families): each name is registered once, looked up with an error naming the choices.

Example:
    >>> colours = Registry[int]("colour")
    >>> colours.register("red", 1)
    1
    >>> colours["red"], colours.names, "blue" in colours
    (1, ('red',), False)
    >>> colours["blue"]
    Traceback (most recent call last):
    ...
    ValueError: Unknown colour 'blue'; choose one of ('red',)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

__all__ = ["Registry"]

Entry = TypeVar("Entry")


class Registry(Generic[Entry]):
    """Entries by name, in registration order.

    Args:
        what: what an entry is ("method", "model family"), for the error messages.
        entries: the table to start from (name -> entry), in its order.
    """

    def __init__(self, what: str, entries: Mapping[str, Entry] | None = None) -> None:
        self.what = what
        self._entries: dict[str, Entry] = {}
        for name, entry in (entries or {}).items():
            self.register(name, entry)

    def register(self, name: str, entry: Entry) -> Entry:
        """Add ``entry`` under ``name`` and return it; ValueError if the name is taken."""
        if name in self._entries:
            raise ValueError(f"{self.what} {name!r} is registered already")
        self._entries[name] = entry
        return entry

    def __getitem__(self, name: str) -> Entry:
        if name not in self._entries:
            raise ValueError(f"Unknown {self.what} {name!r}; choose one of {self.names}")
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self._entries)

    def items(self) -> Iterator[tuple[str, Entry]]:
        """(name, entry) pairs in registration order."""
        return iter(self._entries.items())

    def values(self) -> Iterator[Entry]:
        """The entries in registration order."""
        return iter(self._entries.values())
