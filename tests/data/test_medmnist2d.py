"""MedMNISTDataModule on the real medmnist loader, reading generated files of the official sizes:
BloodMNIST (RGB, the default), BreastMNIST (grayscale) and ChestMNIST (grayscale, multi-label)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gradskip_lightning.data import BloodMNISTDataModule, MedMNISTDataModule
from gradskip_lightning.data.medmnist2d import BLOODMNIST_MEAN, BLOODMNIST_STD, SIZES, medmnist_filename
from gradskip_lightning.shortcuts import SpuriousTag
from tests.data.conftest import SPLIT_SIZES, chest_labels, synthetic_bloodmnist_images, synthetic_gray_images


def _expected_image(label: int) -> torch.Tensor:
    """The normalised (3, 28, 28) tensor the loader must return for an un-augmented BloodMNIST image."""
    raw = torch.from_numpy(synthetic_bloodmnist_images(np.array([label]))[0]).permute(2, 0, 1) / 255.0
    return (raw - torch.tensor(BLOODMNIST_MEAN).view(3, 1, 1)) / torch.tensor(BLOODMNIST_STD).view(3, 1, 1)


def _fit_datamodule(root, cls=BloodMNISTDataModule, **kwargs) -> MedMNISTDataModule:
    """prepare_data + setup("fit") as the Trainer does, on the file in ``root``."""
    dm = cls(root=str(root), download=False, **kwargs)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_fit_splits_have_official_sizes_labels_and_normalised_images(bloodmnist_root):
    dm = _fit_datamodule(bloodmnist_root, augment=False)
    assert (dm.num_classes, dm.img_size, dm.in_chans, dm.task, dm.flag) == (8, 28, 3, "multiclass", "bloodmnist")
    assert dm.mean == BLOODMNIST_MEAN and dm.std == BLOODMNIST_STD
    assert dm.class_names[0] == "basophil" and dm.class_names[-1] == "platelet" and len(dm.class_names) == 8
    for dataset, split in ((dm.train_dataset, "train"), (dm.val_dataset, "val")):
        n = SPLIT_SIZES[split]
        assert len(dataset) == n
        assert dataset.labels.dtype == torch.int64 and dataset.labels.shape == (n,)
        assert torch.equal(dataset.labels, torch.arange(n) % 8)
    item = dm.val_dataset[13]
    assert len(item) == 2  # no tag: (image, label)
    image, label = item
    assert image.dtype == torch.float32 and image.shape == (3, 28, 28)
    assert label.dtype == torch.int64 and label.ndim == 0 and int(label) == 13 % 8
    torch.testing.assert_close(image, _expected_image(13 % 8), atol=1e-5, rtol=0)


def test_bloodmnist_datamodule_is_the_generic_one_with_its_flag(bloodmnist_root):
    generic = _fit_datamodule(bloodmnist_root, cls=MedMNISTDataModule, augment=False)
    fixed = _fit_datamodule(bloodmnist_root, augment=False)
    assert isinstance(fixed, MedMNISTDataModule) and generic.flag == fixed.flag == "bloodmnist"
    assert torch.equal(generic.val_dataset[5][0], fixed.val_dataset[5][0])
    with pytest.raises(TypeError):
        BloodMNISTDataModule(flag="chestmnist")


def test_training_augmentation_flips_images(bloodmnist_root):
    dm = _fit_datamodule(bloodmnist_root, augment=True)
    expected = _expected_image(int(dm.train_dataset.labels[0]))
    seen = {"identity": 0, "hflip": 0, "vflip": 0}
    torch.manual_seed(0)
    for _ in range(40):
        image, _ = dm.train_dataset[0]
        for name, flipped in (("identity", expected), ("hflip", expected.flip(2)), ("vflip", expected.flip(1))):
            seen[name] += bool(torch.allclose(image, flipped, atol=1e-5))
    assert all(count > 0 for count in seen.values()), seen


def test_test_loader_batches(bloodmnist_root):
    dm = BloodMNISTDataModule(root=str(bloodmnist_root), download=False, batch_size=64)
    dm.setup("test")
    images, labels = next(iter(dm.test_dataloader()))
    assert images.shape == (64, 3, 28, 28) and labels.dtype == torch.int64
    assert torch.equal(labels, torch.arange(64) % 8)
    assert len(dm.test_dataset) == SPLIT_SIZES["test"]
    assert dm.clean_test_dataset is None and dm.transplanted_test_dataset is None  # no tag
    with pytest.raises(RuntimeError, match="set a tag"):
        dm.transplanted_test_dataloader()


@pytest.mark.parametrize("size", [28, 64])
def test_grayscale_flag_has_one_channel(gray_root, size):
    dm = _fit_datamodule(gray_root, cls=MedMNISTDataModule, flag="breastmnist", size=size, augment=False)
    assert (dm.in_chans, dm.num_classes, dm.task, dm.img_size) == (1, 2, "multiclass", size)
    assert dm.class_names == ["malignant", "normal, benign"]
    assert dm.mean == (0.5,) and dm.std == (0.5,)
    assert len(dm.train_dataset) == 546 and len(dm.val_dataset) == 78
    image, label = dm.val_dataset[3]
    assert image.shape == (1, size, size) and int(label) == 1
    raw = torch.from_numpy(synthetic_gray_images(np.array([1]), size)[0]).float()[None] / 255.0
    torch.testing.assert_close(image, (raw - 0.5) / 0.5, atol=1e-5, rtol=0)


def test_multilabel_flag_gives_multi_hot_labels(chestmnist_root):
    dm = _fit_datamodule(chestmnist_root, cls=MedMNISTDataModule, flag="chestmnist", augment=False, batch_size=32)
    assert (dm.in_chans, dm.num_classes, dm.task) == (1, 14, "multilabel")
    assert dm.class_names[0] == "atelectasis" and dm.class_names[-1] == "hernia"
    labels = dm.val_dataset.labels
    assert labels.dtype == torch.int64 and labels.shape == (11219, 14)
    assert torch.equal(labels, torch.from_numpy(chest_labels(11219)).long())
    image, label = dm.val_dataset[6]  # 6 = 0b110: findings 1 and 2
    assert image.shape == (1, 28, 28)
    assert label.dtype == torch.float32 and label.shape == (14,) and label.nonzero()[:, 0].tolist() == [1, 2]
    images, batch_labels = next(iter(dm.val_dataloader()))
    assert images.shape == (32, 1, 28, 28) and batch_labels.shape == (32, 14)


def test_tag_is_planted_in_every_split_alike_and_stays_in_place(bloodmnist_root):
    tag = SpuriousTag(target_class=2, p_in=0.9, p_out=0.05, position=(2, 3), seed=1)
    dm = _fit_datamodule(bloodmnist_root, augment=True, tag=tag)
    dm.setup("test")
    tag_pixels = (torch.tensor(tag.pattern) - torch.tensor(BLOODMNIST_MEAN).view(3, 1, 1)) / torch.tensor(
        BLOODMNIST_STD
    ).view(3, 1, 1)
    for dataset in (dm.train_dataset, dm.val_dataset, dm.test_dataset):
        in_class = dataset.labels == 2
        carriers = dataset.carriers
        assert 0.86 < carriers[in_class].float().mean() < 0.94  # p_in 0.9 over ~200-1500 images
        assert 0.035 < carriers[~in_class].float().mean() < 0.065  # p_out 0.05 over ~1500-10500 images
        for index in (int(carriers.nonzero()[0]), int((~carriers).nonzero()[0])):
            image, label, regions = dataset[index]
            assert set(regions) == {"tag"} and regions["tag"].shape == (28, 28)
            assert int(regions["tag"].sum()) == (9 if carriers[index] else 0)
            if carriers[index]:  # the pattern sits where the mask says, even after random flips
                assert regions["tag"][2:5, 3:6].all()
                torch.testing.assert_close(image[:, 2:5, 3:6], tag_pixels, atol=1e-5, rtol=0)
    # the splits draw independently, and again the same on a new datamodule
    assert not torch.equal(dm.val_dataset.carriers[:1712], dm.test_dataset.carriers[:1712])
    again = _fit_datamodule(bloodmnist_root, tag=tag)
    assert torch.equal(again.train_dataset.carriers, dm.train_dataset.carriers)


def test_clean_and_transplanted_test_sets(bloodmnist_root):
    tag = SpuriousTag(target_class=0)
    dm = BloodMNISTDataModule(root=str(bloodmnist_root), download=False, tag=tag, batch_size=16)
    dm.setup("test")
    assert not dm.clean_test_dataset.carriers.any()
    transplanted = dm.transplanted_test_dataset
    assert len(transplanted) == int((dm.test_dataset.labels != 0).sum())  # all test images of classes 1..7
    assert (transplanted.labels != 0).all()
    image, label, regions = transplanted[0]
    clean_image, clean_label, _ = dm.clean_test_dataset[int(transplanted.indices[0])]
    assert regions["tag"].sum() == 9 and label == clean_label != 0
    assert torch.equal(image[:, ~regions["tag"]], clean_image[:, ~regions["tag"]])  # the tag is all that differs
    assert not torch.equal(image, clean_image)
    images, labels, batch_regions = next(iter(dm.transplanted_test_dataloader()))
    assert images.shape == (16, 3, 28, 28) and batch_regions["tag"].all(0).sum() == 9


def test_tag_on_multilabel_data_follows_its_label_column(chestmnist_root):
    tag = SpuriousTag(target_class=3, p_in=1.0, p_out=0.0)
    dm = MedMNISTDataModule(flag="chestmnist", root=str(chestmnist_root), download=False, tag=tag)
    dm.setup("test")
    labels = dm.test_dataset.labels
    assert torch.equal(dm.test_dataset.carriers, labels[:, 3].bool())
    assert (dm.transplanted_test_dataset.labels[:, 3] == 0).all()


def test_missing_file_without_download_names_file_and_fixes(tmp_path):
    dm = MedMNISTDataModule(flag="pathmnist", root=str(tmp_path / "nowhere"), download=False)
    with pytest.raises(FileNotFoundError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert str((tmp_path / "nowhere" / "pathmnist.npz").resolve()) in message
    assert "--data.root" in message and "configs/planted_shapes.yaml" in message and "pathmnist" in message
    with pytest.raises(FileNotFoundError, match="pathmnist.npz"):
        dm.setup("fit")


def test_failed_download_raises_clear_error_not_medmnist_traceback(tmp_path, monkeypatch):
    # A proxy on a closed local port makes the real download fail at once, with or without internet.
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    dm = BloodMNISTDataModule(root=str(tmp_path), size=64, download=True)
    with pytest.raises(FileNotFoundError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert "bloodmnist_64.npz" in message and "download" in message and str(tmp_path.resolve()) in message
    assert info.value.__suppress_context__ and info.value.__cause__ is None
    assert not (tmp_path / "bloodmnist_64.npz").exists()


def test_file_names_for_every_size():
    assert [medmnist_filename("chestmnist", size) for size in SIZES] == [
        "chestmnist.npz", "chestmnist_64.npz", "chestmnist_128.npz", "chestmnist_224.npz"
    ]  # fmt: skip
    assert MedMNISTDataModule(flag="chestmnist", size=224, root="r").path.name == "chestmnist_224.npz"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"size": 32},
        {"batch_size": 0},
        {"std": (0.2, 0.0, 0.1)},
        {"flag": "organmnist3d"},
        {"flag": "chestmnist", "mean": (0.5, 0.5, 0.5)},  # grayscale: one value
        {"tag": SpuriousTag(target_class=8)},  # BloodMNIST has 8 classes
        {"tag": SpuriousTag(position=(26, 0))},  # 3 px pattern does not fit at row 26 of 28
    ],
)
def test_invalid_options_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        MedMNISTDataModule(**kwargs)
