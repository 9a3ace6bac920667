"""ShortcutCorrection with real Trainers: a tag's pixels reach training_step on every class's images (its own
class's images have it taken off first, unless erase=False), a flagged class's hotspot is pasted from the next
epoch, a flagged global property is given from the next epoch, nothing flagged leaves the training bitwise the
same, the global RNG is never drawn from, the correction survives a checkpoint, its keys are logged, bad settings
are refused (in Python and LightningCLI YAML alike)."""

from __future__ import annotations

import csv
import logging
import warnings
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch import seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from gradskip_lightning import DiscoveryStage, GradSkipCallback, ProbeSettings, ScoreSettings, ShortcutCorrection
from gradskip_lightning.callbacks.correction_settings import CorrectionSettings
from gradskip_lightning.callbacks.shortcut_correction import PatchPaste, PropertyPaste
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.shortcuts.correction_transfers import correction_property
from gradskip_lightning.shortcuts.image_properties import PROPERTIES
from gradskip_lightning.shortcuts.input_gradient import input_gradient_penalty
from gradskip_lightning.shortcuts.regions import Region
from gradskip_lightning.shortcuts.tags import SpuriousTag
from tests.callbacks.correction_helpers import carries, falling, in_order_data, recorder
from tests.callbacks.helpers import callback_from_yaml, tiny_data, tiny_module, tiny_trainer
from tests.shortcuts.test_artifacts import reaches

C = "correction/gradskip/"
#: A 4 x 4 checkerboard at (20, 20) on class 1: a place and a pattern the planted shapes never draw.
TAG = SpuriousTag(target_class=1, pattern=tuple(tuple(float((r + c) % 2) for c in range(4)) for r in range(4)),
                  position=(20, 20))  # fmt: skip


def _gradskip(**discovery) -> GradSkipCallback:
    return GradSkipCallback(
        probes=ProbeSettings(num_probes=4),
        scores=ScoreSettings(insertion_steps=2, fvt_top_k=0),
        discovery=DiscoveryStage(**{"probes_per_class": 4, **discovery}),
        progress=False,
    )


def _fit(root: Path, callbacks: list, *, epochs: int = 2, logger=False, ckpt_path=None, module=None) -> tuple:
    """Seeded fit of the recording tiny ViT; returns (module, trainer, the global RNG state after fit)."""
    seed_everything(0)
    module = module or recorder()
    trainer = tiny_trainer(root, logger=logger, callbacks=callbacks, max_epochs=epochs, num_sanity_val_steps=0)
    trainer.fit(module, datamodule=tiny_data(), ckpt_path=ckpt_path)
    return module, trainer, torch.get_rng_state()


def _rows(log_dir: str, name: str) -> list[dict[str, float]]:
    with open(Path(log_dir) / "metrics.csv") as handle:
        return [{k: float(v) for k, v in r.items() if v} for r in csv.DictReader(handle) if r.get(name)]


