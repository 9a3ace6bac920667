"""The images' normalisation: the per-channel ``mean`` and ``std`` that map pixels in [0, 1] to model inputs.

A model's images are usually normalised, ``inputs = (pixels - mean) / std``. Whatever needs pixels
(overlays, the transplant test's pasted tag, image properties, a correction's paste) goes through one
:class:`Normalisation`: its :meth:`~Normalisation.to_pixels` and :meth:`~Normalisation.from_pixels`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = ["Normalisation"]


@dataclass(frozen=True)
class Normalisation:
    """Per-channel normalisation of a model's images: ``inputs = (pixels - mean) / std``, pixels in [0, 1].

    Attributes:
        mean: the per-channel means subtracted (one value: every channel's), pixel units.
        std: the per-channel standard deviations divided by, as many values as ``mean``, each > 0.

    Example:
        >>> norm = Normalisation(mean=(0.5,), std=(0.25,))
        >>> norm.to_pixels(torch.tensor([[[[-2.0, 0.0, 2.0]]]])).tolist()
        [[[[0.0, 0.5, 1.0]]]]
        >>> norm.from_pixels(torch.tensor([[[[0.0, 1.0]]]])).tolist()
        [[[[-2.0, 2.0]]]]
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __post_init__(self) -> None:
        for name in ("mean", "std"):
            values = getattr(self, name)
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
                raise TypeError(f"normalisation.{name} must be a list of 1 or C numbers, got {values!r}")
            if not values:
                raise ValueError(f"normalisation.{name} must be a list of 1 or C numbers, got none")
            if any(isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) for v in values):
                raise ValueError(f"normalisation.{name} must hold finite numbers, got {values!r}")
            object.__setattr__(self, name, tuple(float(v) for v in values))
        if len(self.mean) != len(self.std):
            raise ValueError(
                f"normalisation.mean and normalisation.std need as many values (1, or one per channel); got "
                f"{len(self.mean)} and {len(self.std)}: mean={self.mean}, std={self.std}"
            )
        if min(self.std) <= 0:
            raise ValueError(f"normalisation.std must be positive, got {self.std}")

    @classmethod
    def given(
        cls, value: Normalisation | Mapping[str, Any] | None, option: str = "normalisation"
    ) -> Normalisation | None:
        """A front door's ``option``: a Normalisation, a mapping ``{mean: [...], std: [...]}`` (a YAML config's, a
        checkpoint's) or None (kept).

        >>> Normalisation.given({"mean": [0.5], "std": [0.5]})
        Normalisation(mean=(0.5,), std=(0.5,))
        """
        if value is None or isinstance(value, Normalisation):
            return value
        if isinstance(value, Mapping):
            if set(value) != {"mean", "std"}:
                raise ValueError(f"{option} takes the keys mean and std, got {sorted(value)}")
            return cls(mean=value["mean"], std=value["std"])
        raise TypeError(
            f"{option} must be a Normalisation(mean=..., std=...), a mapping {{mean: [...], std: [...]}} or None; "
            f"got {type(value).__name__}"
        )

    @classmethod
    def of(cls, source: Any, owner: str = "the datamodule") -> Normalisation | None:
        """The normalisation ``source`` declares with ``mean`` and ``std`` attributes (a datamodule), or None
        when it has neither.

        >>> class Data: mean, std = (0.5, 0.5, 0.5), (0.2, 0.2, 0.2)
        >>> Normalisation.of(Data()).std
        (0.2, 0.2, 0.2)
        """
        mean, std = getattr(source, "mean", None), getattr(source, "std", None)
        if mean is None and std is None:
            return None
        if mean is None or std is None:
            raise ValueError(f"{owner} has only one of mean and std: give both, or the callback's normalisation")
        return cls(mean=tuple(mean), std=tuple(std))

    @property
    def channels(self) -> int:
        """How many values it holds per statistic: 1 (every channel alike) or the images' channels."""
        return len(self.mean)

    def check_channels(self, channels: int, option: str = "normalisation") -> None:
        """Refuse a normalisation of neither 1 nor ``channels`` values (``option`` names where it came from)."""
        if self.channels not in (1, channels):
            raise ValueError(
                f"{option}: {self.channels} values of mean and std, but the images have {channels} channels: give 1 or "
                f"{channels} values"
            )

    def to_pixels(self, inputs: Tensor) -> Tensor:
        """Pixels ``inputs * std + mean`` of model inputs (..., C, H, W), in their dtype and on their device."""
        mean, std = self._column(self.mean, inputs), self._column(self.std, inputs)
        return inputs * std + mean

    def from_pixels(self, pixels: Tensor) -> Tensor:
        """Model inputs ``(pixels - mean) / std`` of pixels (..., C, H, W), in their dtype and on their device."""
        mean, std = self._column(self.mean, pixels), self._column(self.std, pixels)
        return (pixels - mean) / std

    @staticmethod
    def _column(values: tuple[float, ...], like: Tensor) -> Tensor:
        """``values`` as a (C, 1, 1) tensor of ``like``'s dtype and device."""
        return torch.tensor(values, dtype=like.dtype, device=like.device).reshape(-1, 1, 1)
