"""PlantedShapesDataset / PlantedShapesDataModule: exact masks, determinism, the spurious tag."""

from __future__ import annotations

import pytest
import torch

from gradskip_lightning.data import PlantedShapesDataModule, PlantedShapesDataset
from gradskip_lightning.shortcuts import SpuriousTag


def _is_colour(image: torch.Tensor, colour: torch.Tensor) -> torch.Tensor:
    """(3, H, W) image, (3,) colour -> (H, W) bool: pixels of exactly that colour."""
    return (image == colour.view(3, 1, 1)).all(dim=0)


def test_items_and_labels():
    ds = PlantedShapesDataset(40, seed=1, num_classes=4)
    image, label, mask = ds[3]
    assert image.shape == (3, 32, 32) and image.dtype == torch.float32
    assert label.dtype == torch.int64 and label.ndim == 0 and label == ds.labels[3]
    assert mask.shape == (32, 32) and mask.dtype == torch.bool
    assert ds.labels.dtype == torch.int64 and ds.labels.shape == (40,)
    assert torch.bincount(ds.labels).tolist() == [10, 10, 10, 10]  # balanced
    assert ds.class_names == ["red square", "green square", "blue square", "yellow square"]
    # normalised with mean = std = 0.5: [0, 1] maps to [-1, 1]
    torch.testing.assert_close(image, ds.render(3)[0] * 2 - 1)


@pytest.mark.parametrize("object_size,ring_width,num_distractors", [(8, 2, 2), (6, 1, 3)])
def test_mask_is_exactly_the_filled_square(object_size, ring_width, num_distractors):
    ds = PlantedShapesDataset(
        24, seed=5, object_size=object_size, ring_width=ring_width, num_distractors=num_distractors, noise=0.0
    )
    ring_pixels = object_size**2 - (object_size - 2 * ring_width) ** 2
    for index in range(len(ds)):
        image, mask = ds.render(index)
        rows, cols = mask.nonzero(as_tuple=True)
        height, width = rows.max() - rows.min() + 1, cols.max() - cols.min() + 1
        assert (height, width) == (object_size, object_size) and mask.sum() == object_size**2
        colour = ds.palette[ds.labels[index]]
        assert _is_colour(image, colour)[mask].all()
        # The 1-px frame around the square is never the object's colour: the mask misses nothing.
        frame = torch.nn.functional.max_pool2d(mask[None, None].float(), 3, 1, 1)[0, 0].bool() & ~mask
        assert not _is_colour(image, colour)[frame].any()
        # Outside the mask, palette pixels are exactly the distractor rings' pixels.
        palette_pixels = torch.stack([_is_colour(image, c) for c in ds.palette]).any(dim=0)
        assert palette_pixels[~mask].sum() == num_distractors * ring_pixels


def test_rings_carry_no_label_information():
    ds = PlantedShapesDataset(400, seed=2, noise=0.0, num_distractors=2)
    same = 0
    for index in range(len(ds)):
        image, mask = ds.render(index)
        ring_colour_hits = [_is_colour(image, c)[~mask].any() for c in ds.palette]
        same += int(ring_colour_hits[int(ds.labels[index])])
    # P(some ring has the label's colour) = 1 - (3/4)^2 = 0.4375 for independent colours.
    assert 0.35 < same / len(ds) < 0.53


def test_deterministic_from_seed_and_index():
    a = PlantedShapesDataset(10, seed=7)
    b = PlantedShapesDataset(10, seed=7)
    order_b = [b[i] for i in (9, 3, 3, 0)]
    for item_b, i in zip(order_b, (9, 3, 3, 0)):
        for x, y in zip(a[i], item_b):
            assert torch.equal(x, y)
    other = PlantedShapesDataset(10, seed=8)
    assert not torch.equal(a[0][0], other[0][0])


