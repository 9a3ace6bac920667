"""The README's commands, run as a user runs them.

Every command of the README's fenced ``bash`` blocks (each line, ``&&`` chains split, comments
dropped) is either run or listed in :data:`SKIPPED` with the reason. They run in order, from a
scratch folder laid out like a fresh clone: the repository's ``train.py`` and ``configs/`` in the
working folder, and ``data/bloodmnist.npz`` where the configs download it to, a file in MedMNIST's
format with the official split sizes and tiny content (``tests/data/conftest.py``), so the tests
never need the real data or the internet. Training commands (``python train.py fit ...``) run as written with
:data:`FEW_STEPS` appended (``--trainer.max_epochs 1 --trainer.limit_train_batches 2
--trainer.limit_val_batches 1``): a full training takes minutes. Every other command runs exactly as
written. The README's ``python`` blocks run in this process.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from lightning.pytorch import Trainer

from gradskip_lightning import GradSkipCallback
from tests.data.conftest import write_medmnist_file

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The test command: the README and CI run exactly this.
TEST_COMMAND = "python -m pytest -q -n 2 --doctest-modules gradskip_lightning benchmarks tests"
#: Appended to every training command: one epoch of two training and one validation batch.
FEW_STEPS = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]
#: README commands this test does not run, and why.
SKIPPED = {
    'pip install -e ".[dev]"': "installs into the running environment (.ci/run installs the project this way)",
    TEST_COMMAND: "the test suite itself, this test included",
    "python -m mkdocs serve": "a server that runs until it is stopped",
    "python -m mkdocs build --strict": ".ci/run builds the site strictly on every run (into a temporary folder)",
}


def readme_blocks(language: str) -> list[str]:
    """The README's fenced code blocks of ``language``, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(), flags=re.M | re.S)


def readme_commands() -> list[list[str]]:
    """Every command of the README's ``bash`` blocks as its arguments, ``&&`` chains split."""
    commands = []
    for block in readme_blocks("bash"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            while words:
                end = words.index("&&") if "&&" in words else len(words)
                commands.append(words[:end])
                words = words[end + 1 :]
    return commands


def is_training(command: list[str]) -> bool:
    return command[:3] == ["python", "train.py", "fit"]


def test_every_readme_command_is_run_or_skipped_for_a_reason():
    commands = readme_commands()
    skipped = [shlex.split(command) for command in SKIPPED]
    assert all(command in commands for command in skipped), "SKIPPED lists a command the README no longer has"
    assert shlex.split(TEST_COMMAND) in commands
    assert TEST_COMMAND in (ROOT / ".ci" / "run").read_text().splitlines()  # CI runs the README's test command
    run = [command for command in commands if command not in skipped]
    assert all(command[0] == "python" for command in run), run  # each runs with this interpreter
    assert [c for c in run if is_training(c)] == [  # none names a folder a fresh clone does not have
        ["python", "train.py", "fit", "--config", "configs/planted_shapes.yaml"],
        ["python", "train.py", "fit", "--config", "configs/bloodmnist.yaml"],
        ["python", "train.py", "fit", "--config", "configs/bloodmnist_shortcut.yaml"],
    ]


def test_the_readme_python_blocks_run():
    """Each ``python`` block runs as written (the Trainer snippet builds its Trainer; nothing is fitted)."""
    blocks = readme_blocks("python")
    assert len(blocks) == 2
    names: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), names)  # noqa: S102 - the README's own code
    trainer = names["trainer"]
    assert isinstance(trainer, Trainer)
    (callback,) = [c for c in trainer.callbacks if isinstance(c, GradSkipCallback)]
    assert callback.probes.num_probes == 32 and callback.methods.names == ("gradskip", "rollout")


@pytest.mark.slow
def test_the_readme_bash_commands_run_as_written(tmp_path):
    """Every command not in SKIPPED, in README order, from a workspace-like scratch folder; training
    commands with FEW_STEPS appended. Each exits 0; each training's callback names its maps folder;
    the timeline command draws the last run."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").symlink_to(ROOT / "train.py")
    (work / "configs").symlink_to(ROOT / "configs", target_is_directory=True)
    data = work / "data"  # where the configs download bloodmnist.npz to: the test lays it there, offline
    data.mkdir()
    write_medmnist_file(data, "bloodmnist")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's package, whatever is installed
    skipped = [shlex.split(command) for command in SKIPPED]
    ran = []
    for command in readme_commands():
        if command in skipped:
            continue
        argv = [sys.executable, *command[1:], *(FEW_STEPS if is_training(command) else [])]
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{shlex.join(command)}:\n{done.stderr[-4000:]}"
        if is_training(command):
            assert "GradSkip maps of this run: " in done.stderr, done.stderr[-3000:]
        ran.append(command)
    assert len(ran) == 4  # three trainings and the timeline
    assert (work / "timeline.png").stat().st_size > 10_000
