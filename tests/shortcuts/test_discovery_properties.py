"""Known answers of the global property transplants: a model that reads a colour cast is flagged for colour on
that class only, its controls stay low, a model that reads the object is not flagged, and the bookkeeping
(recipients, forwards, NaN, two classes, multi-label, bad input) is what the module docstring says."""

from __future__ import annotations

import math

import pytest
import scipy.stats
import torch
from torch import Tensor

from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.engine.discovery.properties import property_alert_text
from gradskip_lightning.metrics import CountingModel
from gradskip_lightning.shortcuts.discovery_properties import (
    FUTILITY_CONFIDENCE,
    PropertyTransfer,
    discover_properties,
    flip_rate_upper_bound,
    property_suspicion,
)
from gradskip_lightning.shortcuts.discovery_transplant import MIN_TESTED_PROBES
from gradskip_lightning.shortcuts.image_properties import (
    PROPERTY_NAMES,
    PixelSpace,
    hue_statistic,
    hue_transfer,
    illumination_statistic,
    mosaic_statistic,
    noise_statistic,
)

#: The probes' normalisation: pixels = inputs * STD + MEAN.
MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
SIDE = 16


class CastModel:
    """Class 2 iff the mean red exceeds the mean blue by 0.1 (pixels); otherwise class 0 if the left half is
    brighter than the right, else class 1. Inputs are normalised with MEAN and STD."""

    def __call__(self, images: Tensor) -> Tensor:
        pixels = images * STD[0] + MEAN[0]
        red = (pixels[:, 0] - pixels[:, 2]).mean(dim=(1, 2)) > 0.1
        left = pixels[:, :, :, : SIDE // 2].mean(dim=(1, 2, 3)) > pixels[:, :, :, SIDE // 2 :].mean(dim=(1, 2, 3))
        scores = torch.stack([~red & left, ~red & ~left, red], dim=1)
        return torch.where(scores, 5.0, -5.0).to(images.dtype)


class ObjectModel(CastModel):
    """The left/right rule alone (class 2: the image's top half brighter than its bottom): no global property."""

    def __call__(self, images: Tensor) -> Tensor:
        pixels = images * STD[0] + MEAN[0]
        half = SIDE // 2
        top = pixels[:, :, :half].mean(dim=(1, 2, 3)) - pixels[:, :, half:].mean(dim=(1, 2, 3)) > 0.1
        left = pixels[:, :, :, :half].mean(dim=(1, 2, 3)) > pixels[:, :, :, half:].mean(dim=(1, 2, 3))
        scores = torch.stack([~top & left, ~top & ~left, top], dim=1)
        return torch.where(scores, 5.0, -5.0).to(images.dtype)


def cast_case(per_class: int = 8, cast: bool = True) -> tuple[Tensor, Tensor]:
    """Probes (3n, 3, 16, 16) normalised with MEAN/STD and classes: class 0 brighter on the left, class 1 on the
    right, class 2 brighter on top and (``cast``) reddish; textured grey otherwise."""
    generator = torch.Generator().manual_seed(0)
    classes = torch.arange(3).repeat_interleave(per_class)
    pixels = 0.35 + 0.2 * torch.rand(len(classes), 1, SIDE, SIDE, generator=generator)
    pixels = pixels.expand(-1, 3, -1, -1).clone() + 0.03 * torch.rand(len(classes), 3, 1, 1, generator=generator)
    half = SIDE // 2
    pixels[classes == 0, :, :, :half] += 0.15
    pixels[classes == 1, :, :, half:] += 0.15
    pixels[classes == 2, :, :half] += 0.2
    pixels[classes == 2, :, :, :half] += 0.04 * torch.rand(per_class, 1, 1, 1, generator=generator)
    if cast:
        pixels[classes == 2, 0] += 0.12
        pixels[classes == 2, 2] -= 0.12
    return (pixels - MEAN[0]) / STD[0], classes


def _space(images: Tensor) -> PixelSpace:
    return PixelSpace.of(images, Normalisation(MEAN, STD))


def test_a_model_reading_a_colour_cast_is_flagged_for_colour_on_that_class_only():
    images, classes = cast_case()
    model = CastModel()
    assert (model(images).argmax(dim=1) == classes).all()
    # every recipient: every test runs, the single properties of classes whose signature shows nothing too
    found = discover_properties(model, images, classes, 3, space=_space(images), alert_threshold=0.5,
                                first_look=None)  # fmt: skip
    colour = found.transfers["colour"][2]
    assert colour.recipients == 16 and colour.flip_rate == 1.0 and colour.control_flip_rate == 0.0
    assert colour.separability == 1.0  # the cast alone separates class 2
    assert found.flagged["colour"].tolist() == [False, False, True]
    for name in ("brightness", "sharpness", "noise"):  # they leave red minus blue alone
        assert found.transfers[name][2].flip_rate == 0.0 and not found.flagged[name].any(), name
    # class 2's recipients given class 0's colour lose the cast and, brighter on the left, flip to 0; given class
    # 1's (the control), too: the test and the control agree
    assert found.transfers["colour"][0].flip_rate == found.transfers["colour"][0].control_flip_rate == 0.5


def test_a_test_whose_first_recipients_show_no_excess_stops_there_and_a_shortcut_is_measured_in_full():
    images, classes = cast_case(per_class=16)  # 32 recipients a class
    model = CountingModel(CastModel())
    found = discover_properties(model, images, classes, 3, ["colour", "brightness"], space=_space(images),
                                alert_threshold=0.5)  # fmt: skip
    measured = {name: [t.recipients for t in found.transfers[name]] for name in ("colour", "brightness")}
    assert measured["colour"][2] == 32 and found.transfers["colour"][2].flip_rate == 1.0  # the cast: in full
    assert found.flagged["colour"].tolist() == [False, False, True]
    assert measured["brightness"] == [6, 6, 6]  # none of the early look's recipients flipped (3 of each other class)
    # class 0's colour flips half its recipients to class 0, as its control does: stopped at the first look (16)
    assert measured["colour"][:2] == [16, 6] and found.transfers["colour"][0].control_flip_rate == 0.5
    assert all(t.p_value == 1.0 for t in found.transfers["brightness"])  # a stopped test claims nothing
    # its flips alone could not reach the floor: no control forwarded, its suspicion the most the excess can be
    assert all(
        math.isnan(t.control_flip_rate) and t.suspicion == t.flip_rate < 0.25 for t in found.transfers["brightness"]
    )
    arms = [
        1 if math.isnan(t.control_flip_rate) else 2 for name in ("colour", "brightness") for t in found.transfers[name]
    ]
    recipients = [t.recipients for name in ("colour", "brightness") for t in found.transfers[name]]
    # each distinct image once: a class's control arm can give a recipient the very probe another class's test gives
    assert model.images <= len(images) + sum(a * r for a, r in zip(arms, recipients, strict=True))
    assert arms.count(1) >= 3
    full = discover_properties(CastModel(), images, classes, 3, ["colour", "brightness"], space=_space(images),
                               alert_threshold=0.5, first_look=None)  # fmt: skip
    assert [t.recipients for t in full.transfers["brightness"]] == [32, 32, 32]
    assert full.flagged["colour"].tolist() == found.flagged["colour"].tolist()
    assert full.transfers["colour"][2] == found.transfers["colour"][2]  # measured in full either way
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="first_look"):
            discover_properties(model, images, classes, 3, space=_space(images), alert_threshold=0.5, first_look=bad)


