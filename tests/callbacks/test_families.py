"""Each model family trains a few steps with the callback and logs through a real offline W&B run:
torchvision's ViT, an HF ViT, an HF DINOv2 and a timm Swin (classification), read back from its files."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import timm
import torch
import torch.nn.functional as F
import wandb
from lightning.pytorch import LightningDataModule, LightningModule, seed_everything
from lightning.pytorch.loggers import WandbLogger
from torch import Tensor, nn
from torch.utils.data import Dataset

from gradskip_lightning import GradSkipCallback, MethodSettings, ProbeSettings, ScoreSettings
from tests.callbacks.helpers import tiny_data, tiny_trainer
from tests.callbacks.wandb_files import find_runs, use_offline_wandb

P = "gradskip/"
CLASSES = 4


def _hf(config_class: str, model_class: str) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    sizes = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    config = getattr(transformers, config_class)(**sizes, image_size=32, patch_size=8, num_labels=CLASSES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(transformers, model_class)(config)


#: family label -> (the network, whether its forward returns an HF output with ``logits``)
NETWORKS = {
    "torchvision_vit": lambda: (
        __import__("torchvision").models.VisionTransformer(32, 8, 2, 2, 32, 64, num_classes=CLASSES),
        False,
    ),
    "hf_vit": lambda: (_hf("ViTConfig", "ViTForImageClassification"), True),
    "hf_dinov2": lambda: (_hf("Dinov2Config", "Dinov2ForImageClassification"), True),
    "timm_swin": lambda: (
        timm.create_model(
            "swin_tiny_patch4_window7_224",
            num_classes=CLASSES,
            img_size=32,
            patch_size=4,
            window_size=4,
            embed_dim=32,
            depths=(2, 2),
            num_heads=(2, 4),
        ),  # fmt: skip
        False,
    ),
}
#: family label -> the registered family its explainer reports
FAMILY = {"torchvision_vit": "torchvision_vit", "hf_vit": "hf_vit", "hf_dinov2": "hf_vit", "timm_swin": "timm_swin"}


def _image_label(batch: Any) -> tuple[Tensor, Tensor]:
    return (batch["image"], batch["label"]) if isinstance(batch, dict) else (batch[0], batch[1])


class Classifier(LightningModule):
    """The smallest LightningModule a user writes around a network: logits, cross-entropy, AdamW."""

    def __init__(self, net: nn.Module, hf_output: bool) -> None:
        super().__init__()
        self.net, self.hf_output = net, hf_output

    def forward(self, images: Tensor) -> Tensor:
        return self.net(pixel_values=images).logits if self.hf_output else self.net(images)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        images, labels = _image_label(batch)
        return F.cross_entropy(self(images), labels)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        images, labels = _image_label(batch)
        self.log("val/loss", F.cross_entropy(self(images), labels))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("label", list(NETWORKS))
def test_each_family_trains_with_the_callback_and_logs_to_wandb(label, tmp_path, monkeypatch):
    use_offline_wandb(monkeypatch, tmp_path)
    seed_everything(0)
    net, hf_output = NETWORKS[label]()
    callback = GradSkipCallback(
        probes=ProbeSettings(num_probes=4),
        scores=ScoreSettings(insertion_steps=4),
        methods=MethodSettings(compare=["rollout"]),
    )
    logger = WandbLogger(save_dir=str(tmp_path), offline=True, project="gradskip-families")
    trainer = tiny_trainer(tmp_path, logger=logger, callbacks=[callback], max_epochs=1, limit_train_batches=2)
    trainer.fit(Classifier(net, hf_output), datamodule=tiny_data())
    wandb.finish()
    assert callback.monitor.prepared.explainers["gradskip"].family == FAMILY[label]
    (run,) = find_runs(tmp_path / "wandb")
    (row,) = run.rows_with(f"faithfulness/{P}insertion")
    for name in ("insertion", "deletion", "insertion/rollout"):
        assert 0.0 <= row[f"faithfulness/{P}{name}"] <= 1.0, (name, row[f"faithfulness/{P}{name}"])
    assert row[f"{P}skipped"] == 0.0
    assert f"probes/{P}overlays" in row and f"probes/{P}overlays/rollout" in row
    assert list(run.media.rglob("*.png")), "no overlay image was written"


class MonaiStyle(Dataset):
    """Items as MONAI and HF datasets give them: a dict with the image, the label and metadata."""

    def __init__(self, items: Dataset) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> dict[str, Any]:
        image, label, _mask = self.items[index]
        return {"image": image, "label": label, "patient_id": index, "path": f"patient_{index:03d}.dcm"}


def test_a_datamodule_of_dict_items_works_without_explicit_probes(tmp_path):
    data = tiny_data()
    data.setup("fit")
    loaders = dict(batch_size=16)
    train, val = MonaiStyle(data.train_dataset), MonaiStyle(data.val_dataset)
    module = LightningDataModule.from_datasets(train_dataset=train, val_dataset=val, **loaders)
    module.val_dataset = val  # where the callback draws probes from, as on the project's datamodules
    callback = GradSkipCallback(probes=ProbeSettings(num_probes=4), scores=ScoreSettings(insertion_steps=4))
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[callback], max_epochs=1, limit_train_batches=2)
    trainer.fit(Classifier(NETWORKS["torchvision_vit"]()[0], False), datamodule=module)
    probes = callback.monitor.source.probes
    assert probes is not None and probes.regions is None  # the id and the path were not read as masks
    assert torch.equal(probes.labels, data.val_dataset.labels[probes.ids])
    assert torch.isfinite(trainer.callback_metrics[f"faithfulness/{P}insertion"])
