"""Where a training batch holds its images (the very tensor training_step gets) and its classes, and each batch's
seed."""

from __future__ import annotations

import pytest
import torch

from gradskip_lightning.callbacks.training_batches import batch_images, batch_seed, class_members


def test_the_images_of_tensor_tuple_list_and_mapping_batches_are_the_batchs_own_tensor():
    images = torch.zeros(2, 3, 4, 4)
    for batch in (images, (images, torch.zeros(2)), [images, torch.zeros(2), {"object": None}]):
        assert batch_images(batch) is images
    assert batch_images({"label": torch.zeros(2), "img": images}) is images
    assert batch_images({"scan": images, "image": torch.zeros(2, 1, 4, 4)}, image_key="scan") is images


@pytest.mark.parametrize(
    "batch, key, match",
    [
        ({"scan": torch.zeros(2, 3, 4, 4)}, None, r"under one of \('image', .*the batch has keys \['scan'\]"),
        ({"image": torch.zeros(2, 3, 4, 4)}, "scan", r"under 'scan'; the batch has keys \['image'\]"),
        ((torch.zeros(2, 4, 4), torch.zeros(2)), None, r"float tensor \(B, C, H, W\).*got torch.float32 \(2, 4, 4\)"),
        ((torch.zeros(2, 3, 4, 4, dtype=torch.uint8),), None, "got torch.uint8"),
        ("images", None, "got a str"),
        (None, None, "got a NoneType"),
    ],
)
def test_a_batch_without_readable_images_is_refused_naming_the_forms(batch, key, match):
    with pytest.raises(TypeError, match=match):
        batch_images(batch, key)


def test_the_members_of_a_class_come_from_index_or_multi_hot_labels_of_tuple_and_mapping_batches():
    images, labels = torch.zeros(4, 3, 4, 4), torch.tensor([1, 0, 1, 2])
    assert class_members((images, labels), 1).tolist() == [True, False, True, False]
    assert class_members({"img": images, "target": labels}, 2).tolist() == [False, False, False, True]
    assert class_members({"x": images, "y": labels}, 0, label_key="y").tolist() == [False, True, False, False]
    multi_hot = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    assert class_members([images, multi_hot], 0).tolist() == [True, False, False, True]


@pytest.mark.parametrize(
    "batch, key, error, match",
    [
        (torch.zeros(2, 3, 4, 4), None, TypeError, r"off.*got a Tensor batch without labels.*give erase=False"),
        ({"image": torch.zeros(2, 3, 4, 4)}, None, TypeError, r"mapping's one of \('label', .*a dict batch without"),
        ({"image": torch.zeros(2, 3, 4, 4), "y": torch.zeros(2)}, "label", TypeError, r"mapping's 'label'"),
        ((torch.zeros(2, 3, 4, 4), torch.zeros(2)), None, TypeError, r"got labels torch.float32 \(2,\)"),
        ((torch.zeros(2, 3, 4, 4), torch.zeros(2, 2)), None, ValueError, "class 3 is not among the batch's 2"),
    ],
)
def test_a_batch_without_readable_classes_is_refused_naming_the_forms_and_the_way_out(batch, key, error, match):
    with pytest.raises(error, match=match):
        class_members(batch, 3, key)


def test_seeds_differ_by_rank_epoch_and_batch_and_fit_a_generator():
    seeds = {batch_seed(0, r, e, b) for r in range(2) for e in range(3) for b in range(50)}
    assert len(seeds) == 300 and all(0 <= s < 2**63 for s in seeds)
    torch.Generator().manual_seed(max(seeds))
    assert batch_seed(1, 0, 0, 0) != batch_seed(0, 0, 0, 0)
