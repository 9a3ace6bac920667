"""The live transplant test: the tag pasted into probes of the other classes, with a real Trainer."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.pytorch import seed_everything
from lightning.pytorch.loggers import CSVLogger

from gradskip_lightning import GradSkipCallback, MethodSettings, ProbeSettings, ScoreSettings
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.families.timm_vit import TimmViTExplainer
from gradskip_lightning.metrics import relevance_mass_accuracy
from gradskip_lightning.shortcuts import SpuriousTag
from gradskip_lightning.shortcuts.transplant import Transplant
from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer

TAG = SpuriousTag(target_class=1, p_in=0.9, p_out=0.2, position=(0, 0))


def test_paste_gives_the_datamodules_own_tagged_images():
    data = tiny_data(tag=TAG)
    clean, tagged = data.make_split("val", "none"), data.make_split("val", "always")
    transplant = Transplant(TAG, Normalisation(data.mean, data.std))
    images = torch.stack([clean[i][0] for i in range(6)])
    expected = torch.stack([tagged[i][0] for i in range(6)])
    torch.testing.assert_close(transplant.paste(images), expected, atol=1e-6, rtol=0)
    assert transplant.eligible(torch.tensor([0, 1, 2, 1])).tolist() == [True, False, True, False]


def test_flip_rate_and_tag_mass_match_the_model_on_pasted_probes(tmp_path):
    seed_everything(0)
    data = tiny_data(tag=TAG)
    logger = CSVLogger(save_dir=str(tmp_path), name="transplant")
    callback = GradSkipCallback(
        transplant=True,
        probes=ProbeSettings(num_probes=8),
        scores=ScoreSettings(insertion_steps=4),
        methods=MethodSettings(compare=["rollout"]),
    )
    module = tiny_module()
    tiny_trainer(tmp_path, logger=logger, callbacks=[callback], max_epochs=1).fit(module, datamodule=data)
    with np.load(Path(logger.log_dir) / "gradskip" / "maps" / "epoch_0000.npz") as saved:
        flips, mass, labels, ids = (saved[k] for k in ("transplant_flip", "transplant_mass", "labels", "probe_ids"))
    of_tag_class = labels == TAG.target_class
    assert of_tag_class.any() and (~of_tag_class).any()
    assert np.isnan(flips[of_tag_class]).all() and np.isnan(mass[of_tag_class]).all()  # excluded
    # The same probes with the tag, as the datamodule renders them, through the trained model.
    tagged = data.make_split("val", "always")
    images = torch.stack([tagged[int(i)][0] for i in ids[~of_tag_class]])
    module.eval()
    targets = torch.full((len(images),), TAG.target_class)
    explanation = TimmViTExplainer(module).explain(images, targets)
    expected_flips = (explanation.logits.argmax(dim=1) == TAG.target_class).float().numpy()
    np.testing.assert_array_equal(flips[~of_tag_class], expected_flips)
    tag_masks = TAG.mask(32, 32).expand(len(images), -1, -1)
    expected_mass = relevance_mass_accuracy(explanation.maps, tag_masks).float().numpy()
    np.testing.assert_allclose(mass[~of_tag_class], expected_mass, atol=1e-5)
    with open(Path(logger.log_dir) / "metrics.csv") as handle:
        (row,) = [r for r in csv.DictReader(handle) if r.get("transplant/gradskip/flip_rate")]
    assert float(row["transplant/gradskip/flip_rate"]) == pytest.approx(expected_flips.mean(), abs=1e-6)
    assert float(row["transplant/gradskip/tag_mass"]) == pytest.approx(expected_mass.mean(), abs=1e-5)
    assert 0 <= float(row["transplant/gradskip/tag_mass/rollout"]) <= 1


def test_transplant_needs_a_tag_and_the_normalisation(tmp_path):
    trainer = tiny_trainer(
        tmp_path, logger=False, callbacks=[GradSkipCallback(transplant=True, probes=ProbeSettings(num_probes=4))]
    )
    with pytest.raises(ValueError, match="the datamodule has none"):
        trainer.fit(tiny_module(), datamodule=tiny_data())
    data = tiny_data()
    data.mean = data.std = None
    callback = GradSkipCallback(transplant=TAG, probes=ProbeSettings(num_probes=4))
    with pytest.raises(ValueError, match="needs the images' normalisation"):
        tiny_trainer(tmp_path, logger=False, callbacks=[callback]).fit(tiny_module(), datamodule=data)
    with pytest.raises(TypeError, match="transplant must be a SpuriousTag"):
        GradSkipCallback(transplant="tag")


def test_lightning_cli_yaml_sets_the_transplant_tag(tmp_path):
    from lightning.pytorch.cli import LightningCLI

    from gradskip_lightning.data import PlantedShapesDataModule
    from gradskip_lightning.training.classifier import ViTClassifier

    config = tmp_path / "config.yaml"
    config.write_text(
        "trainer:\n  logger: false\n  callbacks:\n    - class_path: gradskip_lightning.GradSkipCallback\n"
        "      init_args:\n        transplant: {target_class: 2, position: [4, 4]}\n"
    )
    cli = LightningCLI(ViTClassifier, PlantedShapesDataModule, run=False, args=["--config", str(config)])
    (callback,) = [c for c in cli.trainer.callbacks if isinstance(c, GradSkipCallback)]
    assert callback.transplant == SpuriousTag(target_class=2, position=(4, 4))
    config.write_text(config.read_text().replace("{target_class: 2, position: [4, 4]}", "true"))
    cli = LightningCLI(ViTClassifier, PlantedShapesDataModule, run=False, args=["--config", str(config)])
    (callback,) = [c for c in cli.trainer.callbacks if isinstance(c, GradSkipCallback)]
    assert callback.transplant is True