class LeftCastModel(CastModel):
    """Class 2 iff reddish (as :class:`CastModel`) and brighter on the left: the cast flips class 0's probes (bright on
    the left) and not class 1's; otherwise the left/right rule."""

    def __call__(self, images: Tensor) -> Tensor:
        pixels = images * STD[0] + MEAN[0]
        left = pixels[:, :, :, : SIDE // 2].mean(dim=(1, 2, 3)) > pixels[:, :, :, SIDE // 2 :].mean(dim=(1, 2, 3))
        red = ((pixels[:, 0] - pixels[:, 2]).mean(dim=(1, 2)) > 0.1) & left
        return torch.where(torch.stack([~red & left, ~red & ~left, red], dim=1), 5.0, -5.0).to(images.dtype)


def test_the_single_properties_of_a_class_run_only_where_its_signature_reaches_the_floor():
    images, classes = cast_case(per_class=16)
    model = LeftCastModel()
    assert (model(images).argmax(dim=1) == classes).all()
    for floor, tested in ((0.5, True), (0.6, False)):  # the signature's suspicion: 0.5, half its recipients flip
        found = discover_properties(model, images, classes, 3, space=_space(images), alert_threshold=floor)
        signature = found.transfers["signature"][2]
        assert not signature.stopped and signature.suspicion == 0.5 and signature.recipients == 32
        colour = found.transfers["colour"][2]
        assert colour.skipped != tested and found.flagged["colour"].tolist() == [False, False, tested], floor
        assert tested == (colour.suspicion == 0.5)  # measured where it runs; NaN where skipped
        assert not found.transfers["compression"][2].skipped  # not in the signature: always tested


def test_a_class_whose_signature_shows_nothing_is_not_tested_one_property_at_a_time():
    images, classes = cast_case(per_class=16)  # 32 recipients a class: the first look (16) can stop a test
    model = CountingModel(CastModel())
    found = discover_properties(model, images, classes, 3, space=_space(images), alert_threshold=0.5)
    signature = found.transfers["signature"]
    assert [t.stopped for t in signature] == [True, True, False]  # the cast class's signature flips its recipients
    for name in ("colour", "brightness", "sharpness", "noise"):
        for label in (0, 1):  # skipped: nothing forwarded, nothing claimed
            skipped = found.transfers[name][label]
            assert skipped.skipped and skipped.recipients == 0 and math.isnan(skipped.flip_rate), (name, label)
            assert skipped.p_value == 1.0 and not math.isnan(skipped.separability)
        assert not found.transfers[name][2].skipped and found.transfers[name][2].recipients > 0
    assert not any(t.skipped for t in found.transfers["compression"])  # not in the signature: tested for every class
    assert found.flagged["colour"].tolist() == [False, False, True] == found.flagged["signature"].tolist()
    full = discover_properties(CastModel(), images, classes, 3, space=_space(images), alert_threshold=0.5,
                               first_look=None)  # fmt: skip
    assert not any(t.skipped for row in full.transfers.values() for t in row)  # every recipient: every test runs
    assert full.flagged["colour"].tolist() == found.flagged["colour"].tolist()


def test_a_model_reading_the_objects_is_not_flagged_but_objects_on_one_side_read_as_uneven_illumination():
    """The toy's objects are one half of the image brighter than the other, as a lamp off the axis makes it: the
    illumination's slopes carry them (a limit of that property: a class whose objects sit to one side)."""
    images, classes = cast_case()
    found = discover_properties(ObjectModel(), images, classes, 3, PROPERTY_NAMES, space=_space(images),
                                alert_threshold=0.3, first_look=None)  # fmt: skip
    assert found.transfers["colour"][2].separability == 1.0  # the data still has the cast ...
    for name in (name for name in PROPERTY_NAMES if name != "illumination"):  # ... but the model does not read it
        assert not found.flagged[name].any(), (name, found.suspicion[name])
        assert max(t.flip_rate for t in found.transfers[name]) < 0.2, name
    assert found.flagged["illumination"].all()
    assert [t.flip_rate for t in found.transfers["illumination"]] == [1.0, 1.0, 1.0]


def test_recipients_and_forwards_are_counted_and_examples_kept():
    images, classes = cast_case()
    model = CountingModel(CastModel())
    found = discover_properties(model, images, classes, 3, ["colour", "brightness"], space=_space(images),
                                alert_threshold=0.5, batch_size=10)  # fmt: skip
    recipients = sum(t.recipients for name in ("colour", "brightness") for t in found.transfers[name])
    assert recipients == 2 * 3 * 16  # no probe is predicted as another class
    # the probes once, then two arms per recipient, each distinct image once (with three classes, a class's control
    # donor for a recipient is often the probe the third class's test gives it)
    assert len(images) + recipients < model.images < len(images) + 2 * recipients
    assert model.calls <= math.ceil(24 / 10) + 2 * 3 * math.ceil(16 / 5)  # at most a forward of 5 recipients' arms
    examples = found.transfers["colour"][2].examples
    assert examples is not None and examples.positions.tolist() == [0, 8, 1, 9]  # the other classes in turn
    assert examples.before.tolist() == [0, 1, 0, 1] and examples.after.tolist() == [2] * 4
    assert examples.images.shape == (4, 3, SIDE, SIDE) and examples.images.dtype == images.dtype
    with pytest.raises(ValueError, match="logits"):
        discover_properties(model, images, classes, 3, space=_space(images), alert_threshold=0.5,
                            logits=torch.zeros(3, 3))  # fmt: skip


def test_known_logits_skip_the_unchanged_forward_and_the_result_is_reproducible():
    images, classes = cast_case()
    first = discover_properties(CastModel(), images, classes, 3, space=_space(images), alert_threshold=0.5, seed=1)
    model = CountingModel(CastModel())
    given = discover_properties(model, images, classes, 3, space=_space(images), alert_threshold=0.5, seed=1,
                                logits=CastModel()(images))  # fmt: skip
    tests = [t for row in given.transfers.values() for t in row]  # one arm a recipient where the look stopped early
    forwarded = sum((1 if math.isnan(t.control_flip_rate) else 2) * t.recipients for t in tests)
    assert first.transfers == given.transfers and model.images <= forwarded  # each distinct image once


def test_with_two_classes_the_control_takes_the_recipients_own_class():
    images, classes = cast_case()
    keep = classes != 1
    images, classes = images[keep], torch.where(classes[keep] == 2, 1, 0)

    def model(x: Tensor) -> Tensor:
        return CastModel()(x)[:, [0, 2]]

    found = discover_properties(model, images, classes, 2, ["colour"], space=_space(images), alert_threshold=0.5)
    cast = found.transfers["colour"][1]
    assert cast.flip_rate == 1.0 and cast.control_flip_rate == 0.0  # class 0's colour from another class-0 probe


def test_a_class_without_probes_or_recipients_has_nan_rates_and_is_not_flagged():
    images, classes = cast_case()
    found = discover_properties(CastModel(), images, classes, 4, ["colour"], space=_space(images), alert_threshold=0.0,
                                alpha=1.0)  # fmt: skip
    empty = found.transfers["colour"][3]
    assert empty.recipients == 0 and math.isnan(empty.flip_rate) and math.isnan(empty.separability)
    assert math.isnan(empty.p_value) and math.isnan(found.p_value["colour"][3])
    assert math.isnan(found.suspicion["colour"][3]) and not found.flagged["colour"][3]
    assert found.flagged["colour"][:3].all()  # a threshold of 0 and alpha 1 flag every class with a finite suspicion


def test_the_p_value_is_the_sign_test_of_the_flips_against_the_control_bonferroni_adjusted():
    images, classes = cast_case()
    found = discover_properties(CastModel(), images, classes, 3, ["colour", "brightness"], space=_space(images),
                                alert_threshold=0.5)  # fmt: skip
    cast = found.transfers["colour"][2]  # 16 recipients flip, none under the control: 16 wins, no loss
    assert cast.p_value == 2.0**-16
    assert found.p_value["colour"][2].item() == pytest.approx(6 * 2.0**-16)  # 2 properties x 3 classes
    # class 0's colour flips 8 of class 2's probes and so does the control, on the same 8: no discordant pair
    assert found.transfers["colour"][0].p_value == 1.0 and found.p_value["colour"][0].item() == 1.0
    assert found.flagged["colour"].tolist() == [False, False, True]


def test_a_large_excess_on_few_recipients_is_not_flagged():
    images, classes = cast_case(per_class=3)  # 6 recipients of class 2's colour: 2 ** -6 x 39 tests > 0.05
    found = discover_properties(CastModel(), images, classes, 3, space=_space(images), alert_threshold=0.5)
    cast = found.transfers["colour"][2]
    assert cast.recipients == 6 and cast.suspicion == 1.0 and cast.p_value == 2.0**-6
    tests = len(PROPERTY_NAMES) * 3  # colour and signature both 2 ** -6, the smallest: Holm gives both 39 x 2 ** -6
    assert found.p_value["colour"][2].item() == pytest.approx(tests * 2.0**-6) and not found.flagged["colour"].any()
    assert discover_properties(CastModel(), images, classes, 3, space=_space(images), alert_threshold=0.5,
                               alpha=0.95).flagged["colour"].tolist() == [False, False, True]  # fmt: skip


@pytest.mark.parametrize("per_class", [MIN_TESTED_PROBES - 1, MIN_TESTED_PROBES])
def test_a_class_of_fewer_than_the_tested_minimum_is_scored_and_never_flagged_as_in_the_hotspot_test(per_class):
    """The hotspot test's class-size rule (test_discovery), the same constant: fewer donors, no p-value."""
    images, classes = cast_case(per_class)
    found = discover_properties(CastModel(), images, classes, 3, ["colour"], space=_space(images), alert_threshold=0.0,
                                alpha=1.0)  # fmt: skip
    cast = found.transfers["colour"][2]
    assert cast.suspicion == 1.0  # scored
    assert math.isnan(cast.p_value) == (per_class < MIN_TESTED_PROBES)
    assert bool(found.flagged["colour"][2]) == (per_class >= MIN_TESTED_PROBES)


def test_multi_label_flips_are_a_sigmoid_above_one_half():
    images, classes = cast_case()

    def model(x: Tensor) -> Tensor:  # the cast switches label 2 on; labels 0 and 1 stay off
        logits = CastModel()(x)
        return torch.cat([logits[:, :2] * 0 - 5, logits[:, 2:]], dim=1)

    found = discover_properties(model, images, classes, 3, ["colour"], space=_space(images), alert_threshold=0.5,
                                activation="sigmoid")  # fmt: skip
    assert found.transfers["colour"][2].flip_rate == 1.0 and found.transfers["colour"][0].recipients == 16


@pytest.mark.parametrize(("flips", "count"), [(0, 6), (1, 6), (3, 16), (4, 16), (8, 16), (15, 16), (30, 56)])
def test_a_first_looks_bound_is_the_clopper_pearson_upper_bound(flips, count):
    expected = scipy.stats.beta.ppf(FUTILITY_CONFIDENCE, flips + 1, count - flips)  # the binomial's exact bound
    assert flip_rate_upper_bound(flips, count) == pytest.approx(expected, abs=1e-9)
    assert flip_rate_upper_bound(count, count) == 1.0


def test_the_suspicion_is_the_flip_rate_beyond_the_control():
    assert PropertyTransfer("colour", 0, 10, 0.9, 0.25, 1.0).suspicion == 0.65
    assert property_suspicion(0.3, 0.5) == 0.0 and property_suspicion(0.5, 0.0) == 0.5
    assert math.isnan(PropertyTransfer("colour", 0, 0, math.nan, math.nan, 1.0).suspicion)
    assert math.isnan(property_suspicion(0.5, math.nan))  # no third-class donor


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"properties": ["sparkle"]}, ValueError, "properties must be one of"),
        ({"properties": ["colour", "colour"]}, ValueError, "twice"),
        ({"alert_threshold": 1.5}, ValueError, "alert_threshold"),
        ({"alpha": 0.0}, ValueError, r"alpha must be in \(0, 1\]"),
        ({"activation": "relu"}, ValueError, "activation"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"classes": torch.zeros(3, dtype=torch.long)}, ValueError, "targets"),
        ({"num_classes": 2}, ValueError, r"\[0, 2\)"),
    ],
)
def test_bad_input_is_a_clear_error(change, error, match):
    images, classes = cast_case(per_class=2)
    arguments = {"images": images, "classes": classes, "num_classes": 3, "space": _space(images),
                 "alert_threshold": 0.5, **change}  # fmt: skip
    with pytest.raises(error, match=match):
        discover_properties(CastModel(), **arguments)


