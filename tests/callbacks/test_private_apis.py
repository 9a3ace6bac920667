"""The private or internal APIs of the libraries the callback still uses, each kept on purpose (the
reason is beside each use): these tests fail loudly when a library changes one."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import CSVLogger
from torch import nn

from gradskip_lightning.callbacks.host import logged_step
from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer


def test_the_epoch_metrics_step_is_lightnings_batches_that_stepped(tmp_path):
    """``fit_loop.epoch_loop._batches_that_stepped`` (callbacks.host.logged_step): the step Lightning
    logs its epoch metrics at, which differs from ``global_step`` under gradient accumulation."""
    import csv

    steps = []
    logger = CSVLogger(str(tmp_path))
    trainer = tiny_trainer(tmp_path, logger=logger, max_epochs=2, accumulate_grad_batches=2, num_sanity_val_steps=0)
    assert hasattr(trainer.fit_loop.epoch_loop, "_batches_that_stepped")
    module = tiny_module()
    module.on_validation_epoch_end = lambda: steps.append(logged_step(trainer))  # type: ignore[method-assign]
    trainer.fit(module, datamodule=tiny_data(train_size=64, batch_size=16))
    with open(f"{logger.log_dir}/metrics.csv") as handle:
        logged = [int(row["step"]) for row in csv.DictReader(handle) if row.get("val/acc")]
    assert steps == logged == [1, 3] and trainer.global_step == 4  # accumulation: the two counts differ


def test_the_validation_loop_loads_its_dataloaders_on_demand(tmp_path):
    """``fit_loop.epoch_loop.val_loop.setup_data()`` (callbacks.trainer_setup.loader_dataset) loads the fit's validation
    dataloaders before Lightning's own first validation."""
    from lightning.pytorch import Callback

    seen = []

    class Early(Callback):
        def on_train_start(self, trainer: Trainer, pl_module) -> None:
            trainer.fit_loop.epoch_loop.val_loop.setup_data()
            seen.append(trainer.val_dataloaders)

    tiny_trainer(tmp_path, logger=False, max_epochs=1, callbacks=[Early()], num_sanity_val_steps=0).fit(
        tiny_module(), datamodule=tiny_data()
    )
    assert seen and len(seen[0].dataset) == 32


def test_multihead_attention_still_resets_its_fused_in_proj():
    """``nn.MultiheadAttention._reset_parameters`` (the torchvision family's randomisation cascade)."""
    attention = nn.MultiheadAttention(8, 2, batch_first=True)
    with torch.no_grad():
        attention.in_proj_weight.zero_()
    attention._reset_parameters()
    assert attention.in_proj_weight.abs().sum() > 0 and torch.count_nonzero(attention.in_proj_bias) == 0


@pytest.mark.filterwarnings("ignore")
def test_wandb_runs_say_whether_they_are_offline(tmp_path, monkeypatch):
    """``Run.offline`` (the discovery alert prints the alert too when the run is offline)."""
    import wandb

    run = wandb.init(mode="offline", dir=str(tmp_path), project="gradskip-test")
    try:
        assert run.offline is True
    finally:
        wandb.finish()
