"""Run by test_ddp.py in a subprocess: fit one epoch of the recording tiny ViT under DDP with a ShortcutCorrection
of a tag, each rank writing ``rank<r>.json``: which of the images its training_step got carry the tag.

Usage: python tests/callbacks/correction_ddp_run.py OUT_DIR DEVICES
(Lightning's ``ddp`` re-runs this same command for the second process.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lightning.pytorch import seed_everything  # noqa: E402
from lightning.pytorch.loggers import CSVLogger  # noqa: E402

from gradskip_lightning import ShortcutCorrection  # noqa: E402
from gradskip_lightning.callbacks.shortcut_correction import PatchPaste  # noqa: E402
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.shortcuts.tags import SpuriousTag  # noqa: E402
from tests.callbacks.correction_helpers import carries, recorder  # noqa: E402
from tests.callbacks.helpers import tiny_data, tiny_trainer  # noqa: E402

TAG = SpuriousTag(target_class=1, pattern=((1.0, 0.0), (0.0, 1.0)), position=(20, 20))


def main(out: Path, devices: int) -> None:
    seed_everything(0)
    logger = CSVLogger(save_dir=str(out), name=f"devices_{devices}", version=0)
    trainer = tiny_trainer(
        out,
        logger=logger,
        callbacks=[ShortcutCorrection(TAG, discovery=False, p=0.5)],
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=1,
        num_sanity_val_steps=0,
        deterministic=False,
    )
    data, module = tiny_data(), recorder()
    trainer.fit(module, datamodule=data)
    paste = PatchPaste.from_tag(TAG, Normalisation(data.mean, data.std))
    flags = [carries(images, paste).tolist() for _, images, _ in module.seen]
    (out / f"devices_{devices}" / f"rank{trainer.global_rank}.json").write_text(json.dumps(flags))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
