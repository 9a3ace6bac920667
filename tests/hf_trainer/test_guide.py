"""The example of docs/guides/hf-trainer.md runs as written: maps files per epoch, the best checkpoint chosen
by the callback's insertion score."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

from gradskip_lightning.engine.output.files import read_maps

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "hf-trainer.md"


def test_the_guides_example_runs(tmp_path, monkeypatch, capsys):
    (code,) = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    script = tmp_path / "example.py"
    script.write_text(code)
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")
    record = read_maps(tmp_path / "vit-squares" / "gradskip" / "maps")
    assert [int(epoch["epoch"]) for epoch in record.epochs] == [0, 1]
    printed = capsys.readouterr().out
    assert re.search(r"best insertion score 0\.\d+ at vit-squares/checkpoint-[36]", printed), printed[-500:]
