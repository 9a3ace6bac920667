"""The artifacts of a correction: a paste puts the donor's pixels exactly in its box (its mask) on the share of a
batch the seeded generator picks; a tag's pattern is normalised as the images are; a global property's artifact
gives each image the statistic of the donor the generator picks; state round trips."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.shortcuts.artifacts import (
    ARTIFACT_KINDS,
    Artifact,
    PatchPaste,
    PropertyPaste,
    erase_from_class,
    paste_share,
    restore_artifact,
)
from gradskip_lightning.shortcuts.correction_transfers import (
    CORRECTION_TRANSFERS,
    channel_medians,
    correction_property,
    median_offset,
)
from gradskip_lightning.shortcuts.image_properties import PROPERTIES, PROPERTY_NAMES, PixelSpace
from gradskip_lightning.shortcuts.tags import SpuriousTag


def _hotspot_paste() -> tuple[PatchPaste, torch.Tensor]:
    """Class 2's hotspot: patches (1, 1) and (1, 2) of a 4 x 4 grid of 2 px patches; donors 3 images of 8 x 8 px."""
    hotspot = torch.zeros(4, 4, dtype=torch.bool)
    hotspot[1, 1:3] = True
    donors = torch.arange(3 * 2 * 8 * 8, dtype=torch.float32).reshape(3, 2, 8, 8)
    return PatchPaste.from_hotspot(2, hotspot, (2, 2), donors), donors


def test_a_hotspot_paste_is_its_box_in_pixels_with_the_donors_pixels_there():
    paste, donors = _hotspot_paste()
    assert paste.box == (2, 2, 4, 6) and paste.mask.all() and paste.describe() == "shortcut at (2, 2)-(4, 6)"
    assert torch.equal(paste.donors, donors[:, :, 2:4, 2:6])
    assert paste.scalars() == {"box/top": 2.0, "box/left": 2.0, "box/bottom": 4.0, "box/right": 6.0}
    assert isinstance(paste, Artifact) and set(ARTIFACT_KINDS) == {"patch", "property"}


def test_a_paste_on_a_share_of_a_batch_puts_a_donors_pixels_exactly_in_the_box_and_nowhere_else():
    paste, donors = _hotspot_paste()
    images = -torch.ones(1000, 2, 8, 8)
    before = images.clone()
    chosen = paste_share(images, paste, 0.3, torch.Generator().manual_seed(7))
    assert chosen.dtype == torch.bool and chosen.shape == (1000,)
    assert 0.25 < chosen.float().mean() < 0.35  # Bernoulli(0.3) over 1000 images
    inside = torch.zeros(8, 8, dtype=torch.bool)
    inside[2:4, 2:6] = True
    assert torch.equal(images[~chosen], before[~chosen])  # the others untouched
    assert torch.equal(images[chosen][:, :, ~inside], before[chosen][:, :, ~inside])  # outside the box untouched
    boxes = images[chosen][:, :, 2:4, 2:6]
    matches = (boxes[:, None] == donors[None, :, :, 2:4, 2:6]).flatten(2).all(2)  # (pasted, donors)
    assert matches.sum(dim=1).eq(1).all()  # each pasted box is exactly one donor's pixels
    assert matches.any(dim=0).all()  # and every donor is drawn


def test_the_known_answer_of_a_seeded_paste():
    """Generator seed 4: torch.rand(4) = [0.560, 0.559, 0.091, 0.210] -> images 2 and 3 (p = 0.5); then
    torch.randint(2, (2,)) = [1, 0]: donors 1 and 0."""
    mask = torch.tensor([[True, False]])
    paste = PatchPaste(0, 1, 0, mask, torch.tensor([10.0, 20.0]).reshape(2, 1, 1, 1).expand(2, 1, 1, 2))
    images = torch.zeros(4, 1, 2, 2)
    chosen = paste_share(images, paste, 0.5, torch.Generator().manual_seed(4))
    assert chosen.tolist() == [False, False, True, True]
    assert images[:, 0, 1, 0].tolist() == [0.0, 0.0, 20.0, 10.0]  # only the mask's pixel, from each one's donor
    assert images[:, 0, 0].abs().sum() == 0 and images[:, 0, 1, 1].abs().sum() == 0


