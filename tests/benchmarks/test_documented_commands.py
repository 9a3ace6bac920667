"""Every ``python -m benchmarks ...`` command written in the docs and the README parses.

The commands are taken from inline code and fenced blocks (a line ending in ``\\`` continues on the next;
``&&`` chains are split; ``# comments`` dropped) and parsed by the entry point's own parser: an unknown
subcommand or flag, or a bad value, fails here. Nothing is trained.
"""

from __future__ import annotations

import argparse
import re
import shlex
from contextlib import redirect_stderr
from io import StringIO
from pathlib import Path

import pytest

from benchmarks.__main__ import SUBCOMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
ENTRY = "python -m benchmarks"
#: What a subcommand looks like (a misspelt one too); placeholders such as SUBCOMMAND or ... are not.
SUBCOMMAND = re.compile(r"[a-z][a-z_-]*")
#: A fenced block, or an inline code span (it may wrap across lines of a paragraph).
CODE = re.compile(r"```[^\n]*\n(.*?)```|`([^`\n]+(?:\n[^`\n]+)*)`", re.S)


def documented_commands(text: str) -> list[str]:
    """The ``python -m benchmarks`` commands of a markdown ``text``, each from ``python`` to its end; a
    mention of the entry point alone (``python -m benchmarks``, ``... SUBCOMMAND``, ``... ...``) is not one.

    >>> documented_commands("Run `OMP_NUM_THREADS=1 python -m benchmarks cost\\n--batch-size 8` && more")
    ['python -m benchmarks cost --batch-size 8']
    >>> block = "```bash\\npython -m benchmarks shortcut --quick   # 1 min\\n"
    >>> documented_commands(block + "a && python -m benchmarks gpu \\\\\\n  --json g.json\\n```")
    ['python -m benchmarks shortcut --quick', 'python -m benchmarks gpu --json g.json']
    >>> documented_commands("`python -m benchmarks`, `python -m benchmarks SUBCOMMAND`, `python -m benchmarks costs`")
    ['python -m benchmarks costs']
    """
    commands = []
    for match in CODE.finditer(text):
        block, inline = match.groups()
        lines = (block or "").replace("\\\n", " ").splitlines() if block is not None else [inline.replace("\n", " ")]
        for line in lines:
            for part in line.split("&&"):
                part = part.split(" #")[0]
                words = part[part.index(ENTRY) :].split() if ENTRY in part else []
                if len(words) > 3 and SUBCOMMAND.fullmatch(words[3]):
                    commands.append(" ".join(words))
    return commands


def _all_commands() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for command in documented_commands(page.read_text()):
            found.append((page.relative_to(ROOT).as_posix(), command))
    return found


COMMANDS = _all_commands()


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return build_parser()


def test_the_docs_name_every_subcommand():
    named = {shlex.split(command)[3] for _, command in COMMANDS if len(shlex.split(command)) > 3}
    assert named <= set(SUBCOMMANDS)
    assert len(COMMANDS) > 20  # the extraction finds them (the docs hold dozens)


@pytest.mark.parametrize("page, command", COMMANDS, ids=[f"{page}:{i}" for i, (page, _) in enumerate(COMMANDS)])
def test_a_documented_command_parses(parser, page, command):
    words = shlex.split(command)[3:]
    errors = StringIO()
    try:
        with redirect_stderr(errors):
            args = parser.parse_args(words)
    except SystemExit:
        pytest.fail(f"{page}: `{command}` does not parse: {errors.getvalue().strip()}")
    assert args.command == words[0]


@pytest.mark.parametrize("subcommand", list(SUBCOMMANDS))
def test_every_subcommand_prints_its_help(parser, subcommand, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args([subcommand, "--help"])
    assert exit_info.value.code == 0
    assert f"python -m benchmarks {subcommand}" in capsys.readouterr().out
