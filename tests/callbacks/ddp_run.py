"""Run by test_ddp.py in a subprocess: validate, then fit one epoch, with the callback under DDP,
for a ViT classifier or (``segformer``) a SegFormer segmentation model.

Each rank writes ``forwards_rank<r>.txt``: how many times its first block ran (under FSDP or
DeepSpeed ZeRO-3 each of those is a collective, so the counts must be equal), and
``callback_metrics_rank<r>.json``: the callback's scalars in its ``trainer.callback_metrics``.

Usage: python tests/callbacks/ddp_run.py OUT_DIR DEVICES [vit|segformer]
(Lightning's ``ddp`` re-runs this same command for the second process.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lightning.pytorch import seed_everything  # noqa: E402
from lightning.pytorch.loggers import CSVLogger  # noqa: E402

from gradskip_lightning import DiscoveryStage, GradSkipCallback, MethodSettings, ProbeSettings, ScoreSettings  # noqa: E402
from tests.callbacks.helpers import (  # noqa: E402
    tiny_data,
    tiny_module,
    tiny_segmentation_data,
    tiny_segmentation_module,
    tiny_trainer,
)

#: Odd probe count and a small explain batch: uneven shards and several chunks per rank.
CALLBACK = dict(
    probes=ProbeSettings(num_probes=9, explain_batch_size=2),
    scores=ScoreSettings(insertion_steps=4),
    methods=MethodSettings(compare=["rollout"]),
    progress=False,
)
#: The discovery stage, on the ViT (it analyses classifiers).
DISCOVERY = DiscoveryStage(probes_per_class=3, alert_threshold=0.0)


def main(out: Path, devices: int, family: str = "vit") -> None:
    seed_everything(0)
    logger = CSVLogger(save_dir=str(out), name=f"devices_{devices}", version=0)
    strategy = "ddp" if devices > 1 else "auto"
    trainer = tiny_trainer(
        out,
        logger=logger,
        callbacks=[GradSkipCallback(**CALLBACK, discovery=DISCOVERY if family == "vit" else None)],
        devices=devices,
        strategy=strategy,
        max_epochs=1,
        deterministic=False,
    )
    if family == "segformer":
        data, module = tiny_segmentation_data(), tiny_segmentation_module()
        first_block = module.model.segformer.stages[0].blocks[0]
    else:
        data, module = tiny_data(train_size=32, val_size=16), tiny_module()
        first_block = module.model.blocks[0]
    forwards = []
    first_block.register_forward_hook(lambda *args: forwards.append(1))
    trainer.validate(module, datamodule=data)  # untrained weights: comparable across process counts
    trainer.fit(module, datamodule=data)
    folder = out / f"devices_{devices}"
    (folder / f"forwards_rank{trainer.global_rank}.txt").write_text(str(len(forwards)))
    ours = {k: float(v) for k, v in trainer.callback_metrics.items() if "gradskip/" in k}
    (folder / f"callback_metrics_rank{trainer.global_rank}.json").write_text(json.dumps(ours, sort_keys=True))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:])