def test_p_one_pastes_on_every_image_and_the_same_seed_draws_the_same():
    paste, _ = _hotspot_paste()
    runs = []
    for _ in range(2):
        images = torch.zeros(16, 2, 8, 8)
        assert paste_share(images, paste, 1.0, torch.Generator().manual_seed(3)).all()
        runs.append(images)
    assert torch.equal(*runs)


def test_a_non_rectangular_hotspot_pastes_its_patches_only():
    hotspot = torch.zeros(4, 4, dtype=torch.bool)
    hotspot[0, 0] = hotspot[1, 1] = True  # a diagonal: box (0, 0)-(4, 4) of 2 px patches, half of it pasted
    paste = PatchPaste.from_hotspot(1, hotspot, (2, 2), torch.ones(2, 3, 8, 8))
    images = torch.zeros(1, 3, 8, 8)
    out = paste.apply(images, torch.Generator().manual_seed(0))
    assert paste.box == (0, 0, 4, 4) and int(paste.mask.sum()) == 8
    assert out[0, :, :2, :2].eq(1).all() and out[0, :, 2:4, 2:4].eq(1).all() and out[0, :, :2, 2:4].eq(0).all()
    assert images.abs().sum() == 0  # apply returns a new tensor


def test_a_margin_grows_the_hotspot_by_whole_patches_clipped_to_the_image():
    hotspot = torch.zeros(4, 4, dtype=torch.bool)
    hotspot[0, 1] = True  # one 2 px patch at the top edge
    images = torch.arange(2 * 8 * 8, dtype=torch.float32).reshape(1, 2, 8, 8)
    paste = PatchPaste.from_hotspot(1, hotspot, (2, 2), images, margin=1)
    assert paste.box == (0, 0, 4, 6) and paste.mask.all()  # rows 0-1 and columns 0-2 of patches
    assert torch.equal(paste.donors, images[:, :, 0:4, 0:6])
    hotspot[0, 1], hotspot[3, 3] = False, True  # a corner patch and a diagonal neighbour: an L-shaped growth
    grown = PatchPaste.from_hotspot(1, hotspot, (2, 2), images, margin=1)
    assert grown.box == (4, 4, 8, 8) and grown.mask.all()
    with pytest.raises(ValueError, match="margin must be a number of patches >= 0, got -1"):
        PatchPaste.from_hotspot(1, hotspot, (2, 2), images, margin=-1)


def test_a_tag_paste_is_its_pattern_normalised_as_the_images_are():
    tag = SpuriousTag(target_class=3, pattern=((1.0, 0.0), (0.0, 1.0)), position=(1, 2))
    paste = PatchPaste.from_tag(tag, Normalisation(mean=(0.5, 0.25), std=(0.5, 0.25)))
    assert paste.box == (1, 2, 3, 4) and paste.target == 3 and paste.donors.shape == (1, 2, 2, 2)
    assert paste.donors[0, 0].tolist() == [[1.0, -1.0], [-1.0, 1.0]]
    assert paste.donors[0, 1].tolist() == [[3.0, -1.0], [-1.0, 3.0]]
    one_channel = PatchPaste.from_tag(tag, Normalisation(mean=(0.5,), std=(0.5,)))
    out = one_channel.apply(torch.zeros(1, 3, 4, 4), torch.Generator())
    assert out[0, :, 1:3, 2:4].tolist() == [[[1.0, -1.0], [-1.0, 1.0]]] * 3  # one channel on every channel


def test_state_round_trips_through_a_weights_only_checkpoint(tmp_path):
    paste, _ = _hotspot_paste()
    torch.save({"artifact": paste.state_dict()}, tmp_path / "state.pt")
    back = restore_artifact(torch.load(tmp_path / "state.pt", weights_only=True)["artifact"])
    assert isinstance(back, PatchPaste) and back.box == paste.box and back.target == 2
    assert torch.equal(back.mask, paste.mask) and torch.equal(back.donors, paste.donors)


