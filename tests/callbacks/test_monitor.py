"""The callback's scalars are monitorable: a real EarlyStopping and ModelCheckpoint read them."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from lightning.pytorch import seed_everything
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from gradskip_lightning import GradSkipCallback, ProbeImages, ProbeSettings, ScoreSettings
from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer

KEY = "regions/gradskip/mass/object"


def _logged(log_dir: str, key: str) -> list[float]:
    with open(Path(log_dir) / "metrics.csv") as handle:
        return [float(row[key]) for row in csv.DictReader(handle) if row.get(key)]


def test_early_stopping_on_a_region_mass_stops_a_real_fit(tmp_path):
    seed_everything(0)
    logger = CSVLogger(save_dir=str(tmp_path), name="stop")
    stop = EarlyStopping(monitor=KEY, mode="max", stopping_threshold=0.0)  # any mass >= 0 stops
    trainer = tiny_trainer(
        tmp_path,
        logger=logger,
        callbacks=[GradSkipCallback(probes=ProbeSettings(num_probes=8), scores=ScoreSettings(insertion_steps=4)), stop],
        max_epochs=5,
    )
    trainer.fit(tiny_module(), datamodule=tiny_data())
    assert trainer.current_epoch == 1 and stop.stopped_epoch == 0  # stopped after the first explained epoch
    (logged,) = _logged(logger.log_dir, KEY)
    assert float(trainer.callback_metrics[KEY]) == pytest.approx(logged, abs=1e-6)


def test_model_checkpoint_keeps_the_epoch_with_the_best_region_mass(tmp_path):
    seed_everything(0)
    logger = CSVLogger(save_dir=str(tmp_path), name="best")
    best = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor=KEY, mode="max", filename="best", save_top_k=1)
    trainer = tiny_trainer(
        tmp_path,
        logger=logger,
        callbacks=[GradSkipCallback(probes=ProbeSettings(num_probes=8), scores=ScoreSettings(insertion_steps=4)), best],
        max_epochs=3,
        enable_checkpointing=True,
    )
    trainer.fit(tiny_module(), datamodule=tiny_data())
    logged = _logged(logger.log_dir, KEY)
    assert len(logged) == 3
    assert float(best.best_model_score) == pytest.approx(max(logged), abs=1e-6)
    saved = torch.load(best.best_model_path, weights_only=True)
    assert saved["epoch"] == logged.index(max(logged))


def test_nan_scores_are_left_out_of_callback_metrics(tmp_path):
    data = tiny_data()
    data.setup("validate")
    images, labels, masks = zip(*(data.val_dataset[i] for i in range(4)))
    regions = {"object": torch.stack(masks), "nothing": torch.zeros(4, 32, 32, dtype=torch.bool)}
    callback = GradSkipCallback(
        ProbeImages(images=torch.stack(images), labels=torch.stack(labels), masks=regions),
        scores=ScoreSettings(insertion_steps=4),
    )
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[callback], max_epochs=1)
    trainer.fit(tiny_module(), datamodule=data)
    assert 0 <= float(trainer.callback_metrics[KEY]) <= 1
    assert "regions/gradskip/mass/nothing" not in trainer.callback_metrics  # an empty region has no score
