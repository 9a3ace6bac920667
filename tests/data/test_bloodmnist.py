"""BloodMNISTDataModule on the real medmnist loader, reading a generated file of the official sizes."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gradskip_lightning.data import BloodMNISTDataModule
from gradskip_lightning.data.bloodmnist import BLOODMNIST_MEAN, BLOODMNIST_STD
from tests.data.conftest import SPLIT_SIZES, synthetic_bloodmnist_images


def _expected_image(label: int) -> torch.Tensor:
    """The normalised (3, 28, 28) tensor the loader must return for an un-augmented image."""
    raw = torch.from_numpy(synthetic_bloodmnist_images(np.array([label]))[0]).permute(2, 0, 1) / 255.0
    return (raw - torch.tensor(BLOODMNIST_MEAN).view(3, 1, 1)) / torch.tensor(BLOODMNIST_STD).view(3, 1, 1)


def _fit_datamodule(root, **kwargs) -> BloodMNISTDataModule:
    """prepare_data + setup("fit") as the Trainer does, on the file in ``root``."""
    dm = BloodMNISTDataModule(root=str(root), download=False, **kwargs)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_fit_splits_have_official_sizes_labels_and_normalised_images(bloodmnist_root):
    dm = _fit_datamodule(bloodmnist_root, augment=False)
    assert (dm.num_classes, dm.img_size) == (8, 28)
    assert dm.class_names[0] == "basophil" and dm.class_names[-1] == "platelet" and len(dm.class_names) == 8
    for dataset, split in ((dm.train_dataset, "train"), (dm.val_dataset, "val")):
        n = SPLIT_SIZES[split]
        assert len(dataset) == n
        assert dataset.labels.dtype == torch.int64 and dataset.labels.shape == (n,)
        assert torch.equal(dataset.labels, torch.arange(n) % 8)
    image, label = dm.val_dataset[13]
    assert image.dtype == torch.float32 and image.shape == (3, 28, 28)
    assert label.dtype == torch.int64 and label.ndim == 0 and int(label) == 13 % 8
    torch.testing.assert_close(image, _expected_image(13 % 8), atol=1e-5, rtol=0)


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


def test_missing_file_without_download_names_file_and_fixes(tmp_path):
    dm = BloodMNISTDataModule(root=str(tmp_path / "nowhere"), download=False)
    with pytest.raises(FileNotFoundError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert str((tmp_path / "nowhere" / "bloodmnist.npz").resolve()) in message
    assert "--data.root" in message and "configs/planted_shapes.yaml" in message
    with pytest.raises(FileNotFoundError, match="bloodmnist.npz"):
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


@pytest.mark.parametrize("kwargs", [{"size": 32}, {"batch_size": 0}, {"std": (0.2, 0.0, 0.1)}])
def test_invalid_options_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        BloodMNISTDataModule(**kwargs)