@pytest.mark.parametrize(
    "build, error, match",
    [
        (lambda: PatchPaste(-1, 0, 0, torch.ones(1, 1, dtype=torch.bool), torch.ones(1, 1, 1, 1)), ValueError,
         "target must be a class index"),
        (lambda: PatchPaste(0, 0, 0, torch.ones(1, 2, dtype=torch.bool), torch.ones(1, 1, 1, 1)), ValueError,
         r"donors must be \(n >= 1, C, bh, bw\)"),
        (lambda: PatchPaste(0, 0, 0, torch.zeros(1, 1, dtype=torch.bool), torch.ones(1, 1, 1, 1)), ValueError,
         "selects no pixel"),
        (lambda: PatchPaste(0, 0, 0, torch.ones(1, 1), torch.ones(1, 1, 1, 1)), TypeError, "bool tensor"),
        (lambda: PatchPaste.from_hotspot(0, torch.zeros(2, 2, dtype=torch.bool), (2, 2), torch.ones(1, 1, 4, 4)),
         ValueError, "hotspot is empty"),
        (lambda: restore_artifact({"kind": "colour"}), ValueError, "unknown artifact kind 'colour'"),
    ],
)  # fmt: skip
def test_bad_artifacts_are_refused_naming_the_problem(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_an_artifact_that_does_not_fit_the_images_is_refused_naming_the_box():
    paste, _ = _hotspot_paste()
    with pytest.raises(ValueError, match=r"box \(rows 2-4, columns 2-6\) does not fit the training images of 4 x 4 px"):
        paste.apply(torch.zeros(1, 2, 4, 4), torch.Generator())
    with pytest.raises(ValueError, match=r"the training images must be \(B, C, H, W\); got shape \(2, 8, 8\)"):
        paste.apply(torch.zeros(2, 8, 8), torch.Generator())
    with pytest.raises(ValueError, match="the artifact has 2 channels, the training images 3"):
        paste.apply(torch.zeros(1, 3, 8, 8), torch.Generator())


# ------------------------------------------------------------------------------------- a global property

MEAN, STD = (0.5, 0.4, 0.3), (0.25, 0.2, 0.3)


def _property_images(channels: int) -> tuple[torch.Tensor, torch.Tensor, PixelSpace]:
    """3 donors (smooth, a reddish cast, darker, little noise) and 8 recipients (smooth, noisier), 16 x 16 px in
    [0.2, 0.8] (no transfer below is clamped), normalised with :data:`MEAN` and :data:`STD`; the donors' space."""
    generator = torch.Generator().manual_seed(0)

    def draw(count: int, noise: float) -> torch.Tensor:
        smooth = F.avg_pool2d(torch.rand(count, channels, 20, 20, generator=generator), 5, stride=1)
        return 0.35 + 0.3 * smooth + noise * torch.randn(count, channels, 16, 16, generator=generator)

    cast = torch.tensor([0.06, 0.0, -0.06][:channels] if channels == 3 else [0.0])[:, None, None]
    mean, std = torch.tensor(MEAN[:channels])[:, None, None], torch.tensor(STD[:channels])[:, None, None]
    donors, recipients = (draw(3, 0.02) + cast - 0.05 - mean) / std, (draw(8, 0.05) - mean) / std
    return donors, recipients, PixelSpace.of(donors, Normalisation(MEAN[:channels], STD[:channels]))


def reaches(name: str, given: torch.Tensor, wanted: torch.Tensor, within: float) -> torch.Tensor:
    """(B,) bool: which images (pixels (B, C, H, W)) reached ``wanted`` (B, S) of ``name``'s correction statistic:
    exactly for a property the correction gives as the stage does; for colour and the signature, by either of its
    two transfers (the stage's parts, or the channels' medians: colour's up to the same shift on every channel).
    Blockiness, on a grid of JPEG qualities and only upwards, is reached when at least ``wanted`` less 0.03; a line
    profile (``fixed_pattern``'s) is compared number by number; the channels' displacements and magnifications and
    the fields' displacements, meaningless on these images' independent channels and pixels (no shared edge), are not
    compared (``tests/shortcuts/test_image_properties.py`` tests them on images whose channels and rows share their
    structure)."""
    statistic = correction_property(name).statistic(given)
    names = correction_property(name).statistics
    blocky = torch.tensor(["blockiness" == s for s in names] + [False] * (statistic.shape[1] - len(names)))
    upwards = (statistic[:, blocky] >= wanted[:, blocky] - 0.03).all(dim=1)
    geometry = (*PROPERTIES["registration"].statistics, *PROPERTIES["interlacing"].statistics)
    shifts = torch.tensor([s in geometry for s in names] + [False] * (statistic.shape[1] - len(names)))
    statistic, wanted = statistic[:, ~blocky & ~shifts], wanted[:, ~blocky & ~shifts]
    if name not in CORRECTION_TRANSFERS:
        return upwards & ((statistic - wanted).abs() <= within).all(dim=1)
    stage = PROPERTIES[name].statistic(given)[:, ~(blocky | shifts)[: len(PROPERTIES[name].statistics)]]
    parts = stage.shape[1]
    by_stage = (stage - wanted[:, :parts]).abs().amax(dim=1) <= within
    medians = statistic[:, parts:] - wanted[:, parts:]
    if name == "colour":  # the additive half keeps the luminance: the medians move by the same amount
        medians = medians - medians.mean(dim=1, keepdim=True)
    else:  # the signature's: its noise and sharpness as the stage's, then the medians themselves
        medians = torch.cat([medians, stage[:, 3:] - wanted[:, 3:parts]], dim=1)
    return upwards & (by_stage | (medians.abs().amax(dim=1) <= within))


@pytest.mark.parametrize("channels", [3, 1])
def test_an_image_given_a_property_has_the_drawn_donors_statistic_to_rounding(channels):
    donors, recipients, space = _property_images(channels)
    names = [name for name in PROPERTY_NAMES if PROPERTIES[name].applies(channels)]
    assert names == (
        list(PROPERTY_NAMES)
        if channels == 3
        else [
            "brightness",
            "sharpness",
            "noise",
            "compression",
            "stripes",
            "interlacing",
            "fixed_pattern",
            "illumination",
        ]
    )
    for name in (name for name in names if name not in ("registration", "interlacing")):  # see reaches()
        statistic = correction_property(name).statistic
        paste = PropertyPaste.from_probes(2, name, donors, space)
        assert torch.equal(paste.statistics, statistic(space.pixels(donors)))  # the donors' statistic
        given = paste.apply(recipients, torch.Generator().manual_seed(5))
        drawn = torch.randint(3, (8,), generator=torch.Generator().manual_seed(5))  # the generator's donors
        assert given.dtype == recipients.dtype and drawn.unique().numel() > 1
        wanted, before = paste.statistics[drawn], statistic(space.pixels(recipients))
        assert (before - wanted).abs().amax() > 3e-3  # the recipients' own statistics are far from it
        # the signature's parts move each other a little (doctest); a chroma rotated out of the RGB gamut is clamped
        within = 0.02 if name in ("signature", "hue") else 1e-6
        assert reaches(name, space.pixels(given), wanted, within).all(), name


def test_colour_and_the_signature_are_given_by_the_stages_transfer_or_an_additive_one_half_and_half():
    donors, recipients, space = _property_images(3)
    recipients = recipients.repeat(8, 1, 1, 1)  # 64 images
    for name in CORRECTION_TRANSFERS:
        paste = PropertyPaste.from_probes(2, name, donors, space)
        given = space.pixels(paste.apply(recipients, torch.Generator().manual_seed(5)))
        drawn = paste.statistics[torch.randint(3, (64,), generator=torch.Generator().manual_seed(5))]
        parts = len(PROPERTIES[name].statistics)
        within = 0.02 if name == "signature" else 1e-6
        exact = slice(0, 2) if name == "colour" else slice(2, 3)  # α and β; the signature's brightness, given last
        by_stage = (PROPERTIES[name].statistic(given) - drawn[:, :parts])[:, exact].abs().amax(dim=1) <= 1e-6
        assert 16 <= int(by_stage.sum()) <= 48, name  # about half by the stage's transfer
        assert reaches(name, given, drawn, within).all(), name  # the others by the additive one
    cast = space.pixels(recipients[:1]) + torch.tensor([0.06, 0.0, -0.06], dtype=torch.float64)[:, None, None]
    additive = median_offset(space.pixels(recipients[:1]), channel_medians(cast), keep_luminance=False)
    torch.testing.assert_close(additive, cast)  # an additive cast, reproduced on every pixel


def test_colour_does_not_apply_to_greyscale_images_and_an_artifact_fits_its_channels_only():
    donors, recipients, space = _property_images(1)
    with pytest.raises(ValueError, match="colour needs 3-channel images; the images have 1"):
        PropertyPaste.from_probes(0, "colour", donors, space)
    brightness = PropertyPaste.from_probes(0, "brightness", donors, space)
    with pytest.raises(ValueError, match=r"the brightness artifact is for images of 1 channels .* \(2, 3, 16, 16\)"):
        brightness.apply(torch.zeros(2, 3, 16, 16), torch.Generator())
    with pytest.raises(ValueError, match=r"name must be one of \('colour'"):
        PropertyPaste(0, "sparkle", brightness.statistics, space)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"statistics must be \(n >= 1, 1\)"):
        PropertyPaste(0, "brightness", torch.zeros(2, 2, dtype=torch.float64), space)
    with pytest.raises(ValueError, match="colour needs 3-channel images; the images have 1"):
        PropertyPaste(0, "colour", torch.zeros(2, 5, dtype=torch.float64), space)  # restored into a greyscale space
    sensor = PropertyPaste.from_probes(0, "fixed_pattern", donors, space)  # one number per row and column: 32
    with pytest.raises(ValueError, match=r"fixed_pattern's targets are one number per row and per column, \(B, 16\) "
                                         r"for 8 x 8 images; got \(2, 32\)"):  # fmt: skip
        sensor.apply(torch.zeros(2, 1, 8, 8), torch.Generator())
    with pytest.raises(ValueError, match=r"statistics must be \(n >= 1, 0 \+ H \+ W\): the \(\) and a line profile"):
        PropertyPaste(0, "fixed_pattern", torch.zeros(2, 0, dtype=torch.float64), space)


