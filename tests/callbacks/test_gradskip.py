"""GradSkipCallback with real Trainers: CSV and no logger, invisibility, resume, faults."""

from __future__ import annotations

import csv
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.pytorch import Callback, LightningModule, seed_everything
from lightning.pytorch.loggers import CSVLogger

from gradskip_lightning import (
    GradSkipCallback,
    MethodSettings,
    Normalisation,
    ProbeImages,
    ProbeSettings,
    RenderSettings,
    ScoreSettings,
)
from gradskip_lightning.metrics import drift
from tests.callbacks.helpers import callback_from_yaml, tiny_data, tiny_module, tiny_trainer

FAST = dict(probes=ProbeSettings(num_probes=8), scores=ScoreSettings(insertion_steps=4))


def _csv_rows(log_dir: str | Path, key: str) -> list[dict[str, float]]:
    with open(Path(log_dir) / "metrics.csv") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get(key)]
    return [{k: float(v) for k, v in row.items() if v} for row in rows]


# ------------------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: ProbeSettings(num_probes=0), r"probes\.num_probes must be a positive integer, got 0"),
        (lambda: GradSkipCallback(every_n_epochs=1.5), "every_n_epochs must be a positive integer"),
        (lambda: MethodSettings(method="gradcam"), r"methods\.method must be one of .*got 'gradcam'"),
        (lambda: MethodSettings(compare=["gradskip"]), r"methods\.compare must be names .* other than 'gradskip'"),
        (lambda: ScoreSettings(target="logit"), r"scores\.target must be one of"),
        (lambda: ScoreSettings(deletion_baseline="noise"), r"scores\.deletion_baseline must be one of"),
        (lambda: ScoreSettings(drift_top_k=0.0), r"scores\.drift_top_k must be a fraction"),
        (lambda: GradSkipCallback(normalisation={"mean": (0.5,), "std": (0.5, 0.5)}), r"as many values .* 1 and 2"),
        (lambda: GradSkipCallback(normalisation={"mean": (0.5,), "std": (0.0,)}), r"normalisation\.std must be pos"),
        (lambda: Normalisation(mean=(), std=()), r"normalisation\.mean must be a list of 1 or C numbers"),
        (lambda: Normalisation(mean=(float("nan"),), std=(1.0,)), r"normalisation\.mean must hold finite numbers"),
        (lambda: GradSkipCallback(normalisation={"mean": (0.5,)}), r"normalisation takes the keys mean and std"),
        (lambda: RenderSettings(colormap="nope"), "colour map"),
        (lambda: ProbeImages(torch.zeros(2, 3, 32, 32), torch.zeros(3)), r"probe labels and ids must be \(2,\)"),
    ],
)
def test_arguments_are_validated_where_they_are_given_naming_the_option(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_state_keys_of_two_instances_differ():
    a, b = GradSkipCallback(), GradSkipCallback(log_prefix="rollout/", methods=MethodSettings(method="rollout"))
    assert a.state_key != b.state_key


# ------------------------------------------------------------------------------------- loggers


def test_csv_logger_gets_scalars_and_files_land_in_its_log_dir(tmp_path):
    seed_everything(0)
    logger = CSVLogger(save_dir=str(tmp_path), name="csv")
    gradskip = GradSkipCallback(**FAST)
    rollout = GradSkipCallback(
        log_prefix="rollout/", methods=MethodSettings(method="rollout"), **FAST
    )  # a second instance
    trainer = tiny_trainer(tmp_path, logger=logger, callbacks=[gradskip, rollout], max_epochs=2)
    trainer.fit(tiny_module(), datamodule=tiny_data())
    states = trainer._checkpoint_connector.dump_checkpoint()["callbacks"]
    assert states[gradskip.state_key]["drift"]["previous"] is not None
    assert states[rollout.state_key]["drift"]["previous"] is not None and gradskip.state_key != rollout.state_key
    rows = _csv_rows(logger.log_dir, "faithfulness/gradskip/insertion")
    assert [row["gradskip/epoch"] for row in rows] == [0.0, 1.0]
    assert [row["step"] for row in rows] == [row["step"] for row in _csv_rows(logger.log_dir, "val/loss")]
    assert 0 <= rows[0]["regions/gradskip/pointing_game"] <= 1 and rows[0]["gradskip/time_s"] > 0
    assert 0 <= rows[0]["regions/gradskip/mass/object"] <= 1 and 0 <= rows[0]["regions/gradskip/rank/object"] <= 1
    assert -1 <= rows[1]["drift/gradskip/prev/spearman"] <= 1
    assert len(_csv_rows(logger.log_dir, "faithfulness/rollout/insertion")) == 2
    assert "gates/rollout/layer_0" not in rows[0]  # rollout has no gates
    for folder, count in (("gradskip", 1 + 3), ("rollout", 1)):  # grid, head images (no per-probe overlays)
        root = Path(logger.log_dir) / folder
        assert sorted(p.name for p in (root / "maps").iterdir()) == ["epoch_0000.npz", "epoch_0001.npz", "probes.npz"]
        pngs = sorted((root / "images" / "epoch_0001").glob("*.png"))
        assert len(pngs) == count, [p.name for p in pngs]


class _Watch(Callback):
    """Records RNG states and module modes around the callback that follows it (and the one after)."""

    def __init__(self, records: list) -> None:
        self.records = records

    def on_validation_epoch_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        pl_module.model.head.train()  # an unusual mixed mode that must come back as it was
        self.records.append(
            (
                torch.get_rng_state(),
                np.random.get_state()[1].copy(),
                random.getstate(),
                [m.training for m in pl_module.modules()],
            )
        )


def _fit_weights(root: Path, callbacks: list) -> tuple[dict, dict]:
    seed_everything(0)
    module = tiny_module()
    trainer = tiny_trainer(root, logger=False, callbacks=callbacks, max_epochs=2)
    trainer.fit(module, datamodule=tiny_data())
    grads = {name: p.grad.clone() for name, p in module.named_parameters() if p.grad is not None}
    return {k: v.clone() for k, v in module.state_dict().items()}, grads


def test_invisible_to_training_and_files_go_to_default_root_dir(tmp_path):
    log: list = []
    with_cb, grads_with = _fit_weights(tmp_path / "a", [_Watch(log), GradSkipCallback(**FAST), _Watch(log)])
    without, grads_without = _fit_weights(tmp_path / "b", [])
    assert with_cb.keys() == without.keys()
    assert all(torch.equal(with_cb[k], without[k]) for k in with_cb), "weights differ with the callback"
    assert grads_with.keys() == grads_without.keys()
    assert all(torch.equal(grads_with[k], grads_without[k]) for k in grads_with)
    assert len(log) == 4  # two epochs, before and after
    for before, after in (log[0:2], log[2:4]):
        assert torch.equal(before[0], after[0]) and np.array_equal(before[1], after[1]) and before[2] == after[2]
        assert before[3] == after[3] and any(before[3]) and not all(before[3])
    maps = tmp_path / "a" / "gradskip" / "maps"
    assert sorted(p.name for p in maps.iterdir()) == ["epoch_0000.npz", "epoch_0001.npz", "probes.npz"]
    assert len(list((tmp_path / "a" / "gradskip" / "images" / "epoch_0000").glob("probes_gradskip_overlays.png"))) == 1


def test_runs_without_validation_explain_at_train_epoch_end_and_at_fit_end(tmp_path):
    seed_everything(0)
    logger = CSVLogger(save_dir=str(tmp_path), name="noval")
    trainer = tiny_trainer(
        tmp_path,
        logger=logger,
        callbacks=[GradSkipCallback(every_n_epochs=2, **FAST)],
        max_epochs=3,
        limit_val_batches=0,
    )
    trainer.fit(tiny_module(), datamodule=tiny_data())
    # every 2nd epoch (epoch 1), then once at the end of fit for the last epoch (2)
    assert [row["gradskip/epoch"] for row in _csv_rows(logger.log_dir, "faithfulness/gradskip/insertion")] == [1.0, 2.0]


# ------------------------------------------------------------------------------------- resume


def test_resume_continues_drift_as_if_it_had_not_stopped(tmp_path):
    seed_everything(0)
    first = CSVLogger(save_dir=str(tmp_path), name="resume", version=0)
    trainer = tiny_trainer(tmp_path, logger=first, callbacks=[GradSkipCallback(**FAST)], max_epochs=2)
    trainer.fit(tiny_module(), datamodule=tiny_data())
    checkpoint = tmp_path / "epoch1.ckpt"
    trainer.save_checkpoint(checkpoint)
    state = torch.load(checkpoint, weights_only=True)["callbacks"]  # plain tensors and values only
    assert any("GradSkipCallback" in key for key in state)

    second = CSVLogger(save_dir=str(tmp_path), name="resume", version=1)
    # a different seed: the saved probes win
    callback = GradSkipCallback(probes=ProbeSettings(num_probes=8, probe_seed=123), scores=FAST["scores"])
    trainer = tiny_trainer(tmp_path, logger=second, callbacks=[callback], max_epochs=3)
    trainer.fit(tiny_module(seed=1), datamodule=tiny_data(), ckpt_path=str(checkpoint))
    (row,) = _csv_rows(second.log_dir, "faithfulness/gradskip/insertion")
    assert row["gradskip/epoch"] == 2.0

    def token_maps(version: int, epoch: int) -> torch.Tensor:
        with np.load(tmp_path / "resume" / f"version_{version}" / "gradskip" / "maps" / f"epoch_{epoch:04d}.npz") as f:
            return torch.from_numpy(f["token_maps"]), f["probe_ids"]

    maps0, ids0 = token_maps(0, 0)
    maps1, _ = token_maps(0, 1)
    maps2, ids2 = token_maps(1, 2)
    np.testing.assert_array_equal(ids0, ids2)
    for reference, name in ((maps1, "prev"), (maps0, "first")):
        expected = drift(maps2, reference, top_k=0.1)
        assert row[f"drift/gradskip/{name}/spearman"] == pytest.approx(float(expected["spearman"].mean()), abs=1e-6)
        assert row[f"drift/gradskip/{name}/topk_iou"] == pytest.approx(float(expected["topk_iou"].mean()), abs=1e-6)


# ------------------------------------------------------------------------------------- faults


class _ConvNet(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(4))
        self.steps = 0

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        self.steps += 1
        return torch.nn.functional.cross_entropy(self(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_unsupported_model_fails_at_setup(tmp_path):
    module = _ConvNet()
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[GradSkipCallback(**FAST)])
    with pytest.raises(TypeError, match="GradSkipCallback: Cannot explain _ConvNet") as refused:
        trainer.fit(module, datamodule=tiny_data())
    assert module.steps == 0
    said = str(refused.value)
    assert len(said) < 450 and "timm_vit, torchvision_vit, hf_vit, timm_swin, segformer" in said, said
    assert refused.value.__cause__ is None and refused.value.__suppress_context__  # one traceback, not two


def test_probe_images_of_the_wrong_shape_fail_at_setup(tmp_path):
    callback = GradSkipCallback(ProbeImages(images=torch.zeros(4, 3, 28, 28), labels=torch.zeros(4)))
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[callback])
    with pytest.raises(ValueError, match=r"probe images must be \(P, 3, 32, 32\) for this model; got \(4, 3, 28, 28\)"):
        trainer.fit(tiny_module(), datamodule=tiny_data())


def test_a_failing_explanation_warns_skips_the_epoch_and_training_goes_on(tmp_path):
    images = torch.full((4, 3, 32, 32), 1e30)
    images[:, :, ::2] = -1e30  # finite input that overflows inside the ViT: NaN logits and relevance
    callback = GradSkipCallback(
        ProbeImages(images=images, labels=torch.arange(4)), scores=ScoreSettings(insertion_steps=4)
    )
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[callback], max_epochs=2)
    with pytest.warns(UserWarning, match="explanation of epoch 0 skipped, training goes on. ExplainFailure"):
        trainer.fit(tiny_module(), datamodule=tiny_data())
    assert trainer.current_epoch == 2 and trainer.global_step == 8
    assert not (tmp_path / "gradskip" / "maps").exists()


