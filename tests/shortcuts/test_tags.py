"""SpuriousTag (pattern, place, per-class draws) and the spurious score."""

from __future__ import annotations

import pytest
import torch

from gradskip_lightning.shortcuts import SPURIOUS_THRESHOLD, SpuriousTag, spurious_score


def test_mask_and_apply_put_the_pattern_at_its_place():
    tag = SpuriousTag(pattern=((0.0, 1.0), (1.0, 0.0), (0.25, 0.75)), position=(4, 1))
    assert tag.box == (4, 1, 7, 3)
    mask = tag.mask(8, 6)
    assert mask.sum() == 6 and mask[4:7, 1:3].all()
    image = torch.full((3, 8, 6), 0.5)
    tag.apply(image)
    assert torch.equal(image[:, ~mask], torch.full((3, 42), 0.5))
    assert torch.equal(image[1, 4:7, 1:3], torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.25, 0.75]]))
    with pytest.raises(ValueError, match="does not fit"):
        tag.mask(6, 6)


def test_draws_follow_p_in_and_p_out_and_are_deterministic():
    tag = SpuriousTag(target_class=1, p_in=0.8, p_out=0.1, seed=3)
    labels = torch.arange(20_000) % 4
    carriers = tag.carriers(labels, "sampled", stream=0)
    assert carriers[labels == 1].float().mean() == pytest.approx(0.8, abs=0.02)
    assert carriers[labels != 1].float().mean() == pytest.approx(0.1, abs=0.01)
    assert torch.equal(carriers, tag.carriers(labels, "sampled", stream=0))
    assert not torch.equal(carriers, tag.carriers(labels, "sampled", stream=1))
    reseeded = SpuriousTag(target_class=1, p_in=0.8, p_out=0.1, seed=4)
    assert not torch.equal(carriers, reseeded.carriers(labels, "sampled", 0))
    assert not tag.carriers(labels, "none", stream=0).any() and tag.carriers(labels, "always", stream=0).all()


def test_negative_control_tags_every_class_at_the_same_rate():
    tag = SpuriousTag(target_class=0, p_in=0.3, p_out=0.3)
    assert tag.is_control and not SpuriousTag().is_control
    labels = torch.arange(40_000) % 4
    rates = [float(tag.carriers(labels, "sampled", 0)[labels == k].float().mean()) for k in range(4)]
    assert max(rates) - min(rates) < 0.03 and rates[0] == pytest.approx(0.3, abs=0.015)


def test_multilabel_labels_use_the_target_column():
    labels = torch.tensor([[0, 1, 0], [1, 0, 0], [0, 1, 1]])
    assert SpuriousTag(target_class=1).in_class(labels).tolist() == [True, False, True]
    with pytest.raises(ValueError, match="out of range"):
        SpuriousTag(target_class=3).in_class(labels)


def test_spurious_score():
    logits = torch.tensor([[3.0, 0.0, 0.0], [0.0, 2.0, 0.0], [1.0, 0.5, 0.9], [0.0, 0.0, 1.0]])
    assert spurious_score(logits, target_class=0) == 0.5
    assert spurious_score(logits, target_class=2) == 0.25
    assert spurious_score(logits - 0.95, target_class=0, multilabel=True) == 0.5  # logits > 0: 3.0 and 1.0
    assert SPURIOUS_THRESHOLD == 0.85
    with pytest.raises(ValueError):
        spurious_score(logits, target_class=3)
    with pytest.raises(ValueError):
        spurious_score(torch.zeros(0, 3), target_class=0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"p_in": 1.5},
        {"p_out": -0.1},
        {"target_class": -1},
        {"pattern": ((1.0, 0.0), (1.0,))},
        {"pattern": ()},
        {"pattern": ((2.0,),)},
        {"position": (-1, 0)},
    ],
)
def test_invalid_tags_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        SpuriousTag(**kwargs)