# ------------------------------------------------------------------------------------- a known tag


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The seeded 2-epoch fit without a correction: (module, the global RNG state after fit)."""
    module, _, rng = _fit(tmp_path_factory.mktemp("plain"), [])
    return module, rng


@pytest.mark.slow
@pytest.mark.parametrize("erase", [True, False])
def test_a_tags_pixels_reach_training_step_on_every_classs_images_and_nothing_else_changes(
    tmp_path, caplog, plain, erase
):
    correction = ShortcutCorrection(TAG, discovery=False, p=0.5, erase=erase, seed=3)
    logger = CSVLogger(str(tmp_path), name="tag")
    with caplog.at_level(logging.INFO):
        corrected, _, rng_corrected = _fit(tmp_path / "a", [correction], logger=logger)
    plain_module, rng_plain = plain
    paste = PatchPaste.from_tag(TAG, Normalisation(tiny_data().mean, tiny_data().std))
    assert len(corrected.seen) == len(plain_module.seen) == 8  # 2 epochs of 4 batches
    inside = torch.zeros(32, 32, dtype=torch.bool)
    inside[20:24, 20:24] = True
    carried, labels = [], []
    for (_, images, label), (_, clean, clean_label) in zip(corrected.seen, plain_module.seen, strict=True):
        assert torch.equal(label, clean_label)  # the same batches: the correction drew nothing from the global RNG
        assert torch.equal(images[:, :, ~inside], clean[:, :, ~inside])  # nothing outside the tag's box changed
        has = carries(images, paste)
        assert not carries(clean, paste).any()
        own = label == TAG.target_class
        kept = ~has & ~own if erase else ~has
        assert torch.equal(images[kept], clean[kept])  # the others are untouched
        if erase:  # class 1's images without the tag have another class's image's pixels in its box
            boxes, stand_ins = images[~has & own][:, :, inside], clean[~own][:, :, inside]
            assert len(boxes) and (boxes[:, None] == stand_ins[None]).flatten(2).all(2).any(1).all()
        carried.append(has)
        labels.append(label)
    carried_all, labels_all = torch.cat(carried), torch.cat(labels)
    assert 0.35 < carried_all.float().mean() < 0.65  # p = 0.5 of 128 images
    assert all(carried_all[labels_all == k].any() for k in range(4))  # on every class's images, not only class 1's
    own_share = carried_all[labels_all == TAG.target_class].float().mean()
    assert 0.2 < own_share < 0.8 if erase else own_share > 0.35  # erased: class 1 at p like the others
    assert torch.equal(rng_corrected, rng_plain)  # the global RNG state after training is the same
    said = [r.getMessage() for r in caplog.records if "ShortcutCorrection" in r.getMessage()]
    first = "after taking it off the class's own images (from the batch's other classes) " if erase else ""
    assert said == [
        "ShortcutCorrection: correcting class 1's shortcut at (20, 20)-(24, 24): pasting it on 50 % of every class's "
        f"training images {first}from epoch 0 (the given tag)"
    ]  # once
    rows = _rows(logger.log_dir, f"{C}active")
    assert [r[f"{C}active"] for r in rows] == [1.0, 1.0]  # every epoch
    last = torch.cat(carried[4:]).float().mean().item()
    assert rows[1][f"{C}pasted_share"] == pytest.approx(last) == rows[1][f"{C}pasted_share/class_1"]
    assert [rows[1][f"{C}box/{side}/class_1"] for side in ("top", "left", "bottom", "right")] == [20, 20, 24, 24]
    assert rows[1].get(f"{C}erased_share/class_1") == (1.0 if erase else None)  # every class-1 image, each epoch


# ------------------------------------------------------------------------------------- the discovery stage


@pytest.fixture(scope="module")
def flagged(tmp_path_factory):
    """2 epochs with every class flagged at epoch 0's discovery (alert threshold 0, alpha 1),
    corrected from epoch 1 at p = 1; the checkpoint at the end."""
    root = tmp_path_factory.mktemp("flagged")
    gradskip, correction = _gradskip(alert_threshold=0.0, alpha=1.0), ShortcutCorrection(p=1.0)
    with pytest.warns(UserWarning, match="may use a shortcut"):
        module, trainer, _ = _fit(root, [gradskip, correction])
    trainer.save_checkpoint(root / "last.ckpt")
    return module, gradskip, correction, root / "last.ckpt"


@pytest.mark.slow
def test_a_flagged_classs_hotspot_is_pasted_from_the_next_epoch_with_its_discovery_probes_pixels(flagged):
    module, gradskip, correction, _ = flagged
    discovered = gradskip.discovered
    assert discovered is not None and discovered.epoch == 1  # the last run; the corrections started from epoch 0's
    assert correction.corrections and all(c.epoch == 1 for c in correction.corrections)
    assert all("flagged by the discovery stage of 'gradskip/' at epoch 0" in c.origin for c in correction.corrections)
    last = correction.corrections[-1].artifact  # pasted last on every image: its pixels win in its mask
    assert isinstance(last, PatchPaste)
    donors = discovered.probes.images[discovered.probes.labels == last.target]
    top, left, bottom, right = last.box
    assert torch.equal(last.donors, donors[:, :, top:bottom, left:right])
    fresh = ShortcutCorrection(p=1.0)
    fresh._follow(gradskip)  # the last run, read by a fresh correction; no stamp, no pixel the probes share there:
    # each class's proved region, not grown
    for correction_of_class in fresh.corrections:
        paste, test = correction_of_class.artifact, discovered.found.reported[correction_of_class.artifact.target]
        proved = Region.of_patches(test.region, discovered.patch_size)  # the very region the transplant test pasted
        assert isinstance(paste, PatchPaste) and paste.box == proved.bounds and torch.equal(paste.mask, proved.mask)
        assert torch.equal(paste.donors, proved.cut(discovered.probes.images[test.group.members]))
        assert "the region its transplant test proved, the pixels" in correction_of_class.origin
    for epoch, images, _ in module.seen:
        pasted = carries(images, last)
        assert pasted.all() if epoch == 1 else not pasted.any()


@pytest.mark.slow
def test_a_property_flagged_beside_its_classs_flagged_hotspot_waits_for_the_hotspots_correction(flagged):
    _, gradskip, _, _ = flagged
    run = gradskip.discovered
    assert run is not None and run.properties is not None and bool(run.found.flagged[0])
    flags = {name: torch.zeros_like(f) for name, f in run.properties.flagged.items()}
    flags["noise"] = flags["noise"].index_fill(0, torch.tensor([0]), True)  # class 0's noise, beside its hotspot
    beside = replace(run, properties=replace(run.properties, flagged=flags))
    correction = ShortcutCorrection(classes=[0])
    correction._follow(SimpleNamespace(discovered=beside, log_prefix="gradskip/"))
    assert [(c.artifact.kind, c.epoch) for c in correction.corrections] == [("patch", run.epoch + 1)]
    after = replace(beside, epoch=run.epoch + 1)  # the next run measured an epoch the hotspot's correction shaped
    correction._follow(SimpleNamespace(discovered=after, log_prefix="gradskip/"))
    assert [(c.artifact.kind, c.epoch) for c in correction.corrections] == [
        ("patch", run.epoch + 1),
        ("property", run.epoch + 2),
    ]  # still flagged with the stamp corrected: a shortcut of its own
    alone = replace(beside, found=replace(run.found, flagged=torch.zeros_like(run.found.flagged)))
    correction = ShortcutCorrection(classes=[0])
    correction._follow(SimpleNamespace(discovered=alone, log_prefix="gradskip/"))
    assert [(c.artifact.kind, c.epoch) for c in correction.corrections] == [("property", run.epoch + 1)]


def test_a_property_corrected_before_its_classs_hotspot_stops_when_the_hotspots_correction_starts(flagged, caplog):
    _, gradskip, _, _ = flagged
    run = gradskip.discovered
    assert run is not None and run.properties is not None and bool(run.found.flagged[0])
    flags = {name: torch.zeros_like(f) for name, f in run.properties.flagged.items()}
    flags["noise"] = flags["noise"].index_fill(0, torch.tensor([0]), True)
    noise_first = replace(run, found=replace(run.found, flagged=torch.zeros_like(run.found.flagged)), epoch=0)
    noise_first = replace(noise_first, properties=replace(run.properties, flagged=flags))  # class 0's noise alone
    correction = ShortcutCorrection(classes=[0])
    correction._follow(SimpleNamespace(discovered=noise_first, log_prefix="gradskip/"))
    assert [(c.artifact.kind, c.epoch, c.until) for c in correction.corrections] == [("property", 1, None)]
    quiet = {name: torch.zeros_like(f) for name, f in flags.items()}
    hotspot = replace(run, epoch=1, properties=replace(run.properties, flagged=quiet))  # then its hotspot
    with caplog.at_level(logging.INFO):
        correction._follow(SimpleNamespace(discovered=hotspot, log_prefix="gradskip/"))
    assert [(c.artifact.kind, c.epoch, c.until) for c in correction.corrections] == [
        ("property", 1, 2),
        ("patch", 2, None),
    ]  # the noise corrected epoch 1 only; the stamp from epoch 2
    assert [c.artifact.kind for _, c in correction._active(1)] == ["property"]
    assert [c.artifact.kind for _, c in correction._active(2)] == ["patch"]
    said = [r.getMessage() for r in caplog.records if "stopping class 0's noise shortcut correction from epoch 2" in
            r.getMessage()]  # fmt: skip
    assert len(said) == 1
    state = correction.state_dict()
    assert [c["until"] for c in state["corrections"]] == [2, None]
    fresh = ShortcutCorrection(classes=[0])
    fresh.load_state_dict(state)  # a resumed fit keeps it stopped and says nothing of it
    assert [(c.epoch, c.until) for c in fresh.corrections] == [(1, 2), (2, None)] and len(fresh._resumed) == 1
    again = replace(run, epoch=2, properties=replace(run.properties, flagged=flags))  # still flagged after it
    correction._follow(SimpleNamespace(discovered=again, log_prefix="gradskip/"))
    assert [(c.artifact.kind, c.epoch, c.until) for c in correction.corrections][2:] == [("property", 3, None)]


@pytest.mark.slow
def test_the_correction_is_in_the_checkpoint_and_a_resumed_fit_goes_on_correcting(flagged, tmp_path, caplog):
    _, _, correction, checkpoint = flagged
    state = torch.load(checkpoint, weights_only=True)["callbacks"][correction.state_key]
    assert len(state["corrections"]) == len(correction.corrections)
    assert state["last_run"] == 1  # epoch 1's run was read when the checkpoint was saved
    fresh = ShortcutCorrection(p=1.0)
    with caplog.at_level(logging.INFO):
        module, _, _ = _fit(tmp_path, [_gradskip(alert_threshold=1.0), fresh], epochs=3, ckpt_path=checkpoint)
    assert [(c.artifact.target, c.artifact.box, c.epoch) for c in fresh.corrections] == [
        (c.artifact.target, c.artifact.box, c.epoch) for c in correction.corrections
    ]
    for restored, saved in zip(fresh.corrections, correction.corrections, strict=True):
        assert isinstance(restored.artifact, PatchPaste) and isinstance(saved.artifact, PatchPaste)
        assert torch.equal(restored.artifact.donors, saved.artifact.donors)
    assert [epoch for epoch, _, _ in module.seen] == [2] * 4  # the resumed epoch only
    assert all(carries(images, fresh.corrections[-1].artifact).all() for _, images, _ in module.seen)
    said = [r.getMessage() for r in caplog.records if "ShortcutCorrection" in r.getMessage()]
    assert len(said) == len(fresh.corrections) and all("continuing (from the checkpoint)" in m for m in said)


def _checkpointed_fit(root: Path, ckpt_path: Path | None = None) -> tuple:
    """3 epochs of the in-order data, every class flagged at every discovery run, corrected once flagged at 2 runs
    in a row (from epoch 2) at p = 0.5; a checkpoint per epoch (``root/checkpoints/epoch=<e>.ckpt``).
    (module, correction)"""
    seed_everything(0)
    gradskip, correction = _gradskip(alert_threshold=0.0, alpha=1.0), ShortcutCorrection(p=0.5, flagged_epochs=2)
    every_epoch = ModelCheckpoint(root / "checkpoints", filename="{epoch}", save_top_k=-1, every_n_epochs=1)
    trainer = tiny_trainer(root, logger=False, callbacks=[gradskip, correction, every_epoch], max_epochs=3,
                           num_sanity_val_steps=0, enable_checkpointing=True)  # fmt: skip
    module = tiny_module()
    with warnings.catch_warnings():  # the shortcut alerts of a new flag (not again after a resume)
        warnings.simplefilter("ignore", UserWarning)
        trainer.fit(module, datamodule=in_order_data(), ckpt_path=ckpt_path)
    return module, correction


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    root = tmp_path_factory.mktemp("uninterrupted")
    module, correction = _checkpointed_fit(root)
    return root, module, correction


@pytest.mark.slow
@pytest.mark.parametrize("start", [0, 1])
def test_a_fit_resumed_from_any_epochs_checkpoint_corrects_as_the_uninterrupted_one_bitwise(
    uninterrupted, tmp_path, start
):
    """Epoch 0's checkpoint holds the first flag of the streak, epoch 1's the flag that starts the correction at
    epoch 2: the resumed fit's weights equal the uninterrupted fit's, bit for bit."""
    root, module, correction = uninterrupted
    assert [(c.artifact.target, c.epoch) for c in correction.corrections] == [(k, 2) for k in range(4)]
    checkpoint = root / "checkpoints" / f"epoch={start}.ckpt"
    state = torch.load(checkpoint, weights_only=True)["callbacks"][correction.state_key]
    assert state["last_run"] == start and state["streaks"] == [[k, start + 1] for k in range(4)]
    assert len(state["corrections"]) == (4 if start == 1 else 0)
    resumed, fresh = _checkpointed_fit(tmp_path, ckpt_path=checkpoint)
    assert [(c.artifact.target, c.epoch) for c in fresh.corrections] == [(k, 2) for k in range(4)]
    weights, again = module.state_dict(), resumed.state_dict()
    assert weights.keys() == again.keys() and all(torch.equal(weights[k], again[k]) for k in weights)


@pytest.mark.slow
def test_a_flagged_colour_is_given_to_every_classs_images_from_the_next_epoch_logged_and_checkpointed(tmp_path, caplog):
    """Every class with a colour suspicion >= 0 flagged at epoch 0 (property_alert_threshold 0 and alpha 1; the hotspot
    test never fires), corrected from epoch 1 at p = 1: each image then gets every corrected class's colour in turn."""
    gradskip = _gradskip(alert_threshold=1.0, alpha=1.0, properties=["colour"], property_alert_threshold=0.0)
    correction, logger = ShortcutCorrection(p=1.0), CSVLogger(str(tmp_path), name="colour")
    with caplog.at_level(logging.INFO), pytest.warns(UserWarning, match="may use a colour shortcut"):
        module, _, _ = _fit(tmp_path, [gradskip, correction], logger=logger)
    found = _rows(logger.log_dir, "discovery/gradskip/colour/suspicion/class_0")[0]  # epoch 0's run
    flagged = [k for k in range(4) if found.get(f"discovery/gradskip/colour/suspicion/class_{k}", -1.0) >= 0]
    assert flagged and [(c.artifact.target, c.artifact.kind, c.epoch) for c in correction.corrections] == [
        (k, "property", 1) for k in flagged
    ]  # one correction per flagged (class, property), from the epoch after the flag; no hotspot
    last = correction.corrections[-1].artifact  # given last to every image: its colour wins
    assert isinstance(last, PropertyPaste) and last.name == "colour"
    assert gradskip.discovered is not None
    probes = gradskip.discovered.probes
    donors = probes.images[probes.labels == last.target]
    assert torch.equal(last.statistics, correction_property("colour").statistic(last.space.pixels(donors)))
    for epoch, images, _ in module.seen:
        pixels = last.space.pixels(images)
        reached = torch.stack([reaches("colour", pixels, donor.expand(len(pixels), -1), 1e-6)
                               for donor in last.statistics])  # fmt: skip
        assert reached.any(dim=0).all() if epoch == 1 else not reached.any(), epoch  # a donor's colour, by either
    said = [r.getMessage() for r in caplog.records if "ShortcutCorrection" in r.getMessage()]
    assert len(said) == len(flagged) and said[-1].startswith(
        f"ShortcutCorrection: correcting class {last.target}'s colour shortcut: giving 100 % of every class's "
        "training images its colour statistics after taking it off the class's own images (from the batch's other "
        "classes) from epoch 1 (flagged by the discovery stage of 'gradskip/' at epoch 0, colour suspicion "
    )
    row = _rows(logger.log_dir, f"{C}active")[-1]
    label = last.target
    assert row[f"{C}active"] == len(flagged) and row[f"{C}pasted_share"] == 1.0
    assert row[f"{C}colour/pasted_share/class_{label}"] == 1.0 == row[f"{C}colour/erased_share/class_{label}"]
    assert row[f"{C}colour/alpha/class_{label}"] == pytest.approx(last.scalars()["alpha"])
    assert row[f"{C}colour/beta/class_{label}"] == pytest.approx(last.scalars()["beta"])
    assert not any(name.startswith(f"{C}box/") or name.startswith(f"{C}pasted_share/") for name in row)
    torch.save(correction.state_dict(), tmp_path / "correction.pt")
    fresh = ShortcutCorrection()
    fresh.load_state_dict(torch.load(tmp_path / "correction.pt", weights_only=True))  # as a checkpoint loads
    restored = fresh.corrections[-1].artifact
    assert isinstance(restored, PropertyPaste) and torch.equal(restored.statistics, last.statistics)
    assert gradskip.discovered.properties is not None
    now = gradskip.discovered.properties.flagged["colour"].nonzero()[:, 0].tolist()  # the last run's flags
    streaks = {("colour", k): (int(k in flagged) + 1 if k in now else 0) for k in range(4)}
    assert fresh._property_streaks == streaks  # epoch 1's run too: read when the state was saved
    for options, corrected in (({"properties": ()}, []), ({"properties": ["noise"]}, []),
                               ({"classes": now[-1:]}, now[-1:]), ({}, now)):  # fmt: skip
        chosen = ShortcutCorrection(**options)
        chosen._follow(gradskip)  # a fresh correction reads the last run
        assert [c.artifact.target for c in chosen.corrections] == corrected, options