def test_explicit_probes_and_validate_under_inference_mode(tmp_path):
    data = tiny_data()
    data.setup("validate")
    images, labels, masks = zip(*(data.val_dataset[i] for i in range(6)))
    callback = GradSkipCallback(
        ProbeImages(images=torch.stack(images), labels=torch.stack(labels), masks=torch.stack(masks)),
        probes=ProbeSettings(explain_batch_size=4),
        scores=ScoreSettings(target="prediction", insertion_steps=4),
        render=RenderSettings(probe_overlays=True),
    )
    logger = CSVLogger(save_dir=str(tmp_path), name="validate")
    tiny_trainer(tmp_path, logger=logger, callbacks=[callback]).validate(tiny_module(), datamodule=data)
    (row,) = _csv_rows(logger.log_dir, "faithfulness/gradskip/validate/insertion")  # validate-only: its own keys
    assert 0 <= row["regions/gradskip/validate/pointing_game"] <= 1
    assert not _csv_rows(logger.log_dir, "faithfulness/gradskip/insertion")
    assert not (Path(logger.log_dir) / "gradskip" / "maps").exists()  # the maps folder holds trained epochs
    overlays = (Path(logger.log_dir) / "gradskip" / "images").rglob("probes_gradskip_validate_overlay_probe_*.png")
    assert len(list(overlays)) == 6


