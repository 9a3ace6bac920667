"""train.py: W&B mode default, the model class (ViTClassifier unless a config names another), data-to-model
links (classes, size, channels, task), one CLI epoch."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import train
from gradskip_lightning import GradSkipCallback, Normalisation
from gradskip_lightning.data import PlantedShapesSegmentationDataModule
from gradskip_lightning.training.classifier import ViTClassifier
from gradskip_lightning.training.segmentation import SegmentationModule
from tests.callbacks.wandb_files import find_runs

# pytest's own arguments are in sys.argv while the tests pass args= to LightningCLI.
pytestmark = pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
ROOT = Path(__file__).resolve().parents[1]
PLANTED = ROOT / "configs" / "planted_shapes.yaml"
SEGFORMER = ROOT / "configs" / "planted_segformer.yaml"


@pytest.mark.parametrize("preset,expected", [(None, "offline"), ("online", "online"), ("disabled", "disabled")])
def test_wandb_offline_unless_the_user_sets_wandb_mode(preset, expected, monkeypatch):
    if preset is None:
        monkeypatch.delenv("WANDB_MODE", raising=False)
    else:
        monkeypatch.setenv("WANDB_MODE", preset)
    train.main(["--config", str(PLANTED)], run=False)
    assert os.environ["WANDB_MODE"] == expected


def test_model_takes_class_count_and_image_size_from_data():
    cli = train.main(
        ["--config", str(PLANTED), "--data.num_classes", "3", "--data.img_size", "48", "--model.patch_size", "8"],
        run=False,
    )
    assert cli.model.hparams.num_classes == 3 and cli.model.hparams.img_size == 48
    assert cli.model(torch.zeros(2, 3, 48, 48)).shape == (2, 3)


def test_model_takes_channels_and_task_from_data():
    cli = train.main(["--config", str(ROOT / "configs" / "chestmnist.yaml")], run=False)
    assert (cli.datamodule.in_chans, cli.datamodule.task) == (1, "multilabel")
    assert cli.model.hparams.in_chans == 1 and cli.model.hparams.task == "multilabel"
    assert cli.model.loss.__name__ == "multilabel_loss"
    assert cli.model(torch.zeros(2, 1, 28, 28)).shape == (2, 14)


def test_segmentation_model_takes_classes_size_and_task_from_segmentation_data():
    cli = train.main(["--config", str(SEGFORMER), "--data.num_colours", "2", "--data.img_size", "32"], run=False)
    assert type(cli.model) is SegmentationModule and type(cli.datamodule) is PlantedShapesSegmentationDataModule
    assert (cli.model.num_classes, cli.model.img_size, cli.model.hparams.task) == (3, 32, "segmentation")
    assert cli.model(torch.zeros(2, 3, 32, 32)).shape == (2, 3, 8, 8)


def test_model_section_without_class_path_is_a_vit_classifier_and_takes_short_overrides():
    cli = train.main(["--config", str(PLANTED), "--model.depth", "2", "--model.init_args.num_heads", "2"], run=False)
    assert type(cli.model) is ViTClassifier and cli.model.hparams.model_name == "vit_tiny_patch16_224"
    assert (cli.model.hparams.depth, cli.model.hparams.num_heads) == (2, 2)


@pytest.mark.parametrize(
    "override,message",
    [
        (["--data", "gradskip_lightning.data.PlantedShapesDataModule"], "task must be .segmentation.*ViTClassifier"),
        (
            ["--model", "gradskip_lightning.training.classifier.ViTClassifier"],
            "segmentation data use .*SegmentationModule",
        ),
    ],
    ids=["classification data, segmentation model", "segmentation data, classifier"],
)
def test_a_model_paired_with_the_other_task_fails_clearly(override, message):
    with pytest.raises(ValueError, match=message):
        train.main(["--config", str(SEGFORMER), *override, "--data.img_size", "64"], run=False)


def test_without_a_terminal_the_bar_is_off_unless_asked_for_and_epoch_lines_come_after_the_callbacks():
    from gradskip_lightning import GradSkipCallback
    from gradskip_lightning.console import EpochLine

    assert not sys.stdout.isatty()  # pytest captures stdout
    cli = train.main(["--config", str(PLANTED)], run=False)
    assert cli.trainer.progress_bar_callback is None
    kinds = [type(c) for c in cli.trainer.callbacks]
    assert kinds.count(EpochLine) == 1 and kinds.index(GradSkipCallback) < kinds.index(EpochLine)
    asked = train.main(["--config", str(PLANTED), "--trainer.enable_progress_bar=true"], run=False)
    assert asked.trainer.progress_bar_callback is not None


@pytest.mark.slow
def test_one_epoch_through_the_cli(tmp_path):
    outputs = tmp_path / "outputs"
    command = [
        sys.executable, str(ROOT / "train.py"), "fit", "--config", str(PLANTED),
        "--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.log_every_n_steps=1",
        "--data.train_size=64", "--data.val_size=32", "--data.test_size=32", "--data.batch_size=32",
        "--model.embed_dim=48", "--model.depth=2", "--model.patch_size=8",
        f"--trainer.logger.init_args.save_dir={outputs}",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]

    (run,) = find_runs(outputs / "wandb")
    val_rows = run.rows_with("val/acc")
    assert len(val_rows) == 1 and 0.0 <= val_rows[0]["val/acc"] <= 1.0
    assert any(key.startswith("gradskip/") for row in run.history for key in row), "the callback logged nothing"

    (checkpoint,) = outputs.rglob("last.ckpt")
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert state["epoch"] == 0 and state["global_step"] == 2
    assert state["hyper_parameters"]["num_classes"] == 4 and state["hyper_parameters"]["img_size"] == 32
    assert (outputs / "config.yaml").exists()  # LightningCLI saved the resolved config beside the run


@pytest.mark.slow
def test_redirected_cli_run_prints_epoch_lines_keeps_the_final_epoch_in_last_ckpt_and_names_its_maps(tmp_path):
    """3 epochs of the planted-shapes config, stdout to a file; the best checkpoint's monitor only
    worsens after epoch 0 (``epoch``, mode min), as a val/acc that stops improving would."""
    config = yaml.safe_load(PLANTED.read_text())
    best, last = config["trainer"]["callbacks"][:2]
    assert (best["init_args"]["filename"], last["init_args"]) == ("best", {"filename": "last"})
    best["init_args"].update(monitor="epoch", mode="min")
    config["trainer"]["callbacks"][-1]["init_args"]["probes"]["num_probes"] = 4
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    outputs = tmp_path / "outputs"
    command = [
        sys.executable, str(ROOT / "train.py"), "fit", "--config", str(tmp_path / "config.yaml"),
        "--trainer.max_epochs=3", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
        "--data.train_size=64", "--data.val_size=32", "--data.test_size=32", "--data.batch_size=32",
        "--model.embed_dim=48", "--model.depth=2", "--model.patch_size=8",
        f"--trainer.logger.init_args.save_dir={outputs}",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(tmp_path / "stdout.txt", "w") as stdout:  # a file: not a terminal
        done = subprocess.run(
            command, cwd=tmp_path, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=600
        )
    assert done.returncode == 0, done.stderr[-4000:]
    printed = (tmp_path / "stdout.txt").read_text()
    assert "it/s" not in printed and "Epoch " not in printed  # no progress bar frame
    lines = [line for line in printed.splitlines() if line.startswith("epoch ")]
    assert [line.split(" ")[1] for line in lines] == ["0/2", "1/2", "2/2"], printed[-3000:]
    (run,) = find_runs(outputs / "wandb")
    logged = [row["val/acc"] for row in run.rows_with("val/acc")]
    shown = [float(re.search(r" val/acc=(\S+)", line)[1]) for line in lines]
    assert shown == pytest.approx(logged, abs=5e-4) and all("faithfulness/gradskip/insertion=" in x for x in lines)

    run_id = run.root.name.rsplit("-", 1)[1]
    folder = outputs / "gradskip-lightning" / run_id / "checkpoints"  # outputs/<project>/<run id>/checkpoints
    assert sorted(p.name for p in folder.iterdir()) == ["best.ckpt", "last.ckpt"]
    epochs = {p.stem: torch.load(p, map_location="cpu", weights_only=True)["epoch"] for p in folder.iterdir()}
    assert epochs == {"best": 0, "last": 2}

    maps = re.search(
        r"GradSkip maps of this run: (\S+) \(draw them: python -m gradskip_lightning.timeline", done.stderr
    )
    assert maps, done.stderr[-3000:]
    assert (tmp_path / maps[1]).resolve() == (run.root / "gradskip" / "maps").resolve()
    assert sorted(p.name for p in (tmp_path / maps[1]).glob("epoch_*.npz")) == [f"epoch_000{e}.npz" for e in range(3)]


@pytest.mark.slow
def test_the_main_config_with_its_budget_then_the_printed_timeline_command(tmp_path):
    """The README's path on the main config: a few epochs of configs/bloodmnist.yaml (its 2 % time
    budget on, so short epochs leave the scores out of most epoch files), then the timeline command
    exactly as the end of fit prints it."""
    from tests.data.conftest import write_medmnist_file

    write_medmnist_file(tmp_path, "bloodmnist")
    command = [
        sys.executable, str(ROOT / "train.py"), "fit", "--config", str(ROOT / "configs" / "bloodmnist.yaml"),
        f"--data.root={tmp_path}", "--data.download=false", "--trainer.max_epochs=3",
        "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
        f"--trainer.logger.init_args.save_dir={tmp_path / 'outputs'}",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    printed = re.search(r"\(draw them: (python -m gradskip_lightning\.timeline .+?)\)\s*$", done.stderr, re.M)
    assert printed, done.stderr[-3000:]
    maps = Path(printed[1].split()[3])
    scored = [
        "insertion" in np.load(path).files for path in sorted((tmp_path / maps).glob("epoch_*.npz"))
    ]  # the budget thinned the scores: some epochs have none
    assert len(scored) == 3 and scored[0] and not all(scored), scored
    timeline = subprocess.run(
        [sys.executable, *printed[1].split()[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert timeline.returncode == 0, timeline.stderr[-3000:]
    assert "(32 of 32 probes, 3 of 3 epochs)" in timeline.stdout
    (said,) = [line for line in timeline.stdout.splitlines() if line.startswith("epochs without insertion/deletion")]
    spans = [[int(e) for e in span.split("-")] for span in said.rsplit(": ", 1)[1].split(", ")]
    assert {e for span in spans for e in range(span[0], span[-1] + 1)} == {e for e, has in enumerate(scored) if not has}
    assert (tmp_path / "timeline.png").stat().st_size > 10_000


@pytest.mark.slow
def test_the_mlflow_guides_config_trains_into_the_store_with_its_config(tmp_path, monkeypatch):
    stack = contextlib.ExitStack()
    """docs/guides/mlflow.md's YAML after the planted-shapes config: the W&B logger is replaced, and the
    MLflow run gets the callback's scalars, images and maps files and the resolved config (Lightning's
    own config saving asserts on a logger without a local folder)."""
    mlflow = pytest.importorskip("mlflow")
    from lightning.pytorch.loggers import MLFlowLogger

    snippet = re.search(r"```yaml\n(.*?)```", (ROOT / "docs" / "guides" / "mlflow.md").read_text(), re.S)
    assert snippet, "no YAML block in the guide"
    (tmp_path / "mlflow.yaml").write_text(snippet[1])
    monkeypatch.chdir(tmp_path)  # the guide's paths are relative to where one trains
    monkeypatch.setenv("JSONARGPARSE_DEPRECATION_WARNINGS", "all")  # every one, not one per kind and process
    caught = stack.enter_context(warnings.catch_warnings(record=True))
    warnings.simplefilter("always")
    cli = train.main(
        [
            "--config", str(PLANTED), "--config", "mlflow.yaml", "--trainer.max_epochs=1",
            "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1", "--data.train_size=64",
            "--data.val_size=32", "--data.test_size=32", "--data.batch_size=32", "--model.embed_dim=48",
            "--model.depth=2", "--model.patch_size=8",
        ],
        run=False,
    )  # fmt: skip
    (logger,) = cli.trainer.loggers
    assert isinstance(logger, MLFlowLogger)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    stack.close()
    ours = [w for w in caught if "Deprecation" in w.category.__name__ and Path(w.filename).name == "train.py"]
    assert not ours, [str(w.message) for w in ours]  # train.py's own config saving (skip_none was deprecated)
    client = mlflow.MlflowClient(tracking_uri="sqlite:///outputs/mlflow.db")
    assert {info.path for info in client.list_artifacts(logger.run_id)} == {"config.yaml", "gradskip", "images"}
    config = yaml.safe_load(Path(client.download_artifacts(logger.run_id, "config.yaml", str(tmp_path))).read_text())
    assert config["trainer"]["logger"][0]["class_path"] == "lightning.pytorch.loggers.MLFlowLogger"
    assert [m.step for m in client.get_metric_history(logger.run_id, "faithfulness/gradskip/insertion")] == [1]
    maps = [info.path for info in client.list_artifacts(logger.run_id, "gradskip/maps")]
    assert maps == ["gradskip/maps/epoch_0000.npz", "gradskip/maps/probes.npz"]
    assert (tmp_path / "outputs" / "gradskip" / logger.run_id / "maps" / "epoch_0000.npz").is_file()
    assert not (tmp_path / "outputs" / "wandb").exists()


def test_a_configs_normalisation_mapping_becomes_the_callbacks_normalisation(tmp_path):
    config = yaml.safe_load((ROOT / "configs" / "bloodmnist.yaml").read_text())
    (gradskip,) = [c for c in config["trainer"]["callbacks"] if c["class_path"].endswith("GradSkipCallback")]
    gradskip["init_args"]["normalisation"] = {"mean": [0.8, 0.7, 0.6], "std": [0.2, 0.25, 0.3]}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    cli = train.main(["--config", str(tmp_path / "config.yaml"), "--data.root", str(tmp_path)], run=False)
    (callback,) = [c for c in cli.trainer.callbacks if isinstance(c, GradSkipCallback)]
    assert callback.normalisation == Normalisation(mean=(0.8, 0.7, 0.6), std=(0.2, 0.25, 0.3))