def test_datamodule_splits_are_distinct_and_reproducible():
    dm = PlantedShapesDataModule(train_size=32, val_size=16, test_size=16, seed=3, batch_size=8)
    dm.setup("fit")
    dm.setup("test")
    assert (len(dm.train_dataset), len(dm.val_dataset), len(dm.test_dataset)) == (32, 16, 16)
    assert not torch.equal(dm.train_dataset[0][0], dm.val_dataset[0][0])
    assert not torch.equal(dm.val_dataset[0][0], dm.test_dataset[0][0])
    again = PlantedShapesDataModule(train_size=32, val_size=16, test_size=16, seed=3)
    again.setup("fit")
    assert torch.equal(dm.val_dataset[5][0], again.val_dataset[5][0])
    images, labels, masks = next(iter(dm.val_dataloader()))
    assert images.shape == (8, 3, 32, 32) and labels.shape == (8,) and masks.shape == (8, 32, 32)
    assert dm.num_classes == 4 and dm.img_size == 32 and dm.mean == dm.std == (0.5, 0.5, 0.5)


def test_tag_in_every_split_alike_with_named_regions():
    tag = SpuriousTag(target_class=1, p_in=0.9, p_out=0.05, seed=2)
    dm = PlantedShapesDataModule(tag=tag, noise=0.0, train_size=400, val_size=400, test_size=400, batch_size=8)
    dm.setup("fit")
    dm.setup("test")
    checker = torch.tensor(tag.pattern)
    for dataset in (dm.train_dataset, dm.val_dataset, dm.test_dataset):
        in_class = dataset.labels == 1
        assert dataset.carriers[in_class].float().mean() > 0.8  # p_in 0.9 over 100 images
        assert dataset.carriers[~in_class].float().mean() < 0.1  # p_out 0.05 over 300 images
        for index in range(40):
            image, label, regions = dataset[index]
            assert set(regions) == {"object", "tag"}
            raw, object_mask = dataset.render(index)
            assert torch.equal(regions["object"], object_mask)
            assert not (regions["object"] & tag.mask(32, 32)).any()  # objects never cover the tag
            if dataset.carriers[index]:
                assert regions["tag"].sum() == 9 and torch.equal(raw[:, :3, :3], checker.expand(3, 3, 3))
            else:
                assert not regions["tag"].any() and not torch.equal(raw[:, :3, :3], checker.expand(3, 3, 3))
    images, labels, regions = next(iter(dm.val_dataloader()))
    assert regions["object"].shape == regions["tag"].shape == (8, 32, 32)


def test_untagged_items_keep_the_mask_alone_and_tagging_changes_only_the_tag():
    plain = PlantedShapesDataset(30, seed=4)
    tagged = PlantedShapesDataset(30, seed=4, tag=SpuriousTag(), tag_mode="always")
    assert len(plain[0]) == 3 and isinstance(plain[0][2], torch.Tensor)
    for index in range(len(plain)):
        image, tagged_image = plain.render(index)[0], tagged.render(index)[0]
        assert torch.equal(image[:, 3:], tagged_image[:, 3:]) and torch.equal(image[:, :, 3:], tagged_image[:, :, 3:])


def test_transplanted_and_clean_test_sets():
    dm = PlantedShapesDataModule(tag=SpuriousTag(target_class=0), train_size=8, val_size=8, test_size=100)
    dm.setup("test")
    transplanted = dm.transplanted_test_dataset
    assert len(transplanted) == 75 and (transplanted.labels != 0).all()  # 3 of 4 balanced classes
    assert all(transplanted[i][2]["tag"].sum() == 9 for i in range(len(transplanted)))
    assert not dm.clean_test_dataset.carriers.any()
    index = int(transplanted.indices[0])
    assert torch.equal(transplanted[0][0][:, 3:], dm.clean_test_dataset[index][0][:, 3:])


def test_negative_control_tags_classes_alike():
    tag = SpuriousTag(target_class=0, p_in=0.5, p_out=0.5)
    ds = PlantedShapesDataset(4000, seed=0, tag=tag)
    rates = [float(ds.carriers[ds.labels == k].float().mean()) for k in range(4)]
    assert max(rates) - min(rates) < 0.08


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_classes": 9},
        {"num_classes": 1},
        {"tag": SpuriousTag(target_class=4)},
        {"tag": SpuriousTag(position=(30, 30))},
        {"object_size": 30},
        {"ring_width": 4, "object_size": 8},
        {"noise": -0.1},
    ],
)
def test_invalid_options_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        PlantedShapesDataset(8, seed=0, **kwargs)


def test_unplaceable_objects_raise_a_clear_error():
    ds = PlantedShapesDataset(1, seed=0, img_size=16, object_size=8, num_distractors=3)
    with pytest.raises(RuntimeError, match="could not place 4 objects"):
        ds[0]