def test_lightning_cli_yaml_configures_the_callback(tmp_path):
    callback = callback_from_yaml(
        tmp_path,
        GradSkipCallback,
        "{probes: {num_probes: 16}, scores: {target: prediction, insertion_steps: 4}, render: {overlay_alpha: 0.3},"
        " methods: {compare: [rollout], options: {alpha: 0.7}}}",
    )
    assert callback.methods == MethodSettings(compare=("rollout",), options={"alpha": 0.7})
    assert callback.probes == ProbeSettings(num_probes=16)
    assert callback.scores == ScoreSettings(target="prediction", insertion_steps=4)
    assert callback.render == RenderSettings(overlay_alpha=0.3)


def test_lightning_cli_yaml_refuses_a_bad_setting(tmp_path):
    with pytest.raises(ValueError, match="insertion_steps must be a positive integer, got 0"):
        callback_from_yaml(tmp_path, GradSkipCallback, "{scores: {insertion_steps: 0}}")


def test_the_front_door_takes_the_groups_and_at_most_twelve_parameters_and_refuses_flat_names(tmp_path, capsys):
    import inspect

    parameters = inspect.signature(GradSkipCallback).parameters
    assert len(parameters) <= 12, list(parameters)
    with pytest.raises(TypeError, match="num_probes"):
        GradSkipCallback(num_probes=16)  # type: ignore[call-arg]  # the groups only: ProbeSettings(num_probes=16)
    with pytest.raises(SystemExit):  # LightningCLI refuses the unknown key, naming it
        callback_from_yaml(tmp_path, GradSkipCallback, "{num_probes: 16}")
    assert "Option 'num_probes' is not accepted" in capsys.readouterr().err


