"""Any MedMNIST v2 2D dataset (BloodMNIST by default) through the real ``medmnist`` loaders."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal, get_args

import medmnist
import numpy as np
import torch
from medmnist import INFO
from torch import Tensor
from torchvision import transforms as T

from gradskip_lightning.data.base import SPLITS, ImageClassificationDataModule, LabelledDataset, Task
from gradskip_lightning.shortcuts.tags import SpuriousTag, TagMode

MedMNISTFlag = Literal[
    "pathmnist",
    "chestmnist",
    "dermamnist",
    "octmnist",
    "pneumoniamnist",
    "retinamnist",
    "breastmnist",
    "bloodmnist",
    "tissuemnist",
    "organamnist",
    "organcmnist",
    "organsmnist",
]
FLAGS: tuple[MedMNISTFlag, ...] = get_args(MedMNISTFlag)
SIZES = (28, 64, 128, 224)
#: medmnist's task names -> this project's task (binary and ordinal tasks train as multi-class).
TASKS: dict[str, Task] = {
    "multi-class": "multiclass",
    "binary-class": "multiclass",
    "ordinal-regression": "multiclass",
    "multi-label, binary-class": "multilabel",
}
#: Per-channel mean and std of the BloodMNIST training images (28 px, pixel values in [0, 1]).
BLOODMNIST_MEAN = (0.796, 0.660, 0.697)
BLOODMNIST_STD = (0.216, 0.245, 0.093)
#: Training-set (mean, std) of the flags measured here; other flags default to 0.5 and 0.5 per
#: channel (pixel values [0, 1] -> [-1, 1]).
NORMALISATION: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "bloodmnist": (BLOODMNIST_MEAN, BLOODMNIST_STD),
}
OFFLINE_CONFIG = "configs/planted_shapes.yaml"


def medmnist_filename(flag: str, size: int) -> str:
    """MedMNIST's file name: ``<flag>.npz`` (28 px) or ``<flag>_<size>.npz``.

    Example:
        >>> medmnist_filename("chestmnist", 64)
        'chestmnist_64.npz'
    """
    return f"{flag}.npz" if size == 28 else f"{flag}_{size}.npz"


class MedMNISTSplit(LabelledDataset):
    """One split of a medmnist 2D dataset, normalised, optionally with a spurious tag.

    Items are ``(image (C, H, W) float32 normalised, label)`` without a tag and
    ``(image, label, {"tag": (H, W) bool})`` with one (the mask is all False on items without
    it). Labels: int64 scalar (multi-class) or (C,) float32 multi-hot (multi-label).

    Args:
        dataset: a medmnist dataset whose transform returns (C, H, W) tensors in [0, 1].
        normalise: the normalisation applied after the tag is pasted.
        multilabel: labels are multi-hot rows rather than one class index.
        tag: the spurious tag, or None.
        tag_mode: which items carry the tag (see :data:`~gradskip_lightning.shortcuts.tags.TagMode`).
        stream: the split's number for the tag's draws (0 train, 1 val, 2 test).
    """

    def __init__(
        self,
        dataset: medmnist.dataset.MedMNIST2D,
        normalise: Callable[[Tensor], Tensor],
        multilabel: bool,
        tag: SpuriousTag | None = None,
        tag_mode: TagMode = "sampled",
        stream: int = 0,
    ) -> None:
        self.dataset = dataset
        self.normalise = normalise
        self.multilabel = multilabel
        labels = torch.from_numpy(dataset.labels.astype(np.int64))  # (N, 1) or (N, C) as stored
        self.labels = labels if multilabel else labels[:, 0]  # (N, C) multi-hot or (N,)
        self.tag = tag
        if tag is not None:
            self.carriers = tag.carriers(self.labels, tag_mode, stream)  # (N,) bool
            self._tag_mask = tag.mask(dataset.size, dataset.size)  # (H, W) bool
            self._no_tag = torch.zeros_like(self._tag_mask)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor] | tuple[Tensor, Tensor, dict[str, Tensor]]:
        image, _ = self.dataset[index]
        label = self.labels[index]
        label = label.float() if self.multilabel else label
        if self.tag is None:
            return self.normalise(image), label
        carried = bool(self.carriers[index])
        if carried:
            self.tag.apply(image)
        return self.normalise(image), label, {"tag": self._tag_mask if carried else self._no_tag}


class MedMNISTDataModule(ImageClassificationDataModule):
    """A MedMNIST v2 2D dataset (``flag``) at 28/64/128/224 px, through the real medmnist loader.

    Channels (1 for grayscale flags such as ``chestmnist``, 3 for RGB), class names and the task
    come from ``medmnist.INFO[flag]``: multi-label flags (``chestmnist``: 14 findings) give
    ``task="multilabel"`` and (C,) multi-hot labels; binary and ordinal flags train as multi-class.

    The file ``<root>/<flag>.npz`` (or ``<flag>_<size>.npz``) is used as it is when present; when
    it is missing and ``download`` is true, medmnist downloads it there (on rank 0). When it is
    missing and cannot be downloaded, ``prepare_data``/``setup`` raise a ``FileNotFoundError`` that
    names the file and the fixes.

    Args:
        flag: the MedMNIST dataset, one of :data:`FLAGS`.
        root: folder holding the MedMNIST ``.npz`` file.
        size: image side in pixels, one of 28, 64, 128, 224.
        download: download the file into ``root`` when it is missing.
        augment: random horizontal and vertical flips of the training images (before the tag is
            pasted, so the tag stays in place).
        mean: per-channel normalisation mean; None: the flag's training statistics where
            :data:`NORMALISATION` has them, else 0.5 per channel.
        std: per-channel normalisation standard deviation; None as for ``mean``.
        tag: a spurious tag planted in the train, validation and test splits alike; items then
            carry its mask as ``{"tag": mask}``.
        batch_size: images per batch.
        num_workers: DataLoader worker processes.
    """

    def __init__(
        self,
        flag: MedMNISTFlag = "bloodmnist",
        root: str = "data",
        size: int = 28,
        download: bool = True,
        augment: bool = True,
        mean: tuple[float, ...] | None = None,
        std: tuple[float, ...] | None = None,
        tag: SpuriousTag | None = None,
        batch_size: int = 128,
        num_workers: int = 0,
    ) -> None:
        super().__init__(batch_size=batch_size, num_workers=num_workers)
        if flag not in FLAGS:
            raise ValueError(f"flag must be a MedMNIST 2D dataset, one of {FLAGS}; got {flag!r}")
        if size not in SIZES:
            raise ValueError(f"size must be one of {SIZES} (MedMNIST's sizes), got {size}")
        info = INFO[flag]
        self.in_chans = info["n_channels"]
        default_mean, default_std = NORMALISATION.get(flag, ((0.5,) * self.in_chans, (0.5,) * self.in_chans))
        mean, std = tuple(default_mean if mean is None else mean), tuple(default_std if std is None else std)
        if len(mean) != self.in_chans or len(std) != self.in_chans or min(std) <= 0:
            raise ValueError(
                f"mean and std need {self.in_chans} values ({flag} has {self.in_chans} channels) with std > 0, "
                f"got mean={mean}, std={std}"
            )
        self.save_hyperparameters(ignore="tag")
        self.hparams["tag"] = None if tag is None else asdict(tag)  # plain values: checkpoints load weights_only
        self.flag = flag
        self.root = Path(root)
        self.download = download
        self.augment = augment
        self.img_size = size
        self.mean = mean
        self.std = std
        self.task = TASKS[info["task"]]
        self.num_classes = len(info["label"])
        self.class_names = [info["label"][str(k)] for k in range(self.num_classes)]
        if tag is not None:
            tag.check_fits(size, size)
            if tag.target_class >= self.num_classes:
                raise ValueError(f"tag.target_class must be < {self.num_classes} ({flag}), got {tag.target_class}")
        self.tag = tag

    @property
    def path(self) -> Path:
        """The ``.npz`` file this datamodule reads."""
        return self.root / medmnist_filename(self.flag, self.img_size)

    @property
    def _dataset_class(self) -> type[medmnist.dataset.MedMNIST2D]:
        return getattr(medmnist, INFO[self.flag]["python_class"])

    def prepare_data(self) -> None:
        """Download the file when it is missing and ``download`` is set (rank 0 only)."""
        if self.path.exists():
            return
        if not self.download:
            raise self._missing_file_error("and download=False")
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self._dataset_class(split="train", download=True, root=str(self.root), size=self.img_size)
        except RuntimeError:  # medmnist's "Automatic download failed! ..." (its traceback is not useful)
            raise self._missing_file_error(f"and the download from {self._url} failed") from None

    def setup(self, stage: str) -> None:
        if not self.path.exists():
            reason = "call prepare_data() to download it" if self.download else "and download=False"
            raise self._missing_file_error(reason)
        super().setup(stage)

    def make_split(self, split: str, tag_mode: TagMode) -> MedMNISTSplit:
        """One split, read by medmnist's own dataset class; the tag as ``tag_mode`` says."""
        flips = split == "train" and self.augment
        steps: list[Callable] = [T.RandomHorizontalFlip(), T.RandomVerticalFlip()] if flips else []
        dataset = self._dataset_class(
            split=split,
            transform=T.Compose([*steps, T.ToTensor()]),
            download=False,
            root=str(self.root),
            size=self.img_size,
        )
        return MedMNISTSplit(
            dataset,
            T.Normalize(self.mean, self.std),
            multilabel=self.task == "multilabel",
            tag=self.tag,
            tag_mode=tag_mode,
            stream=SPLITS.index(split),
        )

    @property
    def _url(self) -> str:
        return INFO[self.flag]["url" if self.img_size == 28 else f"url_{self.img_size}"]

    def _missing_file_error(self, reason: str) -> FileNotFoundError:
        return FileNotFoundError(
            f"MedMNIST file not found: {self.path.resolve()} ({reason}).\n"
            f"Fix it in one of these ways:\n"
            f"  - copy {self.path.name} (MedMNIST v2 {self.flag}: {self._url}) into the folder "
            f"{self.root.resolve()}, or point root at the folder that holds it "
            f"(python train.py fit --config <your config> --data.root /folder/with/the/file);\n"
            f"  - allow the download (download=True) on a machine with internet access;\n"
            f"  - or train offline on synthetic data, no file needed: python train.py fit --config {OFFLINE_CONFIG}"
        )


class BloodMNISTDataModule(MedMNISTDataModule):
    """:class:`MedMNISTDataModule` with ``flag="bloodmnist"``: 8 classes of blood-cell microscopy, RGB.

    Args:
        **kwargs: every argument of :class:`MedMNISTDataModule` but ``flag``.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(flag="bloodmnist", **kwargs)