def test_a_property_artifact_draws_from_its_generator_only():
    donors, recipients, space = _property_images(3)
    noise = PropertyPaste.from_probes(1, "noise", donors, space)  # draws donors and the added noise
    rng = torch.get_rng_state()
    first, again = (noise.apply(recipients, torch.Generator().manual_seed(9)) for _ in range(2))
    other = noise.apply(recipients, torch.Generator().manual_seed(10))
    assert torch.equal(torch.get_rng_state(), rng)  # the global RNG was not drawn from
    assert torch.equal(first, again) and not torch.equal(first, other)
    chosen = paste_share(recipients.clone(), noise, 1.0, torch.Generator().manual_seed(9))
    assert chosen.all()


def test_a_property_artifact_says_what_it_gives_and_logs_its_donors_mean_statistic():
    donors, _, space = _property_images(3)
    colour = PropertyPaste.from_probes(2, "colour", donors, space)
    assert isinstance(colour, Artifact) and colour.kind == "property" and colour.key_prefix == "colour/"
    assert colour.describe() == "colour shortcut"
    assert colour.action("50 % of every class's training images") == (
        "giving 50 % of every class's training images its colour statistics"
    )
    means = colour.statistics.mean(dim=0)
    names = ("alpha", "beta", "red", "green", "blue")
    assert colour.scalars() == {name: means[i].item() for i, name in enumerate(names)}
    assert means[0] > 0.04 and means[1] > 0.005  # the cast's chromaticity: yellow-blue and red-green, 0 for grey
    sensor = PropertyPaste.from_probes(2, "fixed_pattern", donors, space)
    profile = sensor.statistics.mean(dim=0)  # (32,): the donors' mean line profile
    assert sensor.scalars() == {"deviation": pytest.approx(profile.square().mean().sqrt().item())}
    assert 0.005 < sensor.scalars()["deviation"] < 0.1  # smooth textures' lines: a few % apart