def test_no_warning_without_flat_arguments(recwarn):
    GradSkipCallback(probes=ProbeSettings(num_probes=8), scores=ScoreSettings(insertion_steps=4))
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]


# ------------------------------------------------------------------------------------- issue 10


class _Counting(Callback):
    """Counts training batches, to show a refusal came before any training."""

    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_end(self, *args, **kwargs):
        self.batches += 1


def _short_class_names():
    data = tiny_data()
    data.class_names = data.class_names[:2]
    return data


def _mean_of_wrong_length():
    data = tiny_data()
    data.mean, data.std = (0.5, 0.5), (0.5, 0.5)
    return data


@pytest.mark.parametrize(
    "make_data, callback_kwargs, error, match",
    [
        (_short_class_names, {}, ValueError, r"datamodule.class_names has 2 names but the model has 4 classes"),
        (_mean_of_wrong_length, {}, ValueError, r"the datamodule's mean/std: 2 values .* images have 3 channels"),
        (tiny_data, {"normalisation": Normalisation((0.5,) * 2, (0.5,) * 2)}, ValueError, r"^normalisation: 2 values"),
    ],
)
def test_datamodule_problems_are_refused_at_setup(tmp_path, make_data, callback_kwargs, error, match):
    counter = _Counting()
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[counter, GradSkipCallback(**FAST, **callback_kwargs)])
    with pytest.raises(error, match=match):
        trainer.fit(tiny_module(), datamodule=make_data())
    assert counter.batches == 0


