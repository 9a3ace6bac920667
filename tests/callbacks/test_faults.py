"""Faults a real run meets: a changed probe set on resume, skipped epochs under monitors, failing
sinks, setup-time refusals, mid-epoch validation, weight averaging, misleading messages."""

from __future__ import annotations

import csv
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.pytorch import Callback, seed_everything
from lightning.pytorch.callbacks import EarlyStopping, EMAWeightAveraging, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from gradskip_lightning import GradSkipCallback, ProbeImages
from gradskip_lightning.engine.output.files import read_maps
from gradskip_lightning.engine.probes import load_probes
from gradskip_lightning.engine.settings import ProbeSettings, ScoreSettings
from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer

FAST = dict(probes=ProbeSettings(num_probes=8), scores=ScoreSettings(insertion_steps=4), progress=False)
INSERTION = "faithfulness/gradskip/insertion"


def _rows(log_dir: str | Path, key: str) -> list[dict[str, float]]:
    with open(Path(log_dir) / "metrics.csv") as handle:
        return [{k: float(v) for k, v in row.items() if v} for row in csv.DictReader(handle) if row.get(key)]


def _ours(caught: list[warnings.WarningMessage], text: str) -> list[str]:
    return [str(w.message) for w in caught if "GradSkipCallback" in str(w.message) and text in str(w.message)]


