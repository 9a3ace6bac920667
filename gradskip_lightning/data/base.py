"""What every image-classification datamodule of the project shares: loaders, splits and the data interface."""

from __future__ import annotations

from typing import Literal

from lightning.pytorch import LightningDataModule
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from gradskip_lightning.shortcuts.tags import SpuriousTag, TagMode

Task = Literal["multiclass", "multilabel", "segmentation"]
SPLITS = ("train", "val", "test")


class LabelledDataset(Dataset):
    """A map-style dataset with its ``labels`` tensor: (N,) int64 classes or (N, C) multi-hot,
    what stratified probe drawing and the tag's splits read without loading images."""

    labels: Tensor

    def __len__(self) -> int:
        raise NotImplementedError


class LabelledSubset(LabelledDataset):
    """The items of ``dataset`` at ``indices``, with their ``labels`` ((n,) or (n, C)).

    Args:
        dataset: a dataset with a ``labels`` tensor.
        indices: (n,) int64 positions in ``dataset``.
    """

    def __init__(self, dataset: LabelledDataset, indices: Tensor) -> None:
        self.dataset = dataset
        self.indices = indices
        self.labels = dataset.labels[indices]

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> tuple:
        return self.dataset[int(self.indices[index])]


class ImageClassificationDataModule(LightningDataModule):
    """Base for the project's datamodules.

    Subclasses set ``num_classes``, ``class_names``, ``img_size``, ``mean``, ``std`` (and ``task``,
    ``in_chans``, ``tag`` when not the defaults) in ``__init__`` and implement :meth:`make_split`.
    Each dataset yields ``(image (C, H, W) float32 normalised, label, ...)`` and has ``labels``: an
    int64 tensor (N,) of class indices (``task="multiclass"``; item labels int64 scalars) or (N, C)
    multi-hot (``task="multilabel"``; item labels (C,) float32 multi-hot). Segmentation datamodules
    (``task="segmentation"``) yield ``(image, label_map (H, W) int64)`` instead, class 0 the
    background, and their ``labels`` are (N, C) multi-hot of the classes present besides it.

    With a :class:`~gradskip_lightning.shortcuts.tags.SpuriousTag`, the train, validation and test splits
    carry it alike, and ``setup("test")`` also builds ``clean_test_dataset`` (the test split, no tag
    at all) and ``transplanted_test_dataset`` (the test images of the other classes, every one with
    the tag pasted on): the spurious score is read on the latter.

    Args:
        batch_size: images per batch, for every split.
        num_workers: DataLoader worker processes (0 = load in the main process).
    """

    num_classes: int
    class_names: list[str]
    img_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    in_chans: int = 3
    task: Task = "multiclass"
    tag: SpuriousTag | None = None

    def __init__(self, batch_size: int = 128, num_workers: int = 0) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.train_dataset: LabelledDataset | None = None
        self.val_dataset: LabelledDataset | None = None
        self.test_dataset: LabelledDataset | None = None
        self.clean_test_dataset: LabelledDataset | None = None
        self.transplanted_test_dataset: LabelledDataset | None = None

    def make_split(self, split: str, tag_mode: TagMode) -> LabelledDataset:
        """The dataset of ``split`` ("train", "val" or "test") with the tag put on as ``tag_mode`` says."""
        raise NotImplementedError

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self.train_dataset = self.make_split("train", "sampled")
        if stage in ("fit", "validate"):
            self.val_dataset = self.make_split("val", "sampled")
        if stage == "test":
            self.test_dataset = self.make_split("test", "sampled")
            if self.tag is not None:
                self.clean_test_dataset = self.make_split("test", "none")
                transplanted = self.make_split("test", "always")
                others = (~self.tag.in_class(transplanted.labels)).nonzero()[:, 0]
                self.transplanted_test_dataset = LabelledSubset(transplanted, others)

    def _loader(self, dataset: Dataset | None, name: str, shuffle: bool) -> DataLoader:
        if dataset is None:
            hint = "set a tag and call setup('test')" if "_test_" in name else "call setup() first"
            raise RuntimeError(f"{type(self).__name__}.{name} is not set: {hint}")
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_dataset, "train_dataset", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_dataset, "val_dataset", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_dataset, "test_dataset", shuffle=False)

    def clean_test_dataloader(self) -> DataLoader:
        """The test split without any tag (needs a tag and ``setup("test")``)."""
        return self._loader(self.clean_test_dataset, "clean_test_dataset", shuffle=False)

    def transplanted_test_dataloader(self) -> DataLoader:
        """Test images of the other classes, all tagged (needs a tag and ``setup("test")``)."""
        return self._loader(self.transplanted_test_dataset, "transplanted_test_dataset", shuffle=False)