@pytest.mark.parametrize("target", ["label", "prediction"])
def test_fixed_probe_problems_are_refused_at_setup_for_every_target(tmp_path, target):
    images = torch.zeros(4, 3, 32, 32)
    with pytest.raises(ValueError, match=r"probe labels of ids \[3\] are not in \[0, 4\)"):
        callback = GradSkipCallback(
            ProbeImages(images=images, labels=torch.tensor([0, 1, 2, 7])), scores=ScoreSettings(target=target)
        )
        tiny_trainer(tmp_path, logger=False, callbacks=[callback]).fit(tiny_module(), datamodule=tiny_data())
    images[2, 0, 5, 5] = float("nan")
    with pytest.raises(ValueError, match=r"probe images \[2\] \(ids\) contain NaN"):
        callback = GradSkipCallback(
            ProbeImages(images=images, labels=torch.arange(4)), scores=ScoreSettings(target=target)
        )
        tiny_trainer(tmp_path, logger=False, callbacks=[callback]).fit(tiny_module(), datamodule=tiny_data())


class _DictItems(torch.utils.data.Dataset):
    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index):
        image, label, _ = self.dataset[index]
        return {"img_t": image, "y_t": label}  # keys the callback does not know


def test_plain_dataloaders_of_unknown_dict_items_are_refused_before_training(tmp_path):
    from torch.utils.data import DataLoader

    data = tiny_data()
    data.setup("fit")
    loader = DataLoader(_DictItems(data.val_dataset), batch_size=8)
    counter = _Counting()
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[counter, GradSkipCallback(**FAST)])
    with pytest.raises(TypeError, match=r"the item has \['img_t', 'y_t'\]. Name its keys with ProbeSettings"):
        trainer.fit(tiny_module(), train_dataloaders=loader, val_dataloaders=loader)
    assert counter.batches == 0


def test_plain_dataloaders_draw_probes_from_the_validation_set_before_training(tmp_path):
    from torch.utils.data import DataLoader

    data = tiny_data()
    data.setup("fit")
    callback = GradSkipCallback(**FAST)
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[callback], max_epochs=1, num_sanity_val_steps=0)
    trainer.fit(
        tiny_module(),
        train_dataloaders=DataLoader(data.train_dataset, batch_size=16),
        val_dataloaders=DataLoader(data.val_dataset, batch_size=16),
    )
    assert callback.monitor.source.dataset is data.val_dataset
    assert (tmp_path / "gradskip" / "maps" / "epoch_0000.npz").is_file()


def test_a_failure_after_the_explanation_warns_and_training_goes_on(tmp_path, monkeypatch):
    from gradskip_lightning.engine.output import report

    def broken(*args, **kwargs):
        raise IndexError("list index out of range")

    monkeypatch.setattr(report, "build_report", broken)
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[GradSkipCallback(**FAST)], max_epochs=2)
    with pytest.warns(
        UserWarning, match="images and maps files of epoch 0 were not built, its scalars are logged. IndexError"
    ):
        trainer.fit(tiny_module(), datamodule=tiny_data())
    assert trainer.current_epoch == 2


