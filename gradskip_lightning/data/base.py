"""What every image-classification datamodule of the project shares: loaders and the data interface."""
from __future__ import annotations

from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset


class ImageClassificationDataModule(LightningDataModule):
    """Base for the project's datamodules.

    Subclasses set ``num_classes``, ``class_names``, ``img_size``, ``mean``, ``std`` in ``__init__``
    and ``train_dataset`` / ``val_dataset`` / ``test_dataset`` in ``setup``. Each dataset yields
    ``(image (C, H, W) float32 normalised, label int64 scalar, ...)`` and has ``labels``, an int64
    tensor (N,) of all its labels.

    Args:
        batch_size: images per batch, for every split.
        num_workers: DataLoader worker processes (0 = load in the main process).
    """

    num_classes: int
    class_names: list[str]
    img_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __init__(self, batch_size: int = 128, num_workers: int = 0) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.train_dataset: Dataset | None = None
        self.val_dataset: Dataset | None = None
        self.test_dataset: Dataset | None = None

    def _loader(self, dataset: Dataset | None, name: str, shuffle: bool) -> DataLoader:
        if dataset is None:
            raise RuntimeError(f"{type(self).__name__}.{name} is not set: call setup() first")
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