@pytest.mark.slow
def test_with_nothing_flagged_the_training_is_bitwise_the_same_as_without_the_correction(tmp_path):
    weights = []
    for name, callbacks in (("with", [_gradskip(alert_threshold=1.0), ShortcutCorrection()]),
                            ("without", [_gradskip(alert_threshold=1.0)])):  # fmt: skip
        module, trainer, rng = _fit(tmp_path / name, callbacks)
        assert float(trainer.callback_metrics["discovery/gradskip/flagged"]) == 0.0
        grads = {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}
        weights.append((module.state_dict(), grads, rng, [images for _, images, _ in module.seen]))
        if name == "with":
            assert callbacks[1].corrections == () and float(trainer.callback_metrics[f"{C}active"]) == 0.0
    (w1, g1, r1, s1), (w2, g2, r2, s2) = weights
    assert w1.keys() == w2.keys() and all(torch.equal(w1[k], w2[k]) for k in w1)
    assert g1.keys() == g2.keys() and all(torch.equal(g1[k], g2[k]) for k in g1)
    assert torch.equal(r1, r2) and all(torch.equal(a, b) for a, b in zip(s1, s2, strict=True))


def test_a_new_fit_on_another_trainer_starts_with_nothing_corrected(tmp_path, caplog):
    correction = ShortcutCorrection(TAG, discovery=False)
    with caplog.at_level(logging.INFO):
        _fit(tmp_path / "a", [correction], epochs=1)
        first = correction.corrections
        _fit(tmp_path / "b", [correction], epochs=1)
    assert len(correction.corrections) == 1 and correction.corrections[0] is not first[0]  # started again
    assert sum("ShortcutCorrection: correcting class 1's" in r.getMessage() for r in caplog.records) == 2


