"""The front door's ``normalisation``: the one the pictures, the transplant test and the image properties use."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from lightning.pytorch import seed_everything
from lightning.pytorch.loggers import CSVLogger

from gradskip_lightning import (
    DiscoveryStage,
    GradSkipCallback,
    Normalisation,
    ProbeSettings,
    ScoreSettings,
    render,
)
from gradskip_lightning.shortcuts import SpuriousTag
from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer

TAG = SpuriousTag(target_class=1, p_in=0.9, p_out=0.05, position=(0, 0))
#: The planted shapes' own normalisation (their datamodule's mean and std).
PLANTED = Normalisation(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))


def _fit(root: Path, normalisation: Normalisation | None, datamodule_declares: bool):
    """One short epoch with the transplant test and the discovery stage's brightness test: the callback, its
    logged row (discovery and transplant keys) and its maps file."""
    seed_everything(0)
    data = tiny_data(tag=TAG)  # images normalised with PLANTED, whatever the attributes then say
    if not datamodule_declares:
        data.mean = data.std = None
    callback = GradSkipCallback(
        probes=ProbeSettings(num_probes=8),
        scores=ScoreSettings(insertion_steps=4),
        normalisation=normalisation,
        discovery=DiscoveryStage(probes_per_class=3, properties=("brightness",)),
        transplant=True,
    )
    logger = CSVLogger(str(root), name="run")
    trainer = tiny_trainer(root, logger=logger, callbacks=[callback], max_epochs=1, limit_train_batches=2)
    trainer.fit(tiny_module(), datamodule=data)
    with open(Path(logger.log_dir) / "metrics.csv") as handle:
        (row,) = [r for r in csv.DictReader(handle) if r.get("transplant/gradskip/flip_rate")]
    logged = {
        k: float(v) for k, v in row.items() if k.startswith(("transplant/", "discovery/")) and "time" not in k and v
    }
    with np.load(Path(logger.log_dir) / "gradskip" / "maps" / "epoch_0000.npz") as saved:
        transplant = {k: saved[k] for k in ("transplant_flip", "transplant_mass")}
    return callback, logged, transplant


def test_the_front_doors_normalisation_reaches_the_pictures_the_transplant_test_and_the_properties(tmp_path):
    # The datamodule's own mean and std (the default) against the same normalisation given at the front door
    # to a datamodule that declares none: every transplant and discovery value, and every picture, the same.
    declared, declared_logged, declared_maps = _fit(tmp_path / "declared", None, datamodule_declares=True)
    given, given_logged, given_maps = _fit(tmp_path / "given", PLANTED, datamodule_declares=False)
    assert given.normalisation == PLANTED and given.monitor.prepared.data.transplant.normalisation == PLANTED
    assert given.discovered is not None and given.discovered.properties is not None
    assert given.discovered.properties.space.normalisation == PLANTED  # the pixel space of the property tests
    assert any(k.startswith("discovery/gradskip/brightness/") for k in given_logged)
    assert given_logged.keys() == declared_logged.keys()
    for name, value in given_logged.items():
        assert value == declared_logged[name] or (math.isnan(value) and math.isnan(declared_logged[name])), name
    for name, values in given_maps.items():
        np.testing.assert_array_equal(values, declared_maps[name])
    sheet = given.monitor.prepared.sheet.images
    np.testing.assert_array_equal(sheet, declared.monitor.prepared.sheet.images)
    probes = given.monitor.probes.images
    shown = render.upscale(render.to_display(probes, PLANTED), given.render.display_size)
    np.testing.assert_array_equal(sheet, shown)  # de-normalised, not each image min-max scaled
    assert not np.array_equal(shown, render.upscale(render.to_display(probes), given.render.display_size))
    # Another normalisation given at the front door changes the pasted tag's values, so the transplant test.
    shifted = Normalisation(mean=(0.1, 0.9, 0.1), std=(0.25, 0.25, 0.25))
    moved, _, shifted_maps = _fit(tmp_path / "shifted", shifted, datamodule_declares=True)
    assert moved.discovered is not None and moved.discovered.properties is not None
    assert moved.discovered.properties.space.normalisation == shifted  # the front door's, not the datamodule's
    assert not np.allclose(shifted_maps["transplant_mass"], given_maps["transplant_mass"], equal_nan=True)


def test_without_any_normalisation_pictures_are_min_max_scaled_and_the_transplant_test_is_refused(tmp_path):
    data = tiny_data(tag=TAG)
    data.mean = data.std = None
    callback = GradSkipCallback(probes=ProbeSettings(num_probes=4), transplant=True)
    with pytest.raises(ValueError, match=r"needs the images' normalisation: give normalisation=Normalisation"):
        tiny_trainer(tmp_path, logger=False, callbacks=[callback]).fit(tiny_module(), datamodule=data)
