"""What :class:`~gradskip_lightning.GradSkipCallback` checks and reads from a Lightning ``Trainer``."""

from __future__ import annotations

from lightning.pytorch import Trainer
from lightning.pytorch.trainer.states import TrainerFn
from torch.utils.data import Dataset

__all__ = ["loader_dataset", "check_precision", "HALF_PRECISIONS"]


def loader_dataset(trainer: Trainer) -> Dataset:
    """The dataset of the Trainer's (first) validation dataloader, or of its training one without."""
    if trainer.state.fn == TrainerFn.FITTING and trainer.val_dataloaders is None:
        # Internal API, kept on purpose: nothing public loads the fit's validation dataloaders before
        # Lightning's own first validation; tests/callbacks/test_private_apis.py fails if it goes.
        trainer.fit_loop.epoch_loop.val_loop.setup_data()
    loaders = trainer.val_dataloaders or trainer.train_dataloader
    loader = loaders[0] if isinstance(loaders, (list, tuple)) else loaders
    dataset = getattr(loader, "dataset", None)
    if dataset is None:
        raise RuntimeError("GradSkipCallback found no probe images: pass probe_images or use a datamodule")
    return dataset


#: Trainer precisions whose weights are half precision: the explanation's gradients and perturbation
#: curves are not computed in them. ``"64-true"`` is explained in float64, the mixed ones in float32.
HALF_PRECISIONS = {"bf16-true": "bf16-mixed", "16-true": "16-mixed"}


def check_precision(trainer: Trainer) -> None:
    """Refuse a Trainer ``precision`` the explanation cannot run in, naming the fix."""
    precision = str(trainer.precision)
    if precision in HALF_PRECISIONS:
        raise ValueError(
            f"GradSkipCallback cannot explain a model trained with precision={precision!r}: its weights are half "
            "precision, in which relevance gradients and perturbation curves underflow. Use "
            f"precision={HALF_PRECISIONS[precision]!r} (float32 weights, half-precision compute) or remove the callback"
        )