def test_a_property_artifact_round_trips_through_a_weights_only_checkpoint(tmp_path):
    donors, recipients, space = _property_images(3)
    noise = PropertyPaste.from_probes(1, "noise", donors, space)
    torch.save({"artifact": noise.state_dict()}, tmp_path / "state.pt")
    back = restore_artifact(torch.load(tmp_path / "state.pt", weights_only=True)["artifact"])
    assert isinstance(back, PropertyPaste) and (back.target, back.name) == (1, "noise")
    assert torch.equal(back.statistics, noise.statistics) and torch.equal(back.space.high, noise.space.high)
    seeded = [artifact.apply(recipients, torch.Generator().manual_seed(3)) for artifact in (noise, back)]
    assert torch.equal(*seeded)


def test_erasing_a_patch_gives_each_class_image_the_masked_pixels_of_one_other_image_and_nothing_else():
    mask = torch.tensor([[True, False], [True, True]])
    paste = PatchPaste(0, 1, 1, mask, torch.full((1, 1, 2, 2), 9.0))
    originals = torch.stack([torch.full((2, 4, 4), float(v)) for v in (9, 1, 9, 2)])  # class 0: images 0 and 2
    images = originals.clone()
    members = torch.tensor([True, False, True, False])
    assert erase_from_class(images, originals, members, paste, torch.Generator().manual_seed(0)) == 2
    assert torch.equal(images[~members], originals[~members])  # the other classes' images untouched
    box = images[members][:, :, 1:3, 1:3]
    assert set(box[:, :, mask].flatten(1).unique(dim=1).flatten().tolist()) <= {1.0, 2.0}  # an other's pixels
    assert (box[:, :, ~mask] == 9).all() and (images[members][:, :, 0] == 9).all()  # outside the mask: theirs
    drawn = [box[i, 0, 0, 0].item() for i in range(2)]
    assert all(torch.equal(box[i][:, mask], torch.full((2, 3), drawn[i])) for i in range(2))  # one image each


