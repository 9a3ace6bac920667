"""A benchmark's two sets of defaults: the full run and ``--quick`` (a CI-sized run).

An option given on the command line wins over both.

Example:
    >>> import argparse
    >>> profiles = Profiles(full={"seeds": [0, 1, 2]}, quick={"seeds": [0]})
    >>> parser = argparse.ArgumentParser()
    >>> _ = parser.add_argument("--quick", action="store_true")
    >>> profiles.add(parser, "--seeds", "training seeds", nargs="+", type=int)
    >>> profiles.apply(parser.parse_args(["--quick"])).seeds, profiles.apply(parser.parse_args([])).seeds
    ([0], [0, 1, 2])
    >>> profiles.apply(parser.parse_args(["--quick", "--seeds", "4"])).seeds
    [4]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Profiles:
    """Option name (``dest``) -> default of the full run, and of ``--quick``; both name the same options."""

    full: dict[str, Any]
    quick: dict[str, Any]

    def __post_init__(self) -> None:
        if set(self.full) != set(self.quick):
            got = f"{sorted(self.full)} and {sorted(self.quick)}"
            raise ValueError(f"full and quick must set the same options, got {got}")

    def add(self, parser: argparse.ArgumentParser, flag: str, help_text: str, **kwargs: Any) -> None:
        """Add ``flag`` with no default of its own; its help text names both defaults."""
        key = flag.removeprefix("--").replace("-", "_")
        text = f"{help_text} (default {self.full[key]}; --quick: {self.quick[key]})"
        parser.add_argument(flag, default=argparse.SUPPRESS, help=text, **kwargs)

    def apply(self, args: argparse.Namespace) -> argparse.Namespace:
        """Fill the options not given from the profile ``args.quick`` picks; returns ``args``."""
        for key, value in (self.quick if args.quick else self.full).items():
            vars(args).setdefault(key, value)
        return args