# ------------------------------------------------------------------------------------- the accuracy guard


@pytest.mark.slow
@pytest.mark.parametrize("action", ["weaken", "stop"])
def test_an_accuracy_drop_is_warned_in_one_line_logged_and_acted_on(tmp_path, action):
    """Every class flagged at epoch 0's discovery, corrected from epoch 1 at p = 1; the validation accuracy is 1 at
    epoch 0 and 0 from epoch 1: the fall is said once per corrected epoch, logged, and p halved or the correction
    stopped from the next epoch."""
    gradskip = _gradskip(alert_threshold=0.0, alpha=1.0)
    correction = ShortcutCorrection(p=1.0, properties=(), on_accuracy_drop=action)
    logger = CSVLogger(str(tmp_path), name="drop")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module, _, _ = _fit(tmp_path, [gradskip, correction], epochs=3, logger=logger, module=falling(falls_at=1))
    said = [str(w.message) for w in caught if "ShortcutCorrection: the accuracy" in str(w.message)]
    what = {"weaken": "halving p to 0.5 from the next epoch", "stop": "stopping the correction from the next epoch"}
    assert said[0] == (
        "ShortcutCorrection: the accuracy on the validation images fell from 1.000 (epoch 0, before the correction) to "
        f"0.000 at epoch 1, more than accuracy_tolerance=0.01; {what[action]} (on_accuracy_drop='{action}')"
    )
    assert len(said) == (2 if action == "weaken" else 1)  # weakened: still corrected at epoch 2, and halved again
    rows = _rows(logger.log_dir, f"{C}active")
    assert [r[f"{C}accuracy"] for r in rows] == [1.0, 0.0, 0.0]
    assert rows[1][f"{C}accuracy_change"] == -1.0 and f"{C}accuracy_change" not in rows[0]
    assert [r[f"{C}p"] for r in rows] == ([0.0, 1.0, 0.5] if action == "weaken" else [0.0, 1.0, 0.0])
    assert [r[f"{C}active"] for r in rows][2] == (len(correction.corrections) if action == "weaken" else 0.0)
    label = correction.corrections[0].artifact.target
    assert 0.0 <= rows[1][f"{C}spurious/class_{label}"] <= 1.0  # the stage's flip rate at the corrected epoch
    assert rows[1][f"{C}spurious_change/class_{label}"] == pytest.approx(
        rows[1][f"{C}spurious/class_{label}"] - correction.corrections[0].spurious
    )
    assert correction.state_dict()["p"] == (0.25 if action == "weaken" else 0.0)
    last = correction.corrections[-1].artifact
    carried = [carries(images, last).float().mean().item() for epoch, images, _ in module.seen if epoch == 2]
    assert (0.0 < sum(carried) / len(carried) < 1.0) if action == "weaken" else sum(carried) == 0.0


