"""The README picture: a few test images x (image, ground-truth square, one overlay per method)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image
from torch import Tensor

from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.data import PlantedShapesSegmentationDataModule
from gradskip_lightning.render import overlay, to_display

from .models import SegmentationSubset

#: Colours of the saved PNG's palette (a palette image is a third of the size of an RGB one).
PALETTE_COLOURS = 256
#: The figure's map columns, in order (those run), with their titles.
FIGURE_METHODS: dict[str, str] = {
    "gradskip": "GradSkip",
    "rollout": "rollout",
    "chefer": "Chefer",
    "raw_attention": "raw attention",
    "grad_cam": "Grad-CAM",
}


def write_figure(
    path: Path,
    subset: SegmentationSubset,
    maps: dict[str, Tensor],
    datamodule: PlantedShapesSegmentationDataModule,
    count: int,
    seed: int,
) -> None:
    """Save a PNG of the first ``count`` subset images: the image, its square, then each method's map
    (``maps``: name -> (>= count, H, W), of the model of training seed ``seed``) over the image; the
    PNG has a palette of ``PALETTE_COLOURS`` colours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    display = to_display(subset.images[:count], Normalisation(datamodule.mean, datamodule.std))
    columns = [("image", display), ("square", overlay(display, subset.masks[:count].float(), alpha=0.6))]
    columns += [(title, overlay(display, maps[name][:count])) for name, title in FIGURE_METHODS.items() if name in maps]
    height = 1.15 * count + 0.4
    figure, axes = plt.subplots(count, len(columns), figsize=(1.15 * len(columns), height), squeeze=False)
    for col, (title, images) in enumerate(columns):
        axes[0, col].set_title(title, fontsize=8)
        for row in range(count):
            axes[row, col].imshow(np.asarray(images[row]), interpolation="nearest")
            axes[row, col].axis("off")
    figure.suptitle(f"planted-shapes SegFormer (training seed {seed}): maps of the square's class", fontsize=8)
    figure.tight_layout(pad=0.2, rect=(0.0, 0.0, 1.0, 1.0 - 0.22 / height))
    buffer = io.BytesIO()
    figure.savefig(buffer, dpi=110)
    plt.close(figure)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.open(buffer).convert("RGB").quantize(colors=PALETTE_COLOURS).save(path, optimize=True)