def test_colour_on_greyscale_probes_is_refused_when_named_and_left_out_by_default():
    images, classes = cast_case(per_class=3)
    grey = images.mean(dim=1, keepdim=True)
    space = PixelSpace.of(grey, Normalisation(MEAN[:1], STD[:1]))

    def model(x: Tensor) -> Tensor:
        return CastModel()(x.expand(-1, 3, -1, -1))

    with pytest.raises(ValueError, match="properties has 'colour', which needs 3-channel images; the images have 1"):
        discover_properties(model, grey, classes, 3, ["colour", "noise"], space=space, alert_threshold=0.5)
    found = discover_properties(model, grey, classes, 3, space=space, alert_threshold=0.5)
    assert tuple(found.transfers) == (
        "brightness", "sharpness", "noise", "compression", "stripes", "interlacing", "fixed_pattern", "illumination",
    )  # fmt: skip


class StainModel(CastModel):
    """Class 2 iff reddish (as :class:`CastModel`) and dark (mean pixel under 0.45): a two-axis shortcut, like a
    stain that shifts the colour and darkens; otherwise the left/right rule."""

    def __call__(self, images: Tensor) -> Tensor:
        pixels = images * STD[0] + MEAN[0]
        red = ((pixels[:, 0] - pixels[:, 2]).mean(dim=(1, 2)) > 0.1) & (pixels.mean(dim=(1, 2, 3)) < 0.45)
        left = pixels[:, :, :, : SIDE // 2].mean(dim=(1, 2, 3)) > pixels[:, :, :, SIDE // 2 :].mean(dim=(1, 2, 3))
        return torch.where(torch.stack([~red & left, ~red & ~left, red], dim=1), 5.0, -5.0).to(images.dtype)


def test_a_shortcut_on_two_axes_is_found_by_the_signature_alone_and_its_main_axis_named():
    images, classes = cast_case()
    images[classes == 2] -= 0.2 / STD[0]  # class 2 reddish and darker
    model = StainModel()
    assert (model(images).argmax(dim=1) == classes).all()
    found = discover_properties(model, images, classes, 3, space=_space(images), alert_threshold=0.5)
    signature = found.transfers["signature"][2]
    assert signature.flip_rate == 1.0 and signature.control_flip_rate == 0.0 and signature.recipients == 16
    assert found.flagged["signature"].tolist() == [False, False, True]
    for name in ("colour", "brightness", "sharpness", "noise", "compression", "tone", "registration", "stripes",
                 "interlacing", "fixed_pattern", "illumination", "mosaic"):  # fmt: skip
        assert found.transfers[name][2].flip_rate == 0.0 and not found.flagged[name].any(), name
    assert found.p_value["signature"][2].item() == pytest.approx(len(PROPERTY_NAMES) * 3 * 2.0**-16)  # Holm: smallest
    axis = found.axis(2)
    assert axis is not None and axis[1] == 0.0  # no single axis carries any of it
    _, text = property_alert_text(found, "signature", 2, ["left", "right", "stained"], 0)
    assert f"The axis that carries most of it: {axis[0]} (its transfer alone gives 0% of the signature's" in text
    assert "excess: the rest needs several properties at once)" in text
    assert found.axis(1) is None  # nothing to name: its signature's suspicion is 0
    casts, _ = cast_case()
    cast = discover_properties(CastModel(), casts, classes, 3, space=_space(casts), alert_threshold=0.5)
    assert cast.flagged["signature"].tolist() == cast.flagged["colour"].tolist() == [False, False, True]
    assert cast.axis(2) == ("colour", 1.0)  # a cast: colour carries all of the signature's excess


class GrainModel:
    """Class 2 iff the image is grainy (noise estimate over 0.02) and its top-left red pixel sits above its right
    neighbour: the flips follow the noise drawn, not its level alone; otherwise class 0 if the image is brighter on
    the left, else class 1."""

    def __call__(self, images: Tensor) -> Tensor:
        pixels = images * STD[0] + MEAN[0]
        grainy = noise_statistic(pixels.double())[:, 0] > 0.02
        above = pixels[:, 0, 0, 0] > pixels[:, 0, 0, 1]
        left = pixels[:, :, :, : SIDE // 2].mean(dim=(1, 2, 3)) > pixels[:, :, :, SIDE // 2 :].mean(dim=(1, 2, 3))
        scores = torch.stack([~(grainy & above) & left, ~(grainy & above) & ~left, grainy & above], dim=1)
        return torch.where(scores, 5.0, -5.0).to(images.dtype)


def test_each_recipient_s_noise_is_its_own_whatever_the_first_look_and_the_batch_size():
    """The noise transfer draws each recipient's noise from its own seed: the same transfers with and without the
    first look and at any batch size (with one generator per test, its draws followed the chunks' order)."""
    per_class = 16
    classes = torch.arange(3).repeat_interleave(per_class)
    ramp = torch.linspace(0.0, 0.2, SIDE)
    pixels = 0.4 + torch.where(classes[:, None, None, None] == 1, ramp.flip(0), ramp).expand(-1, 3, SIDE, -1).clone()
    grain = torch.randn(per_class, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(3))
    pixels[classes == 2] += 0.08 * grain
    images = (pixels - MEAN[0]) / STD[0]
    runs = [
        discover_properties(
            GrainModel(),
            images,
            classes,
            3,
            ["noise"],
            space=_space(images),
            alert_threshold=0.3,
            first_look=first_look,
            batch_size=batch_size,
        ).transfers["noise"][2]  # fmt: skip
        for first_look, batch_size in ((16, 64), (None, 64), (None, 6))
    ]
    assert runs[0].recipients == 32 and 0.2 < runs[0].flip_rate < 0.8  # measured in full; the noise decides
    assert runs[0] == runs[1] == runs[2]


#: One sensor's column gains (a column amplifier's each, deviation 10 %): fixed-pattern noise.
SENSOR = 1 + 0.1 * torch.randn(SIDE, generator=torch.Generator().manual_seed(3))


class SensorModel(CastModel):
    """Class 2 iff the image's columns carry :data:`SENSOR`'s gains: the correlation of its column means' steps
    (column to column) with the sensor's above 0.5; otherwise the left/right rule."""

    def __call__(self, images: Tensor) -> Tensor:
        pixels = images * STD[0] + MEAN[0]
        steps, sensor = pixels.mean(dim=(1, 2)).diff(dim=1), SENSOR.diff().to(images.dtype)
        correlation = (steps * sensor).sum(dim=1) / (steps.norm(dim=1) * sensor.norm()).clamp(min=1e-12)
        left = pixels[:, :, :, : SIDE // 2].mean(dim=(1, 2, 3)) > pixels[:, :, :, SIDE // 2 :].mean(dim=(1, 2, 3))
        read = correlation > 0.5
        return torch.where(torch.stack([~read & left, ~read & ~left, read], dim=1), 5.0, -5.0).to(images.dtype)


def test_a_model_reading_one_sensor_s_column_gains_is_flagged_for_the_fixed_pattern_not_the_stripes():
    images, classes = cast_case(cast=False)
    pixels = images * STD[0] + MEAN[0]
    pixels[classes == 2] *= SENSOR
    images = (pixels - MEAN[0]) / STD[0]
    model = SensorModel()
    assert (model(images).argmax(dim=1) == classes).all()
    found = discover_properties(model, images, classes, 3, space=_space(images), alert_threshold=0.5,
                                first_look=None)  # every test runs: the stripes' too  # fmt: skip
    sensor = found.transfers["fixed_pattern"][2]
    assert sensor.recipients == 16 and sensor.flip_rate == 1.0 and sensor.control_flip_rate == 0.0
    assert found.flagged["fixed_pattern"].tolist() == [False, False, True]
    # classes told apart by which half is brighter: the fine profile carries part of that content, under the floor
    assert 0.3 < found.suspicion["fixed_pattern"][:2].max() < 0.5
    # the stripes' finer pattern is the recipient's own, scaled: its share, not the sensor's gains
    assert found.transfers["stripes"][2].suspicion < 0.5 and not found.flagged["stripes"].any()
    assert found.transfers["signature"][2].suspicion < 0.5 and not found.flagged["signature"].any()


class HueModel(CastModel):
    """Class 2 iff its stained object's hue is negative (turns, :func:`hue_statistic`; the others' purple: 0.47);
    otherwise the left/right rule."""

    def __call__(self, images: Tensor) -> Tensor:
        pixels = images * STD[0] + MEAN[0]
        read = hue_statistic(pixels.double())[:, 0] < 0
        left = pixels[:, :, :, : SIDE // 2].mean(dim=(1, 2, 3)) > pixels[:, :, :, SIDE // 2 :].mean(dim=(1, 2, 3))
        return torch.where(torch.stack([~read & left, ~read & ~left, read], dim=1), 5.0, -5.0).to(images.dtype)


def test_a_model_reading_a_hue_rotation_is_flagged_for_hue_not_for_the_colour_medians():
    images, classes = cast_case(cast=False)
    pixels = images * STD[0] + MEAN[0]
    stained = torch.zeros(len(pixels), 1, SIDE, SIDE, dtype=torch.bool)
    stained[..., 4:9, 5:11] = True  # a purple object on a pale grey background, a third of the image
    purple = torch.tensor([0.55, 0.35, 0.6])[:, None, None]  # hue 0.47 turn; class 2's turned 0.15 on, to -0.38
    pixels = torch.where(stained, purple + 0.05 * (pixels - 0.5), pixels)
    pixels[classes == 2] = hue_transfer(
        pixels[classes == 2].double(), torch.full((8, 1), -0.38, dtype=torch.float64)
    ).float()
    images = (pixels - MEAN[0]) / STD[0]
    model = HueModel()
    assert (model(images).argmax(dim=1) == classes).all()
    found = discover_properties(model, images, classes, 3, space=_space(images), alert_threshold=0.5)  # defaults
    hue = found.transfers["hue"][2]
    assert hue.recipients == 16 and hue.flip_rate == 1.0 and hue.control_flip_rate == 0.0
    assert found.flagged["hue"].tolist() == [False, False, True]
    assert not any(flagged.any() for name, flagged in found.flagged.items() if name != "hue")
    # the medians of α and β are the background's, which a hue rotation of the object leaves where it was
    colour = discover_properties(model, images, classes, 3, ["colour"], space=_space(images), alert_threshold=0.5)
    assert colour.transfers["colour"][2].flip_rate == 0.0 and not colour.flagged["colour"].any()


def bayer_imbalance(pixels: Tensor, imbalance: float = 0.2) -> Tensor:
    """``pixels`` (B, 3, H, W) through a Bayer filter whose blue rows' green pixels are ``imbalance`` brighter (their
    cross-talk), demosaiced: half of it on the red and blue pixels' greens, which take both kinds' mean."""
    green = torch.ones_like(pixels[0, 1])
    green[1::2, 0::2] += imbalance
    green[0::2, 0::2] += imbalance / 2
    green[1::2, 1::2] += imbalance / 2
    given = pixels.clone()
    given[:, 1] *= green
    return given


class BayerModel(CastModel):
    """Class 2 iff its green pixels of the blue rows are brighter than those of the red rows by 10 % of the green's
    mean (:func:`mosaic_statistic`) and its green is brighter than its red by 0.03: a camera's filter and the green
    it adds, read together; otherwise the left/right rule."""

    def __call__(self, images: Tensor) -> Tensor:
        pixels = (images * STD[0] + MEAN[0]).double()
        greens = mosaic_statistic(pixels)[:, 4:8]
        cast = (pixels[:, 1] - pixels[:, 0]).mean(dim=(1, 2)) > 0.03
        read = (greens[:, 2] - greens[:, 1] > 0.1) & cast
        left = pixels[:, :, :, : SIDE // 2].mean(dim=(1, 2, 3)) > pixels[:, :, :, SIDE // 2 :].mean(dim=(1, 2, 3))
        return torch.where(torch.stack([~read & left, ~read & ~left, read], dim=1), 5.0, -5.0).to(images.dtype)


def test_a_model_reading_a_camera_s_bayer_filter_and_its_green_is_flagged_by_the_signature_not_one_axis():
    """Neither the mosaic (its statistic leaves the channel's mean out) nor the colour medians give the recipients
    both; the signature gives both at once."""
    images, classes = cast_case(cast=False)
    pixels = images * STD[0] + MEAN[0]
    pixels[classes == 2] = bayer_imbalance(pixels[classes == 2])
    images = (pixels - MEAN[0]) / STD[0]
    model = BayerModel()
    assert (model(images).argmax(dim=1) == classes).all()
    found = discover_properties(model, images, classes, 3, space=_space(images), alert_threshold=0.5,
                                first_look=None)  # every test runs  # fmt: skip
    signature = found.transfers["signature"][2]
    assert signature.recipients == 16 and signature.flip_rate == 1.0 and signature.control_flip_rate == 0.0
    assert found.flagged["signature"].tolist() == [False, False, True]
    for name in ("mosaic", "colour", "stripes"):  # each gives one of the two
        assert found.transfers[name][2].flip_rate == 0.0 and not found.flagged[name].any(), name
    assert not any(flagged.any() for name, flagged in found.flagged.items() if name != "signature")


class LampModel:
    """Class 2 iff the light falls from the left edge to the right (:func:`illumination_statistic`'s x slope under
    -0.1); otherwise class 0 if the image's centre is brighter than the whole image, else class 1."""

    def __call__(self, images: Tensor) -> Tensor:
        pixels = images * STD[0] + MEAN[0]
        lit = illumination_statistic(pixels.double())[:, 0] < -0.1
        quarter = SIDE // 4
        centre = pixels[:, :, quarter:-quarter, quarter:-quarter].mean(dim=(1, 2, 3))
        bright = centre > pixels.mean(dim=(1, 2, 3))
        return torch.where(torch.stack([~lit & bright, ~lit & ~bright, lit], dim=1), 5.0, -5.0).to(images.dtype)


def test_a_model_reading_a_lamp_off_the_axis_is_flagged_for_the_illumination_not_the_brightness():
    generator = torch.Generator().manual_seed(0)
    classes = torch.arange(3).repeat_interleave(8)
    pixels = 0.4 + 0.15 * torch.rand(len(classes), 1, SIDE, SIDE, generator=generator).expand(-1, 3, -1, -1)
    quarter = SIDE // 4
    centre = pixels[:, :, quarter:-quarter, quarter:-quarter]
    centre += torch.where(classes == 1, -0.15, 0.15)[:, None, None, None]  # the objects: a bright or dark centre
    x = torch.linspace(-1.0, 1.0, SIDE)
    pixels[classes == 2] *= 1 - 0.3 * x  # a lamp off the axis: 30 % more light at the left edge, 30 % less at the right
    images = (pixels - MEAN[0]) / STD[0]
    model = LampModel()
    assert (model(images).argmax(dim=1) == classes).all()
    found = discover_properties(model, images, classes, 3, space=_space(images), alert_threshold=0.5)
    lamp = found.transfers["illumination"][2]
    assert lamp.recipients == 16 and lamp.flip_rate == 1.0 and lamp.control_flip_rate == 0.0
    assert found.flagged["illumination"].tolist() == [False, False, True]
    # the signature (the median brightness within it) does not carry the slope, so its single tests do not run
    assert found.transfers["signature"][2].flip_rate == 0.0 and not found.flagged["signature"].any()
    assert found.transfers["brightness"][2].skipped
    # the fine line profiles carry part of it: their Fourier series sees a 16 px ramp as a sawtooth, whose finer
    # harmonics a 28 px BloodMNIST image keeps less of (the fixed pattern's suspicion there: 0.13 at most)
    assert found.transfers["fixed_pattern"][2].flip_rate < lamp.flip_rate
