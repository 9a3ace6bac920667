"""A 2-process CPU DDP run (Lightning ``strategy="ddp"``) that updates every metric with its rank's
share of ``helpers.ddp_dataset`` and writes the synced results (rank 0) to the JSON path given.

Run from the repository root: ``python -m tests.metrics.ddp_worker OUT.json``.
"""

from __future__ import annotations

import json
import sys

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from gradskip_lightning.metrics import (
    ClassSensitivity,
    ExplanationDrift,
    FaithfulnessViolation,
    InsertionDeletion,
    PointingGame,
    RelevanceMassAccuracy,
    RelevanceRankAccuracy,
    SegmentationScores,
)
from tests.conftest import make_tiny_vit

from .helpers import PATCH, ddp_dataset

NUM_CLASSES = 4


def make_metrics() -> dict:
    return {
        "insertion_deletion": InsertionDeletion(patch_size=PATCH, steps=4, batch_size=64),
        "violation": FaithfulnessViolation(patch_size=PATCH, top_k=2),
        "pointing": PointingGame(num_classes=NUM_CLASSES),
        "segmentation": SegmentationScores(),
        "drift": ExplanationDrift(top_k=0.2),
        "mass_accuracy": RelevanceMassAccuracy(),
        "rank_accuracy": RelevanceRankAccuracy(),
        "class_sensitivity": ClassSensitivity(),
    }


def update_all(metrics: dict, model: torch.nn.Module, batch: dict) -> None:
    metrics["insertion_deletion"].update(model, batch["images"], batch["targets"], batch["maps"])
    metrics["violation"].update(model, batch["images"], batch["targets"], batch["maps"])
    metrics["pointing"].update(batch["maps"], batch["masks"], batch["targets"])
    metrics["segmentation"].update(batch["maps"], batch["masks"])
    metrics["drift"].update(batch["maps"], batch["maps_b"])
    metrics["mass_accuracy"].update(batch["maps"], batch["regions"])
    metrics["rank_accuracy"].update(batch["maps"], batch["regions"])
    metrics["class_sensitivity"].update(batch["maps"], batch["maps_b"])


def results(metrics: dict) -> dict[str, float]:
    """Every computed value, flattened to {"name/key": float}."""
    out = {}
    for name, metric in metrics.items():
        value = metric.compute()
        for key, tensor in value.items() if isinstance(value, dict) else [("value", value)]:
            out[f"{name}/{key}"] = float(tensor)
    return out


class Items(Dataset):
    def __init__(self, data: dict) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data["images"])

    def __getitem__(self, index: int) -> dict:
        return {key: value[index] for key, value in self.data.items()}


class MetricsModule(L.LightningModule):
    def __init__(self, out_path: str) -> None:
        super().__init__()
        self.model = make_tiny_vit(num_classes=NUM_CLASSES)
        self.metrics = torch.nn.ModuleDict(make_metrics())
        self.out_path = out_path
        self.seen = 0

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self.model.eval()
        update_all(self.metrics, self.model, batch)
        self.seen += len(batch["images"])

    def on_test_epoch_end(self) -> None:
        synced = results(self.metrics)  # every rank joins the sync
        if self.trainer.is_global_zero:
            synced["world_size"] = self.trainer.world_size
            synced["rank0_images"] = self.seen
            with open(self.out_path, "w") as handle:
                json.dump(synced, handle)


def main(out_path: str) -> None:
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    loader = DataLoader(Items(ddp_dataset()), batch_size=2, shuffle=False)
    trainer.test(MetricsModule(out_path), dataloaders=loader, verbose=False)


if __name__ == "__main__":
    main(sys.argv[1])
