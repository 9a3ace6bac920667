"""Normalisation: pixels to model inputs and back, how a front door takes it, and what it refuses."""

from __future__ import annotations

import pytest
import torch

from gradskip_lightning import Normalisation


def test_pixels_go_to_inputs_and_back_per_channel_in_their_dtype():
    norm = Normalisation(mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.5))
    pixels = torch.rand(2, 3, 4, 4, dtype=torch.float64)
    inputs = norm.from_pixels(pixels)
    expected = (pixels - torch.tensor([0.5, 0.4, 0.3], dtype=torch.float64)[:, None, None]) / torch.tensor(
        [0.2, 0.25, 0.5], dtype=torch.float64
    )[:, None, None]
    assert inputs.dtype == torch.float64 and torch.equal(inputs, expected)
    torch.testing.assert_close(norm.to_pixels(inputs), pixels)
    grey = Normalisation(mean=(0.5,), std=(0.5,))  # one value serves every channel
    assert grey.to_pixels(torch.zeros(1, 3, 1, 1)).flatten().tolist() == [0.5] * 3
    assert grey.from_pixels(torch.ones(3, 1, 1, dtype=torch.float16)).dtype == torch.float16  # (C, H, W) too


def test_a_front_door_takes_it_or_a_mapping_and_a_datamodule_declares_it_by_mean_and_std():
    built = Normalisation.given({"mean": [0.5, 0.5, 0.5], "std": [0.2, 0.2, 0.2]})
    assert built == Normalisation(mean=(0.5, 0.5, 0.5), std=(0.2, 0.2, 0.2)) and isinstance(built.mean, tuple)
    assert Normalisation.given(None) is None and Normalisation.given(built) is built

    class Data:
        mean, std = [0.5], [0.25]

    assert Normalisation.of(Data()) == Normalisation(mean=(0.5,), std=(0.25,))
    assert Normalisation.of(object()) is None


@pytest.mark.parametrize(
    "build, error, match",
    [
        (lambda: Normalisation(mean=(0.5, 0.5), std=(0.5,)), ValueError, "need as many values"),
        (lambda: Normalisation(mean=(0.5,), std=(-1.0,)), ValueError, r"normalisation\.std must be positive"),
        (lambda: Normalisation(mean=0.5, std=(0.5,)), TypeError, r"normalisation\.mean must be a list"),
        (lambda: Normalisation(mean=("a",), std=(0.5,)), ValueError, "finite numbers"),
        (lambda: Normalisation.given({"mean": [0.5], "sd": [0.5]}), ValueError, "takes the keys mean and std"),
        (lambda: Normalisation.given([0.5, 0.5]), TypeError, "normalisation must be a Normalisation"),
        (lambda: Normalisation.given("imagenet", option="transplant"), TypeError, "transplant must be"),
        (lambda: Normalisation((0.5,) * 3, (0.5,) * 3).check_channels(1), ValueError, "images have 1 channels"),
    ],
)
def test_what_it_refuses_is_named_by_its_option(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_a_datamodule_with_only_one_of_mean_and_std_is_refused():
    class Half:
        mean = (0.5,)

    with pytest.raises(ValueError, match="the datamodule has only one of mean and std"):
        Normalisation.of(Half())