@pytest.mark.slow
def test_a_correction_that_keeps_the_accuracy_is_silent_and_keeps_p(tmp_path):
    gradskip = _gradskip(alert_threshold=0.0, alpha=1.0)
    correction = ShortcutCorrection(p=1.0, properties=(), on_accuracy_drop="stop", accuracy_tolerance=0.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(tmp_path, [gradskip, correction], module=falling(falls_at=None))
    assert not [w for w in caught if "ShortcutCorrection: the accuracy" in str(w.message)]
    assert correction.corrections and correction.state_dict()["p"] == 1.0
    assert correction.state_dict()["accuracy"] == [[0, 1.0], [1, 1.0]]


# ------------------------------------------------------------------------------------- unlearning by the loss


@pytest.mark.slow
def test_a_loss_correction_leaves_the_images_and_makes_the_model_insensitive_to_the_artifacts_pixels(
    tmp_path, caplog, plain
):
    centre = SpuriousTag(target_class=1, pattern=((0.5,) * 16,) * 16, position=(8, 8))  # where the shapes are
    correction = ShortcutCorrection(centre, discovery=False, unlearn="loss", penalty=1000.0)
    logger = CSVLogger(str(tmp_path), name="loss")
    with caplog.at_level(logging.INFO):
        corrected, _, _ = _fit(tmp_path / "a", [correction], logger=logger)
    plain_module, _ = plain
    assert all(torch.equal(a, b) for (_, a, _), (_, b, _) in zip(corrected.seen, plain_module.seen, strict=True))
    said = [r.getMessage() for r in caplog.records if "ShortcutCorrection" in r.getMessage()]
    assert said == [
        "ShortcutCorrection: correcting class 1's shortcut at (8, 8)-(24, 24): penalising the model's input "
        "gradient on its pixels (weight 1000) from epoch 0 (the given tag)"
    ]
    rows = _rows(logger.log_dir, f"{C}penalty")
    assert len(rows) == 2 and all(r[f"{C}penalty"] > 0 for r in rows) and rows[1][f"{C}pasted_share"] == 0.0
    images = torch.cat([images for _, images, _ in plain_module.seen[:4]])
    inside = centre.mask(32, 32)
    sensitivity = []
    for module in (plain_module, corrected):
        module.eval()
        sensitivity.append(float(input_gradient_penalty(module, images, inside)))
    assert sensitivity[1] < 0.5 * sensitivity[0], sensitivity  # the penalised model looks less at those pixels


def test_without_a_validation_loop_the_cost_is_said_to_be_unmeasured_once(tmp_path, caplog):
    correction = ShortcutCorrection(TAG, discovery=False)
    trainer = tiny_trainer(tmp_path, limit_val_batches=0, callbacks=[correction])
    with caplog.at_level(logging.INFO):
        trainer.fit(tiny_module(), datamodule=tiny_data())
    said = [r.getMessage() for r in caplog.records if "is not measured" in r.getMessage()]
    assert said == [
        "ShortcutCorrection: no validation image was classified at epoch 0: what the correction costs in accuracy is "
        "not measured (it needs the fit's validation loop, with labels)"
    ]


def test_a_loss_correction_refuses_a_precision_it_cannot_scale(tmp_path):
    correction = ShortcutCorrection(TAG, discovery=False, unlearn="loss")
    trainer = tiny_trainer(tmp_path, precision="bf16-mixed", callbacks=[correction])
    with pytest.raises(ValueError, match=r"one process at 32-bit precision only; .* precision 'bf16-mixed'"):
        trainer.fit(tiny_module(), datamodule=tiny_data())


# ------------------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(p=0.0), ValueError, r"p must be a probability in \(0, 1\], got 0.0"),
        (dict(p=1.5), ValueError, "p must be a probability"),
        (dict(classes=[]), ValueError, "classes must be None or class indices"),
        (dict(classes=[1, 1]), ValueError, "classes names a class twice"),
        (dict(classes=[-1]), ValueError, "classes must be None or class indices >= 0"),
        (dict(flagged_epochs=0), ValueError, "flagged_epochs must be a positive integer, got 0"),
        (dict(seed=-1), ValueError, "seed must be an integer >= 0"),
        (dict(margin=-1), ValueError, "margin must be a number of patches >= 0, got -1"),
        (dict(normalisation={"mean": (0.5,)}), ValueError, "normalisation takes the keys mean and std"),
        (dict(normalisation=(0.5, 0.5)), TypeError, r"normalisation must be a Normalisation\(mean=..., std=...\)"),
        (dict(discovery=False), ValueError, "nothing to correct: give a tag, or follow a discovery stage"),
        (dict(discovery=""), TypeError, "discovery must be True, False or a GradSkipCallback's log_prefix"),
        (dict(tag="corner"), TypeError, "tag must be a SpuriousTag or None, got str"),
        (dict(log_prefix="../up/"), ValueError, "log_prefix '../up/' would put"),
        (dict(image_key=""), ValueError, "image_key must be a non-empty string"),
        (dict(label_key=""), ValueError, "label_key must be a non-empty string"),
        (dict(erase=1), TypeError, "erase must be True or False, got 1"),
        (dict(properties=["sparkle"]), ValueError, r"properties must be one of \('colour'"),
        (dict(properties="colour"), TypeError, "properties must be None or a list of names"),
        (dict(normalisation={"mean": (0.5,), "std": (0.0,)}), ValueError, "std must be positive"),
        (dict(accuracy_tolerance=1.0), ValueError, r"accuracy_tolerance must be a share .* in \[0, 1\), got 1"),
        (dict(accuracy_tolerance="0.01"), TypeError, "accuracy_tolerance must be a share of accuracy"),
        (dict(unlearn="gradient"), ValueError, r"unlearn must be one of \('data', 'loss'\)"),
        (dict(penalty=0), ValueError, "penalty must be a weight > 0, got 0"),
        (dict(on_accuracy_drop="halve"), ValueError, r"on_accuracy_drop must be one of \('warn', 'weaken', 'stop'\)"),
    ],
)
@pytest.mark.parametrize("build", [ShortcutCorrection, CorrectionSettings])
def test_settings_are_validated_when_built_naming_the_option(kwargs, error, match, build):
    with pytest.raises(error, match=match):
        build(**kwargs)


