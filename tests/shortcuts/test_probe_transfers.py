"""The property tests' probe side, kept between epoch ends: a recipient's transferred images are its own whatever
the other recipients and the model's predictions, a later call on the same probes computes no transfer again and
finds what a fresh one finds, probes built for other images are refused, and past its byte limit nothing more is
kept."""

from __future__ import annotations

import math

import pytest
import torch

from gradskip_lightning.shortcuts.discovery_properties import discover_properties
from gradskip_lightning.shortcuts.image_properties import hue_statistic, hue_transfer
from gradskip_lightning.shortcuts.probe_transfers import ARMS, ProbeTransfers, separability
from tests.shortcuts.test_discovery_properties import MEAN, STD, CastModel, ObjectModel, _space, cast_case


def _probes(images: torch.Tensor, classes: torch.Tensor, **kwargs) -> ProbeTransfers:
    return ProbeTransfers(images, classes, _space(images), seed=0, **kwargs)


def _found(model, images, classes, probes=None):
    return discover_properties(model, images, classes, 3, space=_space(images), alert_threshold=0.5, probes=probes)


def test_separability_is_one_for_separated_classes_and_about_one_half_for_the_same_distribution():
    generator = torch.Generator().manual_seed(0)
    classes = torch.arange(2).repeat_interleave(200)
    same = torch.randn(400, 2, generator=generator, dtype=torch.float64)
    shifted = same + 10 * classes[:, None]
    assert separability(shifted, classes, 1) == 1.0 and separability(shifted, classes, 0) == 1.0
    assert abs(separability(same, classes, 1) - 0.5) < 0.1
    assert separability(same * torch.tensor([1.0, 1e6], dtype=torch.float64), classes, 1) == pytest.approx(
        separability(same, classes, 1)
    )  # in units of each statistic's within-class spread
    assert math.isnan(separability(same[:201], classes[:201], 1))  # one probe of class 1
    assert math.isnan(separability(same[:200], classes[:200], 0))  # no other class


def test_the_hue_separability_is_the_same_on_either_side_of_the_angles_cut():
    """Hues are angles: a class whose hues straddle 0.5 turn (-0.5) is as far from the others as one turned away."""
    images, classes = cast_case(cast=False)
    pixels = (images * STD[0] + MEAN[0]).double()
    jitter = 0.004 * torch.arange(len(classes), dtype=torch.float64) % 0.012
    found = []
    for start in (0.47, 0.1):  # class 2 at 0.51 (reads -0.49) and at 0.14
        hues = torch.remainder(start + 0.02 * classes + jitter + 0.5, 1.0) - 0.5
        turned = hue_transfer(pixels, hues[:, None]).float()
        assert torch.allclose(hue_statistic(turned.double())[:, 0], hues.double(), atol=1e-4)
        probes = _probes((turned - MEAN[0]) / STD[0], classes)
        found.append([probes.separability("hue", target) for target in range(3)])
    assert found[0] == pytest.approx(found[1]) and found[0][2] == 1.0  # class 2 lies beyond the others either way


def test_a_recipients_transfers_are_its_own_whatever_else_is_transferred_with_it():
    images, classes = cast_case()
    together = _probes(images, classes).transferred("signature", 2, "test", torch.tensor([0, 8, 1, 9]))
    alone = _probes(images, classes).transferred("signature", 2, "test", torch.tensor([1]))
    torch.testing.assert_close(together[2], alone[0], rtol=0, atol=1e-6)  # the noise drawn for it included
    pairing = _probes(images, classes).pairing(2)
    assert pairing.donor[classes != 2].tolist() == [16 + j % 8 for j in [0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9,
                                                                          11, 13, 15]]  # fmt: skip  # in turn
    assert (pairing.donor[classes == 2] == -1).all() and (classes[pairing.control[classes != 2]] != 2).all()
    noise = _probes(images, classes)
    test, control = (noise.transferred("noise", 2, arm, torch.tensor([0])) for arm in ARMS)
    assert not torch.equal(test, control)  # each arm its own donor and draws
    with pytest.raises(ValueError, match="no test donor for class 2"):
        noise.transferred("noise", 2, "test", torch.tensor([0, 16]))  # probe 16 is of class 2


def test_a_later_call_on_the_same_probes_transfers_nothing_again_and_finds_what_a_fresh_one_finds():
    images, classes = cast_case()
    kept = _probes(images, classes)
    first = _found(CastModel(), images, classes, kept)
    computed = kept.kept_bytes
    assert computed > 0 and first.flagged["colour"].tolist() == [False, False, True]
    again = _found(CastModel(), images, classes, kept)
    assert kept.kept_bytes == computed and again.transfers == first.transfers
    # another model takes other recipients (what it predicts differs): each one's transfers are still its own
    other = _found(ObjectModel(), images, classes, kept)
    assert other.transfers == _found(ObjectModel(), images, classes).transfers
    assert kept.kept_bytes >= computed


def test_probes_built_for_other_images_seed_or_space_are_refused():
    images, classes = cast_case()
    kept = _probes(images, classes)
    with pytest.raises(ValueError, match="built for other images"):
        _found(CastModel(), images.flip(-1), classes, kept)
    with pytest.raises(ValueError, match="built for other images"):
        discover_properties(CastModel(), images, classes, 3, space=_space(images), alert_threshold=0.5, seed=1,
                            probes=kept)  # fmt: skip


def test_past_its_byte_limit_nothing_more_is_kept_and_the_results_are_the_same():
    images, classes = cast_case()
    image_bytes = images[0].nbytes
    small = _probes(images, classes, max_bytes=20 * image_bytes)  # one test arm of 16, no more
    assert _found(CastModel(), images, classes, small).transfers == _found(CastModel(), images, classes).transfers
    assert small.kept_bytes == 16 * image_bytes
    none = _probes(images, classes, max_bytes=0)
    assert _found(CastModel(), images, classes, none).transfers == _found(CastModel(), images, classes).transfers
    assert none.kept_bytes == 0
