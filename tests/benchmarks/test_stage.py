"""The stage-cost benchmark runs the discovery stage on kept weights both ways, back to back, and reports both."""

from __future__ import annotations

import pytest
import torch

from benchmarks.__main__ import build_parser
from benchmarks.discovery.variants import DATASETS, make_datamodule
from benchmarks.stage import PATHS, run
from benchmarks.training import configured_model


def _keep_random_weights(folder) -> None:
    """The planted-shapes config's model, at its initial weights, kept as the discovery benchmark keeps one."""
    datamodule = make_datamodule("planted_shapes", "clean", 0, None)
    datamodule.setup("fit")
    torch.manual_seed(0)
    model = configured_model(DATASETS["planted_shapes"].config, datamodule)
    target = folder / "planted_shapes" / "clean" / "seed0"
    target.mkdir(parents=True)
    torch.save(model.state_dict(), target / "epoch1.pt")


def test_both_paths_run_on_the_same_kept_model_and_the_first_look_forwards_no_more(tmp_path, capsys):
    _keep_random_weights(tmp_path)
    args = build_parser().parse_args(
        ["stage", "--weights", str(tmp_path), "--models", "clean/0/1", "--dataset", "planted_shapes"]
    )
    before, after = run(args)
    assert [before["path"], after["path"]] == list(PATHS) and before["model"] == after["model"] == "clean/0/1"
    assert after["hotspot_images"] <= before["hotspot_images"] and after["property_images"] < before["property_images"]
    assert before["flagged"] == after["flagged"]
    printed = capsys.readouterr().out
    assert "the same flags on 1 of 1 models" in printed and "| **median** | first look |" in printed
    (alone,) = run(build_parser().parse_args(["stage", "--weights", str(tmp_path), "--models", "clean/0/1",
                                              "--dataset", "planted_shapes", "--paths", "first look"]))  # fmt: skip
    assert alone["path"] == "first look" and alone["flagged"] == after["flagged"]
    assert "First look / every recipient" not in capsys.readouterr().out
    with pytest.raises(FileNotFoundError, match="--keep-weights"):
        run(build_parser().parse_args(["stage", "--weights", str(tmp_path), "--models", "clean/0/2",
                                       "--dataset", "planted_shapes"]))  # fmt: skip
