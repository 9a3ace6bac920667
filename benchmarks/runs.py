"""Facts of a benchmark run: the machine, the command that ran, and the runs saved with ``--json`` that
``--report-from`` joins into one report."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch


def machine() -> dict[str, Any]:
    """CPU model, logical CPUs, torch version, intra-op threads, Python version and the 1-minute load
    average of this run (now)."""
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        cpu = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "")
    except (OSError, subprocess.CalledProcessError):
        cpu = ""
    return {
        "cpu": cpu or platform.processor(),
        "logical_cpus": torch.multiprocessing.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "load_average": os.getloadavg()[0],
    }


def command_line() -> str:
    """The command of this run as a user retypes it: ``python -m benchmarks`` and its arguments, after
    ``OMP_NUM_THREADS=<n>`` when that is set."""
    threads = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} " if "OMP_NUM_THREADS" in os.environ else ""
    return f"{threads}python -m benchmarks " + " ".join(sys.argv[1:])


def joined_runs(paths: list[Path]) -> tuple[list[dict[str, Any]], str, dict[str, Any]]:
    """The runs saved in ``paths`` (each ``{"command", "facts", ...}``), their commands joined with ``&&``
    and the first run's facts with the wall seconds of all of them summed."""
    runs = [json.loads(path.read_text()) for path in paths]
    command = " && ".join(saved["command"] for saved in runs)
    facts = {**runs[0]["facts"], "wall_seconds": sum(saved["facts"].get("wall_seconds", 0.0) for saved in runs)}
    return runs, command, facts


@dataclass
class RunClock:
    """Wall and CPU (all threads) time since a benchmark run started."""

    wall_start: float = field(default_factory=time.perf_counter)
    cpu_start: float = field(default_factory=time.process_time)

    def finish(self, name: str) -> dict[str, Any]:
        """Print the ``name`` benchmark's times; return the run's facts, as the reports take them: ``command``
        (:func:`command_line`), ``machine`` (:func:`machine` and ``cpu_seconds``) and ``wall_seconds``."""
        wall, cpu = time.perf_counter() - self.wall_start, time.process_time() - self.cpu_start
        facts = {**machine(), "cpu_seconds": cpu}
        print(
            f"\n{name} benchmark: {wall / 60:.1f} min wall, {cpu / 60:.1f} min CPU time (all threads), "
            f"on {facts['threads']} threads; load average now {facts['load_average']:.1f}"
        )
        return {"command": command_line(), "machine": facts, "wall_seconds": wall}