def test_the_callback_keeps_its_options_as_one_settings_group():
    given = {"mean": [0.5], "std": [0.25]}  # as a YAML config gives it
    correction = ShortcutCorrection(p=0.25, classes=[2, 0], properties=["noise"], normalisation=given)
    assert correction.settings == CorrectionSettings(
        p=0.25, classes=(2, 0), properties=("noise",), normalisation=Normalisation((0.5,), (0.25,))
    )
    assert correction.settings.corrected_properties == ("noise",)
    assert ShortcutCorrection().settings == CorrectionSettings()
    assert CorrectionSettings().corrected_properties == tuple(PROPERTIES)  # None: every property


def test_lightning_cli_yaml_configures_the_correction_and_refuses_as_python_does(tmp_path):
    correction = callback_from_yaml(
        tmp_path,
        ShortcutCorrection,
        "{p: 0.25, erase: false, classes: [1], properties: [colour], tag: {target_class: 2, position: [4, 4]}}",
    )
    expected = CorrectionSettings(
        tag=SpuriousTag(target_class=2, position=(4, 4)), p=0.25, erase=False, classes=(1,), properties=("colour",)
    )
    assert correction.settings == expected
    with pytest.raises(ValueError, match=r"p must be a probability in \(0, 1\], got 1.5"):
        callback_from_yaml(tmp_path, ShortcutCorrection, "{p: 1.5}")


