"""Multi-label classifiers: a tiny ViT trained with binary cross-entropy on multi-hot labels."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import LightningDataModule, LightningModule, seed_everything
from torch.utils.data import DataLoader, Dataset

from gradskip_lightning import GradSkipCallback, ProbeImages, ProbeSettings, ScoreSettings
from gradskip_lightning.data.planted_shapes import PlantedShapesDataset
from tests.callbacks.helpers import tiny_module, tiny_trainer


class MultiHotShapes(Dataset):
    """Planted shapes whose label is multi-hot (4,): the shape's class, and class 3 on every third image."""

    def __init__(self, size: int, seed: int) -> None:
        self.inner = PlantedShapesDataset(size, seed=seed, num_classes=4, img_size=32)
        self.labels = F.one_hot(self.inner.labels, 4).float()
        self.labels[::3, 3] = 1.0

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index):
        image, _, mask = self.inner[index]
        return image, self.labels[index], {"object": mask, "background": ~mask}


class MultiHotData(LightningDataModule):
    task = "multilabel"
    num_classes = 4
    class_names = ["red", "green", "blue", "yellow"]
    mean = std = (0.5, 0.5, 0.5)

    def setup(self, stage: str) -> None:
        self.train_dataset, self.val_dataset = MultiHotShapes(48, seed=0), MultiHotShapes(24, seed=1)

    def train_dataloader(self):
        return DataLoader(self.train_dataset, batch_size=16, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_dataset, batch_size=16)


class MultiLabelViT(LightningModule):
    """The tiny timm ViT trained with binary_cross_entropy_with_logits."""

    def __init__(self) -> None:
        super().__init__()
        self.model = tiny_module().model

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        return F.binary_cross_entropy_with_logits(self(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", F.binary_cross_entropy_with_logits(self(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


@pytest.mark.slow
def test_a_multi_label_model_trains_to_the_end_with_maps_scored_by_sigmoid(tmp_path):
    seed_everything(0)
    callback = GradSkipCallback(probes=ProbeSettings(num_probes=8), scores=ScoreSettings(insertion_steps=4))
    module = MultiLabelViT()
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[callback], max_epochs=2)
    trainer.fit(module, datamodule=MultiHotData())
    assert trainer.current_epoch == 2
    probes = callback.monitor.source.probes
    assert probes.multi_hot.shape == (8, 4) and sorted(probes.regions) == ["background", "object"]
    assert sorted(set(probes.labels.tolist())) == [0, 1, 2, 3]  # stratified over the explained labels
    assert all(probes.multi_hot[i, c] == 1 for i, c in enumerate(probes.labels.tolist()))  # a positive label
    with np.load(tmp_path / "gradskip" / "maps" / "epoch_0001.npz") as saved:
        assert saved["maps"].shape == (8, 32, 32) and np.isfinite(saved["insertion"]).all()
        np.testing.assert_array_equal(saved["targets"], probes.labels.numpy())
        with torch.no_grad():
            logits = module.eval()(probes.images)
        np.testing.assert_allclose(saved["probabilities"], logits.sigmoid().amax(dim=1).numpy(), atol=1e-5)


def test_explicit_multi_hot_probe_labels_explain_a_positive_label():
    labels = torch.tensor([[1.0, 0, 0, 1], [1.0, 0, 0, 0], [0, 1.0, 0, 0]])
    callback = GradSkipCallback(ProbeImages(images=torch.zeros(3, 3, 32, 32), labels=labels))
    probes = callback.monitor.source.probes
    assert probes.labels.tolist() == [3, 0, 1]  # the rarest positive label among the probes
    assert torch.equal(probes.multi_hot, labels)  # explained per label: the probabilities are sigmoids


def test_explicit_named_regions_feed_the_pointing_game_from_object_and_each_get_mass_and_rank(tmp_path):
    import csv

    from lightning.pytorch.loggers import CSVLogger

    data = MultiHotShapes(4, seed=0)
    images, labels, regions = zip(*(data[i] for i in range(4)))
    masks = {name: torch.stack([r[name] for r in regions]) for name in ("object", "background")}
    callback = GradSkipCallback(
        ProbeImages(images=torch.stack(images), labels=torch.stack(labels), masks=masks),
        scores=ScoreSettings(insertion_steps=4),
    )
    assert sorted(callback.monitor.source.probes.regions) == ["background", "object"]
    logger = CSVLogger(save_dir=str(tmp_path), name="regions")
    tiny_trainer(tmp_path, logger=logger, callbacks=[callback]).validate(MultiLabelViT(), datamodule=MultiHotData())
    with open(tmp_path / "regions" / "version_0" / "metrics.csv") as handle:
        rows = [{k: float(v) for k, v in r.items() if v} for r in csv.DictReader(handle)]
    (row,) = [r for r in rows if "regions/gradskip/validate/pointing_game" in r]
    assert 0 <= row["regions/gradskip/validate/pointing_game"] <= 1
    mass = {name: row[f"regions/gradskip/validate/mass/{name}"] for name in ("object", "background")}
    assert mass["object"] + mass["background"] == pytest.approx(1.0, abs=1e-6)  # complementary regions
    assert 0 < mass["background"] < 1 and 0 <= row["regions/gradskip/validate/rank/object"] <= 1
