"""The example of docs/guides/hf-trainer.md runs as written and learns: the evaluation accuracy and the maps'
insertion score far above chance (1/3) at the last epoch, the best checkpoint chosen by the insertion score."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

from gradskip_lightning.engine.output.files import read_maps

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "hf-trainer.md"


def test_the_guides_example_runs(tmp_path, monkeypatch, capsys):
    (code,) = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    script = tmp_path / "example.py"
    script.write_text(code)
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")
    record = read_maps(tmp_path / "vit-squares" / "gradskip" / "maps")
    assert [int(epoch["epoch"]) for epoch in record.epochs] == [0, 1, 2, 3, 4]
    printed = capsys.readouterr().out
    accuracy = [float(a) for a in re.findall(r"^epoch \d: eval accuracy (\S+)$", printed, flags=re.M)]
    insertion = [float(a) for a in re.findall(r"^epoch \d: insertion (\S+)$", printed, flags=re.M)]
    assert len(accuracy) == len(insertion) == 5, printed[-1000:]
    assert accuracy[-1] >= 0.9 and insertion[-1] >= 0.8, (accuracy, insertion)  # chance: 1/3 each
    best = re.search(r"best insertion score (0\.\d+) at vit-squares/checkpoint-(\d+)", printed)
    assert best and float(best[1]) == pytest.approx(max(insertion), abs=5e-4), printed[-500:]