def test_erasing_from_a_batch_of_one_class_changes_nothing():
    paste = PatchPaste(0, 0, 0, torch.ones(1, 1, dtype=torch.bool), torch.ones(1, 1, 1, 1))
    images = torch.rand(3, 1, 2, 2)
    before = images.clone()
    for members in (torch.ones(3, dtype=torch.bool), torch.zeros(3, dtype=torch.bool)):
        assert erase_from_class(images, before, members, paste, torch.Generator()) == 0
        assert torch.equal(images, before)


@pytest.mark.parametrize("name", ["colour", "brightness"])
def test_erasing_a_property_gives_each_class_image_one_other_images_statistic(name):
    torch.manual_seed(0)
    images = torch.rand(6, 3, 8, 8)
    space = PixelSpace.of(images, Normalisation((0.5,) * 3, (0.25,) * 3))
    others = images[3:]
    paste = PropertyPaste.from_probes(0, name, images[:3], space)
    erased = paste.erase(images[:3], others, torch.Generator().manual_seed(1))
    wanted = correction_property(name).statistic(space.pixels(others))  # (3, S)
    reached = torch.stack([reaches(name, space.pixels(erased), row.expand(3, -1), 1e-4) for row in wanted])
    assert reached.any(dim=0).all(), reached  # each now has one of the others' statistic
    assert not torch.equal(erased, images[:3])
