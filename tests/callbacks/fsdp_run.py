"""Run by test_ddp.py in a subprocess: fit one epoch under FSDP2 (``ModelParallelStrategy`` with
``fully_shard``, gloo, 2 CPU processes) with explicit probes of which one, in rank 1's shard,
gives non-finite logits: every rank must skip the epoch together and training must finish.

Each rank writes ``result_rank<r>.json``: the epochs trained, the callback's ``skipped`` scalar and
its warnings.

Usage: python tests/callbacks/fsdp_run.py OUT_DIR
(Lightning re-runs this same command for the second process.)
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from lightning.pytorch import seed_everything  # noqa: E402
from lightning.pytorch.strategies import ModelParallelStrategy  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

from gradskip_lightning import GradSkipCallback, ProbeImages, ProbeSettings, ScoreSettings  # noqa: E402
from gradskip_lightning.training.classifier import ViTClassifier  # noqa: E402
from tests.callbacks.helpers import tiny_data, tiny_trainer  # noqa: E402


class ShardedViT(ViTClassifier):
    """The tiny ViT classifier with each block and the whole model sharded by FSDP2."""

    def configure_model(self) -> None:
        mesh = self.device_mesh["data_parallel"]
        for block in self.model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(self.model, mesh=mesh)


def main(out: Path) -> None:
    seed_everything(0)
    data = tiny_data(train_size=32, val_size=16)
    data.setup("validate")
    images = torch.stack([data.val_dataset[i][0] for i in range(4)])
    images[1] = 1e30  # finite, but overflows inside the ViT: non-finite logits for probe 1 (rank 1: positions 1, 3)
    images[1, :, ::2] = -1e30
    callback = GradSkipCallback(
        ProbeImages(images=images, labels=torch.arange(4)),
        probes=ProbeSettings(explain_batch_size=1),
        scores=ScoreSettings(insertion_steps=4),
        progress=False,
    )
    strategy = ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
    trainer = tiny_trainer(out, logger=False, callbacks=[callback], devices=2, strategy=strategy, max_epochs=1)
    torch.manual_seed(0)
    module = ShardedViT(num_classes=4, img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3, lr=1e-3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, datamodule=data)
    result = {
        "epochs": trainer.current_epoch,
        "skipped": float(trainer.callback_metrics.get("gradskip/skipped", float("nan"))),
        "warnings": [str(w.message) for w in caught if "GradSkipCallback" in str(w.message)],
    }
    (out / f"result_rank{trainer.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