# ------------------------------------------------------------------------------------- resume


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A checkpoint after one epoch with 8 probes drawn from the validation set (seed 0)."""
    root = tmp_path_factory.mktemp("first")
    seed_everything(0)
    trainer = tiny_trainer(root, logger=False, callbacks=[GradSkipCallback(**FAST)], max_epochs=1)
    trainer.fit(tiny_module(), datamodule=tiny_data())
    path = root / "epoch0.ckpt"
    trainer.save_checkpoint(path)
    return path


def _resume(root: Path, checkpoint: Path, callback: GradSkipCallback, data) -> tuple[list[dict], list]:
    logger = CSVLogger(save_dir=str(root), name="resumed", version=0)
    trainer = tiny_trainer(root, logger=logger, callbacks=[callback], max_epochs=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(tiny_module(), datamodule=data, ckpt_path=str(checkpoint))
    assert trainer.current_epoch == 2
    return _rows(logger.log_dir, INSERTION), caught


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda: (dict(probe_images=ProbeImages(torch.randn(6, 3, 32, 32), torch.arange(6) % 4)), {}),
            id="fewer-explicit-probes",
        ),  # fmt: skip
        pytest.param(lambda: ({}, dict(seed=5)), id="other-images-under-the-same-ids"),
        pytest.param(lambda: ({}, dict(val_size=6)), id="smaller-validation-set"),
    ],
)
def test_a_changed_probe_set_on_resume_restarts_drift_with_one_warning(tmp_path, checkpoint, make):
    given, data_options = make()
    callback = GradSkipCallback(**given, **FAST)
    (row,), caught = _resume(tmp_path, checkpoint, callback, tiny_data(**data_options))
    assert row["gradskip/epoch"] == 1.0 and row["gradskip/skipped"] == 0.0
    assert "drift/gradskip/prev/spearman" not in row  # no reference: the stored maps are of other images
    assert len(_ours(caught, "drift references restart")) == 1, [str(w.message) for w in caught]


def test_the_same_probes_on_resume_keep_drift_without_a_warning(tmp_path, checkpoint):
    (row,), caught = _resume(tmp_path, checkpoint, GradSkipCallback(**FAST), tiny_data())
    assert -1 <= row["drift/gradskip/prev/spearman"] <= 1 and not _ours(caught, "drift references restart")


def test_the_checkpoints_probe_count_overriding_num_probes_is_said_once(tmp_path, checkpoint):
    callback = GradSkipCallback(probes=ProbeSettings(num_probes=12), scores=FAST["scores"], progress=False)
    (row,), caught = _resume(tmp_path, checkpoint, callback, tiny_data())
    assert len(_ours(caught, "probes.num_probes=12")) == 1 and len(callback.monitor.source.probes) == 8


def test_an_oversized_num_probes_is_trimmed_with_one_warning(tmp_path):
    callback = GradSkipCallback(probes=ProbeSettings(num_probes=100), scores=FAST["scores"], progress=False)
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[callback], max_epochs=1, limit_train_batches=1)
    with pytest.warns(UserWarning, match=r"probes.num_probes=100 .* 32") as caught:
        trainer.fit(tiny_module(), datamodule=tiny_data())
    assert len(_ours(caught, "num_probes=100")) == 1 and len(callback.monitor.source.probes) == 32


# ------------------------------------------------------------------------------------- skipped epochs


class _NaNWeightsFrom(Callback):
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch >= self.epoch:
            with torch.no_grad():
                for parameter in pl_module.parameters():
                    parameter.fill_(float("nan"))


def test_a_skipped_epoch_turns_monitored_scores_to_nan_for_checkpoint_and_early_stopping(tmp_path):
    seed_everything(0)
    logger = CSVLogger(save_dir=str(tmp_path), name="nan")
    best = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor=INSERTION, mode="max", save_top_k=3)
    stop = EarlyStopping(monitor=INSERTION, mode="max", patience=100, check_finite=True)
    callbacks = [GradSkipCallback(**FAST), _NaNWeightsFrom(2), best, stop]
    trainer = tiny_trainer(tmp_path, logger=logger, callbacks=callbacks, max_epochs=5, enable_checkpointing=True)
    with pytest.warns(UserWarning, match="explanation of epoch 2 skipped"):
        trainer.fit(tiny_module(), datamodule=tiny_data())
    assert stop.stopped_epoch == 2 and trainer.current_epoch == 3  # stopped at the first skipped epoch
    assert torch.isnan(trainer.callback_metrics[INSERTION])
    scores = {int(torch.load(path, weights_only=True)["epoch"]): float(v) for path, v in best.best_k_models.items()}
    assert all(np.isfinite(v) == (epoch < 2) for epoch, v in scores.items()), scores  # no stale score kept
    assert best.best_model_score is not None and torch.isfinite(best.best_model_score)
    skipped = {row["gradskip/epoch"]: row["gradskip/skipped"] for row in _rows(logger.log_dir, "gradskip/skipped")}
    assert skipped == {0.0: 0.0, 1.0: 0.0, 2.0: 1.0}


def test_time_s_covers_the_sinks(tmp_path, monkeypatch):
    from gradskip_lightning.engine.output import sinks

    real = sinks.MapsFileSink.log

    def slow(self, report, sheet):
        time.sleep(0.5)
        real(self, report, sheet)

    monkeypatch.setattr(sinks.MapsFileSink, "log", slow)
    logger = CSVLogger(save_dir=str(tmp_path), name="time")
    trainer = tiny_trainer(tmp_path, logger=logger, callbacks=[GradSkipCallback(**FAST)], max_epochs=1)
    trainer.fit(tiny_module(), datamodule=tiny_data())
    (row,) = _rows(logger.log_dir, INSERTION)
    assert row["gradskip/time_s"] >= 0.5


def test_one_failing_sink_warns_and_the_others_still_write(tmp_path, monkeypatch):
    from gradskip_lightning.engine.output import sinks

    def unwritable(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "maps")

    monkeypatch.setattr(sinks, "write_probes", unwritable)
    logger = CSVLogger(save_dir=str(tmp_path), name="sinks")
    trainer = tiny_trainer(tmp_path, logger=logger, callbacks=[GradSkipCallback(**FAST)], max_epochs=1)
    with pytest.warns(UserWarning, match="MapsFileSink failed .*PermissionError"):
        trainer.fit(tiny_module(), datamodule=tiny_data())
    (row,) = _rows(logger.log_dir, INSERTION)
    assert row[INSERTION] == pytest.approx(float(trainer.callback_metrics[INSERTION]), abs=1e-6)
    assert (Path(logger.log_dir) / "gradskip" / "images" / "epoch_0000").is_dir()


# ------------------------------------------------------------------------------------- setup-time checks


def _probes(count: int = 4, dtype: torch.dtype = torch.float32) -> dict:
    data = tiny_data()
    data.setup("validate")
    images = torch.stack([data.val_dataset[i][0] for i in range(count)])
    return dict(probe_images=ProbeImages(images.to(dtype), torch.arange(count) % 4))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_explicit_probes_of_another_float_dtype_are_converted_with_a_note(tmp_path, dtype):
    with pytest.warns(UserWarning, match=f"ProbeImages' images are {dtype}.*converted to torch.float32"):
        callback = GradSkipCallback(**_probes(dtype=dtype), **FAST)
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[callback], max_epochs=1, limit_train_batches=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(tiny_module(), datamodule=tiny_data())
    assert not _ours(caught, "skipped") and INSERTION in trainer.callback_metrics


def test_a_double_precision_model_is_explained_in_its_dtype(tmp_path):
    trainer = tiny_trainer(
        tmp_path, logger=False, callbacks=[GradSkipCallback(**FAST)], max_epochs=1, limit_train_batches=1,
        precision="64-true",
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(tiny_module(), datamodule=tiny_data())
    assert not _ours(caught, "skipped") and INSERTION in trainer.callback_metrics


class _Steps(Callback):
    def __init__(self) -> None:
        self.steps = 0

    def on_train_batch_end(self, *args):
        self.steps += 1


@pytest.mark.parametrize(
    "trainer_options, callback_options, match",
    [
        (dict(precision="bf16-true"), {}, r"precision='bf16-true'.*'bf16-mixed'"),
        ({}, dict(scores=ScoreSettings(insertion_steps=17)), r"insertion_steps=17 .* 16 patches"),
        ({}, dict(scores=ScoreSettings(insertion_steps=4, fvt_top_k=20)), r"fvt_top_k=20 .* 16 patches"),
    ],
)
def test_setups_that_would_skip_every_epoch_are_refused_before_the_first_step(
    tmp_path, trainer_options, callback_options, match
):
    options = {**FAST, **callback_options}
    steps = _Steps()
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[GradSkipCallback(**options), steps], **trainer_options)
    with pytest.raises(ValueError, match=match):
        trainer.fit(tiny_module(), datamodule=tiny_data())
    assert steps.steps == 0


@pytest.mark.parametrize(
    "prefix", ["..", "../", "gs/../../x/", "./gs/", "/abs/", "gs\\..\\"]
)  # fmt: skip
def test_a_log_prefix_leaving_the_run_folder_is_refused(prefix):
    with pytest.raises(ValueError, match="log_prefix"):
        GradSkipCallback(log_prefix=prefix)


@pytest.mark.parametrize("name", ["a/b", "", ".hidden", "with space"])
def test_region_names_outside_the_key_grammar_are_refused(name):
    masks = {name: torch.zeros(2, 32, 32, dtype=torch.bool)}
    with pytest.raises(ValueError, match="region name"):
        GradSkipCallback(ProbeImages(images=torch.zeros(2, 3, 32, 32), labels=torch.zeros(2), masks=masks))


# ------------------------------------------------------------------------------------- what is explained


def test_mid_epoch_validation_is_not_explained_the_epoch_end_is(tmp_path):
    logger = CSVLogger(save_dir=str(tmp_path), name="mid")
    trainer = tiny_trainer(
        tmp_path, logger=logger, callbacks=[GradSkipCallback(**FAST)], max_epochs=2, val_check_interval=0.5
    )
    with pytest.warns(UserWarning, match="val_check_interval") as caught:
        trainer.fit(tiny_module(), datamodule=tiny_data())
    assert len(_ours(caught, "val_check_interval")) == 1
    rows = _rows(logger.log_dir, INSERTION)
    assert [(row["gradskip/epoch"], row["step"]) for row in rows] == [(0.0, 3.0), (1.0, 7.0)]  # 4 batches an epoch


@pytest.mark.parametrize("ours_first", [True, False])
def test_with_ema_the_averaged_weights_are_explained_whatever_the_order(tmp_path, ours_first):
    seed_everything(0)
    ema = EMAWeightAveraging(decay=0.5)
    logger = CSVLogger(save_dir=str(tmp_path), name="ema")
    ours = GradSkipCallback(**FAST)
    callbacks = [ours, ema] if ours_first else [ema, ours]
    trainer = tiny_trainer(tmp_path, logger=logger, callbacks=callbacks, max_epochs=1)
    module = tiny_module()
    trainer.fit(module, datamodule=tiny_data())  # the averaged weights are in the module after fit
    explained = read_maps(Path(logger.log_dir) / "gradskip" / "maps").epochs[-1]["token_maps"]
    probes = ours.monitor.source.probes
    expected = ours.monitor.prepared.explainers["gradskip"].explain(probes.images, probes.labels).token_maps
    np.testing.assert_allclose(explained, expected.detach().numpy(), atol=1e-5)


# ------------------------------------------------------------------------------------- messages


class _Items(torch.utils.data.Dataset):
    def __init__(self, third) -> None:
        self.third = third

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index):
        return torch.zeros(3, 32, 32), 0, self.third


@pytest.mark.parametrize(
    "third, error",
    [("patient_003.dcm", TypeError), (3, TypeError), (torch.rand(32, 32), ValueError)],
    ids=["string", "id", "float-weight-map"],
)
def test_a_third_item_that_is_not_a_mask_is_refused_naming_the_item_forms(third, error):
    with pytest.raises(error, match=r"dataset item 0.*\(image, label, mask \(H, W\) bool or 0/1\)"):
        load_probes(_Items(third), [0])


def test_a_zero_one_float_mask_is_accepted():
    probes = load_probes(_Items((torch.rand(32, 32) > 0.5).float()), [0, 1])
    assert probes.masks is not None and probes.masks.dtype == torch.bool


def test_the_non_finite_warning_names_probe_ids(tmp_path):
    given = _probes(count=4)
    images = given["probe_images"].probe_set.images
    images[3] = 1e30  # overflows inside the ViT: probe 3, position 1 of the second chunk
    images[3, :, ::2] = -1e30
    options = dict(FAST, probes=ProbeSettings(explain_batch_size=2))
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[GradSkipCallback(**given, **options)], max_epochs=1)
    with pytest.warns(UserWarning, match=r"probe ids \[3\]"):
        trainer.fit(tiny_module(), datamodule=tiny_data())


def test_a_mistyped_local_path_in_the_timeline_says_it_does_not_exist(tmp_path):
    from gradskip_lightning.timeline import find_maps_dir

    with pytest.raises(FileNotFoundError, match="does not exist"):
        find_maps_dir(tmp_path / "lightning_logs" / "versoin_0")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        find_maps_dir("lightning_logs/versoin_0")


def test_the_unsupported_model_message_says_it_once():
    import torchvision

    from gradskip_lightning.engine.setup import explainers_for

    with pytest.raises(TypeError) as caught:
        explainers_for(torchvision.models.resnet18(num_classes=3), ["gradskip"], {})
    message = str(caught.value)
    assert message.lower().count("cannot explain") == 1 and ".." not in message, message
    assert "torchvision.models.resnet.ResNet" in message
    assert explainers_for(torchvision.models.VisionTransformer(32, 8, 1, 1, 8, 8), ["gradskip"], {})  # a family now