@pytest.mark.parametrize(
    "callbacks, match",
    [
        ([], r"nothing to correct: give a tag, or add GradSkipCallback\(discovery=DiscoveryStage\(\)\)"),
        ([GradSkipCallback()], "nothing to correct"),
        ([_gradskip(), GradSkipCallback(log_prefix="lrp/", discovery=DiscoveryStage())],
         r"there are 2 \(log_prefix \['gradskip/', 'lrp/'\]\): name one, "
         r"ShortcutCorrection\(discovery='<log_prefix>'\)"),
    ],
)  # fmt: skip
def test_the_discovery_to_follow_must_be_one_the_trainer_has(tmp_path, callbacks, match):
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[*callbacks, ShortcutCorrection()], max_epochs=1)
    with pytest.raises(ValueError, match=match):
        trainer.fit(tiny_module(), datamodule=tiny_data())


@pytest.mark.parametrize(
    "callbacks, match",
    [
        (lambda: [ShortcutCorrection(SpuriousTag(target_class=7), discovery=False)],
         r"^ShortcutCorrection's tag goes with class 7, but the model has 4 classes \(0 to 3\): give the tag's class, "
         r"SpuriousTag\(target_class=<0 to 3>\)$"),
        (lambda: [_gradskip(), ShortcutCorrection(classes=[1, 9])],
         r"^ShortcutCorrection\(classes=\[1, 9\]\) names classes the model does not have \(\[9\]; it has 4, 0 to 3\): "
         r"give classes in that range, or classes=None for any flagged class$"),
        (lambda: [ShortcutCorrection(SpuriousTag(target_class=1, position=(30, 28)), discovery=False)],
         r"^ShortcutCorrection's tag: the tag \(pattern 3 x 3 px at \(30, 28\)\) does not fit in 32 x 32 px images: "
         r"move its position or use a smaller pattern$"),
    ],
    ids=["tag_class", "classes", "tag_outside_the_images"],
)  # fmt: skip
def test_a_tag_or_class_the_model_does_not_have_is_refused_before_the_first_step(tmp_path, callbacks, match):
    module = recorder()
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=callbacks(), max_epochs=1, num_sanity_val_steps=0)
    with pytest.raises(ValueError, match=match):
        trainer.fit(module, datamodule=tiny_data())
    assert module.seen == []  # no training step


def test_a_tag_without_the_images_normalisation_is_refused_naming_the_fix(tmp_path):
    data = tiny_data()
    data.setup("fit")
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[ShortcutCorrection(TAG, discovery=False)])
    with pytest.raises(ValueError, match=r"needs the images' normalisation: give normalisation=Normalisation\("):
        trainer.fit(tiny_module(), train_dataloaders=data.train_dataloader())


def test_a_named_discovery_must_be_on(tmp_path):
    callbacks = [GradSkipCallback(), ShortcutCorrection(discovery="gradskip/")]
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=callbacks)
    with pytest.raises(ValueError, match=r"\[\('gradskip/', False\)\] \(log_prefix, discovery on\)"):
        trainer.fit(tiny_module(), datamodule=tiny_data())
