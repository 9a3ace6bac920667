"""The console's epoch lines: one line of metrics per epoch when stdout is not a terminal."""

from __future__ import annotations

import re

from lightning.pytorch import Callback
from lightning.pytorch.loggers import CSVLogger

from gradskip_lightning import GradSkipCallback, ProbeSettings, ScoreSettings
from gradskip_lightning.console import EpochLine, line_keys
from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer

LINE = re.compile(r"epoch (\d+)/(\d+) (.*) (\d+\.\d) s")


class Snapshots(Callback):
    """``trainer.callback_metrics`` at each training epoch's end, after the epoch line was printed."""

    def __init__(self) -> None:
        self.epochs: list[dict[str, float]] = []

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.epochs.append({k: float(v) for k, v in trainer.callback_metrics.items()})


def test_one_line_per_epoch_with_the_epoch_metrics_and_the_callbacks_scores(tmp_path, capsys):
    snapshots = Snapshots()
    callback = GradSkipCallback(probes=ProbeSettings(num_probes=4), scores=ScoreSettings(insertion_steps=4))
    trainer = tiny_trainer(
        tmp_path,
        max_epochs=3,
        limit_train_batches=2,
        limit_val_batches=1,
        logger=CSVLogger(tmp_path),
        callbacks=[callback, EpochLine(), snapshots],
    )
    trainer.fit(tiny_module(), datamodule=tiny_data())
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    assert len(lines) == 3, lines
    for epoch, (line, metrics) in enumerate(zip(lines, snapshots.epochs)):
        match = LINE.fullmatch(line)
        assert match and (int(match[1]), int(match[2])) == (epoch, 2), line
        shown = dict(pair.split("=") for pair in match[3].split(" "))
        expected = {k.removesuffix("_epoch"): metrics[k] for k in line_keys(metrics, ["gradskip/"])}
        assert set(shown) == set(expected) and len(shown) == len(match[3].split(" "))  # each key once
        assert {"train/loss", "val/loss", "val/acc", "faithfulness/gradskip/insertion"} <= set(shown)
        assert {"regions/gradskip/mass/object", "regions/gradskip/pointing_game"} <= set(shown)  # planted masks
        assert not any(k.endswith("_step") for k in shown)
        for name, text in shown.items():
            assert abs(float(text) - expected[name]) <= 5e-4 * max(1.0, abs(expected[name])), (name, text)
        assert 0.0 <= float(match[4]) < 600.0  # one decimal: two tiny batches can print 0.0 s on a fast machine
    assert snapshots.epochs[0]["val/loss"] != snapshots.epochs[2]["val/loss"]  # each line has its own epoch's values


def test_line_keys_order_the_model_metrics_then_each_callbacks_main_scores():
    metrics = dict.fromkeys(
        [
            "val/loss", "train/loss_step", "train/loss_epoch", "train/loss", "train/acc_epoch", "val/acc", "lr-AdamW",
            "regions/gs/mass/tag", "faithfulness/gs/deletion", "faithfulness/gs/insertion",
            "faithfulness/gs/insertion/rollout", "regions/gs/mass/object", "drift/gs/prev/spearman",
            "faithfulness/other/insertion",
        ],
        0.5,
    )  # fmt: skip
    assert line_keys(metrics, ["gs/"]) == [
        "train/acc_epoch", "train/loss", "val/acc", "val/loss",
        "faithfulness/gs/insertion", "faithfulness/gs/deletion", "regions/gs/mass/object", "regions/gs/mass/tag",
    ]  # fmt: skip


def test_a_score_the_budget_left_out_is_not_repeated_as_this_epochs(tmp_path, capsys):
    callback = GradSkipCallback(
        probes=ProbeSettings(num_probes=4, max_overhead=1e-6), scores=ScoreSettings(insertion_steps=4)
    )  # every epoch end is over this budget: the scores run at epoch 0 only
    trainer = tiny_trainer(
        tmp_path,
        max_epochs=3,
        limit_train_batches=2,
        limit_val_batches=1,
        logger=False,
        callbacks=[callback, EpochLine()],
    )
    trainer.fit(tiny_module(), datamodule=tiny_data())
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    assert len(lines) == 3
    assert "faithfulness/gradskip/insertion=" in lines[0]
    assert all("faithfulness/gradskip/insertion=" not in line and "val/acc=" in line for line in lines[1:])
    assert "faithfulness/gradskip/insertion" in trainer.callback_metrics  # still there for monitors: the last value
    assert "regions/gradskip/pointing_game=" in lines[2]  # computed every epoch
