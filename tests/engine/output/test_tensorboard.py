"""With a TensorBoardLogger, images and histograms go to TensorBoard: read back from the event file."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from lightning.pytorch import seed_everything
from PIL import Image

from gradskip_lightning import GradSkipCallback, MethodSettings, ProbeSettings, RenderSettings, ScoreSettings
from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer

pytest.importorskip("tensorboard")


def test_images_histograms_and_scalars_reach_the_event_file(tmp_path):
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    seed_everything(0)
    logger = TensorBoardLogger(save_dir=str(tmp_path), name="tb")
    callback = GradSkipCallback(
        probes=ProbeSettings(num_probes=4),
        scores=ScoreSettings(insertion_steps=4),
        render=RenderSettings(probe_overlays=True),
        methods=MethodSettings(compare=["rollout"]),
    )
    tiny_trainer(tmp_path, logger=logger, callbacks=[callback], max_epochs=2).fit(tiny_module(), datamodule=tiny_data())
    events = EventAccumulator(logger.log_dir, size_guidance={"images": 0, "histograms": 0, "scalars": 0})
    events.Reload()
    tags = events.Tags()
    probe_ids = callback.monitor.source.probes.ids.tolist()
    expected_images = {"probes/gradskip/overlays", "probes/gradskip/overlays/rollout"}
    expected_images |= {f"heads/gradskip/{part}" for part in ("omega", "grad_flow", "sparsity")}
    expected_images |= {f"probes/gradskip/overlay/probe_{i}" for i in probe_ids}
    assert set(tags["images"]) == expected_images
    assert {f"heads/gradskip/omega/layer_{layer}" for layer in (0, 1)} <= set(tags["histograms"])
    assert {"faithfulness/gradskip/insertion", "regions/gradskip/mass/object"} <= set(tags["scalars"])
    grids = events.Images("probes/gradskip/overlays")
    assert [g.step for g in grids] == [e.step for e in events.Scalars("faithfulness/gradskip/insertion")]
    pixels = np.asarray(Image.open(io.BytesIO(grids[-1].encoded_image_string)))
    assert pixels.shape[2] == 3 and pixels.std() > 10  # a colour grid, not a blank image
    overlay = events.Images(f"probes/gradskip/overlay/probe_{probe_ids[0]}")[0]
    assert (overlay.height, overlay.width) == (128 + 12, 128)  # the caption strip under the overlay
    histogram = events.Histograms("heads/gradskip/omega/layer_0")[0].histogram_value
    assert histogram.num == 4 * 3  # probes x heads
    assert (Path(logger.log_dir) / "gradskip" / "images" / "epoch_0001").is_dir()  # PNG files as well
