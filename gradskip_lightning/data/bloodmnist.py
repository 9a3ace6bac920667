"""BloodMNIST (MedMNIST v2) through the real ``medmnist.BloodMNIST`` loader."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import medmnist
import numpy as np
import torch
from medmnist import INFO
from torch import Tensor
from torch.utils.data import Dataset
from torchvision import transforms as T

from gradskip_lightning.data.base import ImageClassificationDataModule

SIZES = (28, 64, 128, 224)
#: Per-channel mean and std of the BloodMNIST training images (28 px, pixel values in [0, 1]).
BLOODMNIST_MEAN = (0.796, 0.660, 0.697)
BLOODMNIST_STD = (0.216, 0.245, 0.093)
OFFLINE_CONFIG = "configs/planted_shapes.yaml"


def bloodmnist_filename(size: int) -> str:
    """MedMNIST's file name for a size: ``bloodmnist.npz`` (28 px) or ``bloodmnist_<size>.npz``."""
    return "bloodmnist.npz" if size == 28 else f"bloodmnist_{size}.npz"


def _label_to_tensor(target: np.ndarray) -> Tensor:
    """medmnist's label array of shape (1,) -> int64 scalar tensor."""
    return torch.tensor(int(target[0]), dtype=torch.int64)


class MedMNISTSplit(Dataset):
    """One split of a medmnist 2D dataset: items ``(image (C, H, W) float32, label int64 scalar)``.

    Args:
        dataset: a medmnist dataset built with a transform returning tensors.
    """

    def __init__(self, dataset: medmnist.dataset.MedMNIST2D) -> None:
        self.dataset = dataset
        self.labels = torch.from_numpy(dataset.labels[:, 0].astype(np.int64))  # (N,)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return self.dataset[index]


class BloodMNISTDataModule(ImageClassificationDataModule):
    """BloodMNIST: 8 classes of blood-cell microscopy images, RGB, 28/64/128/224 px.

    The file ``<root>/bloodmnist.npz`` (or ``bloodmnist_<size>.npz``) is used as it is when present;
    when it is missing and ``download`` is true, medmnist downloads it there (on rank 0). When it
    is missing and cannot be downloaded, ``prepare_data``/``setup`` raise a ``FileNotFoundError``
    that names the file and the fixes.

    Args:
        root: folder holding the MedMNIST ``.npz`` file.
        size: image side in pixels, one of 28, 64, 128, 224.
        download: download the file into ``root`` when it is missing.
        augment: random horizontal and vertical flips of the training images.
        mean: per-channel normalisation mean (default: BloodMNIST training-set statistics).
        std: per-channel normalisation standard deviation.
        batch_size: images per batch.
        num_workers: DataLoader worker processes.
    """

    def __init__(
        self,
        root: str = "data",
        size: int = 28,
        download: bool = True,
        augment: bool = True,
        mean: tuple[float, float, float] = BLOODMNIST_MEAN,
        std: tuple[float, float, float] = BLOODMNIST_STD,
        batch_size: int = 128,
        num_workers: int = 0,
    ) -> None:
        super().__init__(batch_size=batch_size, num_workers=num_workers)
        if size not in SIZES:
            raise ValueError(f"size must be one of {SIZES} (MedMNIST's sizes), got {size}")
        if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
            raise ValueError(f"mean and std need 3 values (RGB) with std > 0, got mean={mean}, std={std}")
        self.save_hyperparameters()
        self.root = Path(root)
        self.download = download
        self.augment = augment
        self.img_size = size
        self.mean = tuple(mean)
        self.std = tuple(std)
        labels = INFO["bloodmnist"]["label"]
        self.num_classes = len(labels)
        self.class_names = [labels[str(k)] for k in range(self.num_classes)]

    @property
    def path(self) -> Path:
        """The ``.npz`` file this datamodule reads."""
        return self.root / bloodmnist_filename(self.img_size)

    def prepare_data(self) -> None:
        """Download the file when it is missing and ``download`` is set (rank 0 only)."""
        if self.path.exists():
            return
        if not self.download:
            raise self._missing_file_error("and download=False")
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            medmnist.BloodMNIST(split="train", download=True, root=str(self.root), size=self.img_size)
        except RuntimeError:  # medmnist's "Automatic download failed! ..." (its traceback is not useful)
            raise self._missing_file_error(f"and the download from {self._url} failed") from None

    def setup(self, stage: str) -> None:
        if not self.path.exists():
            reason = "call prepare_data() to download it" if self.download else "and download=False"
            raise self._missing_file_error(reason)
        if stage == "fit":
            self.train_dataset = self._split("train", self._transform(train=self.augment))
        if stage in ("fit", "validate"):
            self.val_dataset = self._split("val", self._transform(train=False))
        if stage == "test":
            self.test_dataset = self._split("test", self._transform(train=False))

    def _split(self, split: str, transform: Callable) -> MedMNISTSplit:
        dataset = medmnist.BloodMNIST(
            split=split,
            transform=transform,
            target_transform=_label_to_tensor,
            download=False,
            as_rgb=True,
            root=str(self.root),
            size=self.img_size,
        )
        return MedMNISTSplit(dataset)

    def _transform(self, train: bool) -> Callable:
        """PIL image -> normalised (3, size, size) float32 tensor, with augmentation if ``train``."""
        steps: list[Callable] = []
        if train:
            steps += [T.RandomHorizontalFlip(), T.RandomVerticalFlip()]
        steps += [T.ToTensor(), T.Normalize(self.mean, self.std)]
        return T.Compose(steps)

    @property
    def _url(self) -> str:
        return INFO["bloodmnist"]["url" if self.img_size == 28 else f"url_{self.img_size}"]

    def _missing_file_error(self, reason: str) -> FileNotFoundError:
        return FileNotFoundError(
            f"BloodMNIST file not found: {self.path.resolve()} ({reason}).\n"
            f"Fix it in one of these ways:\n"
            f"  - copy {self.path.name} (MedMNIST v2: {self._url}) into the folder "
            f"{self.root.resolve()}, or point root at the folder that holds it "
            f"(python train.py fit --config configs/bloodmnist.yaml --data.root /folder/with/the/file);\n"
            f"  - allow the download (download=True) on a machine with internet access;\n"
            f"  - or train offline on synthetic data, no file needed: python train.py fit --config {OFFLINE_CONFIG}"
        )