def test_a_new_fit_on_another_trainer_draws_probes_again_and_forgets_drift(tmp_path):
    callback = GradSkipCallback(**FAST)
    first = CSVLogger(save_dir=str(tmp_path), name="fold", version=0)
    tiny_trainer(tmp_path, logger=first, callbacks=[callback], max_epochs=2).fit(tiny_module(), datamodule=tiny_data())
    ids_first = callback.monitor.source.probes.ids.clone()
    second = CSVLogger(save_dir=str(tmp_path), name="fold", version=1)
    fold_two = tiny_data(seed=5, val_size=48)  # another fold: other validation images
    tiny_trainer(tmp_path, logger=second, callbacks=[callback], max_epochs=1).fit(tiny_module(), datamodule=fold_two)
    fold_two_labels = fold_two.val_dataset.labels
    assert torch.equal(callback.monitor.source.probes.labels, fold_two_labels[callback.monitor.source.probes.ids])
    assert not torch.equal(callback.monitor.source.probes.ids, ids_first)
    (row,) = _csv_rows(second.log_dir, "faithfulness/gradskip/insertion")
    assert row["gradskip/epoch"] == 0.0 and "drift/gradskip/prev/spearman" not in row  # no reference from fold one


def test_uint8_probe_images_are_refused():
    with pytest.raises(TypeError, match=r"ProbeImages' images must be float.*got torch.uint8"):
        GradSkipCallback(ProbeImages(images=torch.zeros(2, 3, 32, 32, dtype=torch.uint8), labels=torch.zeros(2)))


@pytest.mark.parametrize("prefixes", [("gs/", "gs/"), ("gs/a/", "gs_a/")])
def test_two_callbacks_sharing_a_prefix_or_its_folder_are_refused(tmp_path, prefixes):
    callbacks = [
        GradSkipCallback(log_prefix=prefixes[0], **FAST),
        GradSkipCallback(log_prefix=prefixes[1], methods=MethodSettings(method="rollout"), **FAST),
    ]
    with pytest.raises(ValueError, match="share the output folder"):
        tiny_trainer(tmp_path, logger=False, callbacks=callbacks).fit(tiny_module(), datamodule=tiny_data())


def test_a_failing_epoch_is_tried_once(tmp_path, monkeypatch):
    from gradskip_lightning.engine.scoring import isolated

    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(isolated, "explain_probes", failing)
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[GradSkipCallback(**FAST)], max_epochs=3)
    with pytest.warns(UserWarning, match="OutOfMemoryError") as caught:
        trainer.fit(tiny_module(), datamodule=tiny_data())
    assert len(calls) == 3 and len([w for w in caught if "skipped" in str(w.message)]) == 3


def test_validate_after_fit_neither_writes_maps_nor_moves_drift(tmp_path):
    callback = GradSkipCallback(**FAST)
    logger = CSVLogger(save_dir=str(tmp_path), name="after")
    trainer = tiny_trainer(tmp_path, logger=logger, callbacks=[callback], max_epochs=2)
    module = tiny_module()
    trainer.fit(module, datamodule=tiny_data())
    maps = Path(logger.log_dir) / "gradskip" / "maps"
    files = sorted(p.name for p in maps.iterdir())
    previous = callback.monitor.runner.drift.previous.clone()
    trainer.validate(module, datamodule=tiny_data())
    assert sorted(p.name for p in maps.iterdir()) == files == ["epoch_0000.npz", "epoch_0001.npz", "probes.npz"]
    assert torch.equal(callback.monitor.runner.drift.previous, previous)
    (row,) = _csv_rows(logger.log_dir, "faithfulness/gradskip/validate/insertion")
    assert row["drift/gradskip/validate/prev/spearman"] == pytest.approx(1.0)  # same weights as the last epoch
