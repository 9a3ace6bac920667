"""A teacher/student LightningModule on MONAI-style dict items with custom keys trains a few steps
with the callback, which explains the student (``backbone="student"``) and logs to an offline W&B
run, read back from its files; the discovery probes are read through the same keys."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import wandb
from lightning.pytorch import LightningDataModule, LightningModule, seed_everything
from lightning.pytorch.loggers import WandbLogger
from torch import Tensor
from torch.utils.data import Dataset

from gradskip_lightning import DiscoveryStage, GradSkipCallback, ProbeSettings, ScoreSettings, explainer_for
from tests.callbacks.helpers import tiny_data, tiny_trainer
from tests.callbacks.wandb_files import find_runs
from tests.conftest import make_tiny_vit

P = "gradskip/"


class Records(Dataset):
    """{"img", "target", "seg", "patient_id", "path"} records of planted-shapes items."""

    def __init__(self, items: Dataset) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> dict[str, Any]:
        image, label, mask = self.items[index]
        return {"img": image, "target": label, "seg": mask, "patient_id": index, "path": f"case_{index:03d}.png"}


class TeacherStudent(LightningModule):
    """A frozen teacher ViT and a student ViT distilled from it (cross-entropy plus soft targets)."""

    def __init__(self) -> None:
        super().__init__()
        self.teacher = make_tiny_vit(seed=0).requires_grad_(False)
        self.student = make_tiny_vit(seed=1).train()

    def forward(self, images: Tensor) -> Tensor:
        return self.student(images)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        logits = self.student(batch["img"])
        soft = self.teacher(batch["img"]).softmax(dim=-1)
        return F.cross_entropy(logits, batch["target"]) + F.cross_entropy(logits, soft)

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self.log("val/loss", F.cross_entropy(self.student(batch["img"]), batch["target"]), batch_size=len(batch["img"]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.student.parameters(), lr=1e-3)


@pytest.mark.slow
def test_the_student_of_a_teacher_student_module_is_explained_and_logged(tmp_path):
    seed_everything(0)
    data = tiny_data()
    data.setup("fit")
    val = Records(data.val_dataset)
    datamodule = LightningDataModule.from_datasets(train_dataset=Records(data.train_dataset), val_dataset=val)
    datamodule.val_dataset = val  # where the callback draws its probes from
    keys = dict(image_key="img", label_key="target", mask_keys={"seg": "object"})
    callback = GradSkipCallback(
        backbone="student",
        probes=ProbeSettings(num_probes=4, **keys),
        scores=ScoreSettings(insertion_steps=4),
        discovery=DiscoveryStage(probes_per_class=2, batch_size=16),
    )
    logger = WandbLogger(save_dir=str(tmp_path), offline=True, project="gradskip-backbone")
    trainer = tiny_trainer(tmp_path, logger=logger, callbacks=[callback], max_epochs=1, limit_train_batches=2)
    module = TeacherStudent()
    trainer.fit(module, datamodule=datamodule)
    wandb.finish()
    assert callback.monitor.prepared.explainers["gradskip"].model is module.student
    probes, found = callback.monitor.source.probes, callback.monitor.runner.discoverer.probes
    for drawn in (probes, found):  # both read "img", "target" and "seg" (as the object region), nothing else
        assert drawn is not None and list(drawn.regions) == ["object"]
        assert torch.equal(drawn.labels, data.val_dataset.labels[drawn.ids])
        assert torch.equal(drawn.masks, torch.stack([data.val_dataset[i][2] for i in drawn.ids.tolist()]))
    assert torch.bincount(found.labels).tolist() == [2, 2, 2, 2]  # two per class
    (run,) = find_runs(tmp_path / "wandb")
    (row,) = run.rows_with(f"faithfulness/{P}insertion")
    assert row[f"{P}skipped"] == 0.0
    assert 0.0 <= row[f"faithfulness/{P}insertion"] <= 1.0 and 0.0 <= row[f"regions/{P}pointing_game"] <= 1.0
    assert 0.0 <= row[f"discovery/{P}max_suspicion"] <= 1.0
    assert f"probes/{P}overlays" in row and list(run.media.rglob("*.png"))
    # the maps written at that epoch end are the trained student's, not the teacher's
    (written,) = tmp_path.rglob("epoch_0000.npz")
    maps = torch.from_numpy(np.load(written)["token_maps"])
    student = callback.monitor.prepared.explainers["gradskip"].explain(probes.images, probes.labels).token_maps
    teacher = explainer_for(module, backbone="teacher").explain(probes.images, probes.labels).token_maps
    torch.testing.assert_close(maps, student, rtol=1e-5, atol=1e-7)
    assert (maps - teacher).abs().max() > 0.1 * maps.abs().max()
