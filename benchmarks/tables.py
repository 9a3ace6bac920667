"""Markdown of the benchmarks' reports: tables, the run's machine in a sentence, and a generated section
written between two marker lines of a markdown file (the hand-written text around it survives a rerun)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_markdown_argument(parser: argparse.ArgumentParser) -> None:
    """The ``--markdown PATH`` option of a subcommand that writes its tables into a markdown file."""
    parser.add_argument(
        "--markdown", type=Path, default=None, help="write the tables into this markdown file (between markers)"
    )


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """The lines of a markdown table of ``header`` and ``rows`` (cells).

    >>> print("\\n".join(table(["method", "score"], [["gradskip", "0.90"]])))
    | method | score |
    |---|---|
    | gradskip | 0.90 |
    """
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def machine_sentence(machine: dict[str, Any], wall_seconds: float, *, what: str = "Whole run") -> str:
    """The machine of :func:`~benchmarks.runs.machine` and the run's wall time (with its CPU time when
    ``machine`` has ``cpu_seconds``), in words; ``what`` names the run.

    >>> facts = {"cpu": "EPYC", "logical_cpus": 2, "torch": "2.9", "threads": 1, "load_average": 1.5}
    >>> machine_sentence(facts, 90.0)[66:]
    'Whole run: 1.5 min wall; 1-minute load average at the end 1.5 (the machine is shared).'
    >>> with_cpu = machine_sentence({**facts, "cpu_seconds": 60.0}, 90.0, what="Whole run (training included)")
    >>> with_cpu[66:127]
    'Whole run (training included): 1.5 min wall, 1.0 min CPU time'
    """
    seconds = machine.get("cpu_seconds")
    cpu = "" if seconds is None else f", {seconds / 60:.1f} min CPU time summed over threads"
    return (
        f"Machine: {machine['cpu']}, {machine['logical_cpus']} logical CPUs, torch {machine['torch']} with "
        f"{machine['threads']} intra-op threads. {what}: {wall_seconds / 60:.1f} min wall{cpu}; 1-minute load "
        f"average at the end {machine['load_average']:.1f} (the machine is shared)."
    )


def generated_section(begin: str, end: str, command: str, paragraphs: list[str], body: list[str]) -> str:
    """A report's generated section: ``begin``, the ``command`` that made it, the ``paragraphs`` (run facts,
    definitions), the ``body`` lines (its tables), ``end``.

    >>> generated_section("<!-- a -->", "<!-- b -->", "cmd", ["Facts."], ["| x |"]).splitlines()
    ['<!-- a -->', '', 'Command: `cmd`', '', 'Facts.', '', '| x |', '<!-- b -->']
    """
    return "\n".join(
        [begin, "", f"Command: `{command}`", "", *(line for p in paragraphs for line in (p, "")), *body, end]
    )


def write_section(path: Path, section: str, begin: str, end: str) -> None:
    """Put ``section`` (starting with ``begin``, ending with ``end``) into the markdown file ``path``: in
    place of the text between the markers if both exist, else appended (a new file if none)."""
    text = path.read_text() if path.exists() else ""
    if begin in text and end in text:
        text = text[: text.index(begin)] + section + text[text.index(end) + len(end) :]
    else:
        text = (text.rstrip() + "\n\n" if text else "") + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
