"""A spurious tag: a small fixed pixel pattern (like a scanner stamp) that co-occurs with one class.

A :class:`SpuriousTag` is pasted at a fixed place on images of its class with probability ``p_in``
and on images of the other classes with probability ``p_out``, identically in the training,
validation and test splits, so a model can learn it as a shortcut. Which items carry it is
deterministic: it depends only on the tag's seed, the split's stream number and the item's index.
With ``p_out == p_in`` the tag carries no label information (a negative control).

Three ways to put a tag on a split (:data:`TagMode`):

- ``"sampled"``: each item carries it with probability ``p_in`` or ``p_out`` (train, val, test);
- ``"none"``: no item carries it (the clean test set);
- ``"always"``: every item carries it (the transplanted test set: images of the other classes).

:func:`spurious_score` reads a model's predictions on the transplanted set: the fraction predicted
as the tag's class. Adebayo et al. (ICLR 2022, "Post hoc explanations may be ineffective for
detecting unknown spurious correlation") call a model spurious when it is at least
:data:`SPURIOUS_THRESHOLD`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from gradskip_lightning.shortcuts.regions import Region, paste

TagMode = Literal["sampled", "none", "always"]
TAG_MODES: tuple[TagMode, ...] = ("sampled", "none", "always")
#: Spurious score at or above which Adebayo et al. (2022) call a model spurious.
SPURIOUS_THRESHOLD = 0.85
#: A 3 x 3 black-and-white checkerboard, pixel values in [0, 1].
CHECKERBOARD = ((1.0, 0.0, 1.0), (0.0, 1.0, 0.0), (1.0, 0.0, 1.0))
_STREAM_STRIDE = 1_000_003  # draw generator seed = seed * _STREAM_STRIDE + stream


@dataclass(frozen=True)
class SpuriousTag:
    """A fixed pattern pasted at a fixed place, mostly on images of one class.

    Args:
        target_class: the class the tag goes with (for multi-label data: images with that label).
        p_in: probability that an image of ``target_class`` carries the tag.
        p_out: probability that an image of another class carries it; ``p_out == p_in`` makes a
            negative control (the tag says nothing about the label).
        pattern: (h, w) pixel values in [0, 1], the same in every channel; default a 3 x 3
            black-and-white checkerboard.
        position: (row, column) of the pattern's top-left pixel.
        seed: seed of the draws that decide which items carry the tag.

    Example:
        >>> tag = SpuriousTag(target_class=1, p_in=1.0, p_out=0.0, pattern=((1.0, 0.0),), position=(0, 2))
        >>> tag.apply(torch.full((1, 2, 4), 0.5))[0]
        tensor([[0.5000, 0.5000, 1.0000, 0.0000],
                [0.5000, 0.5000, 0.5000, 0.5000]])
        >>> tag.draw(torch.tensor([True, False, True]), stream=0).tolist()
        [True, False, True]
    """

    target_class: int = 0
    p_in: float = 0.9
    p_out: float = 0.02
    pattern: tuple[tuple[float, ...], ...] = CHECKERBOARD
    position: tuple[int, int] = (0, 0)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.target_class < 0:
            raise ValueError(f"target_class must be >= 0, got {self.target_class}")
        for name in ("p_in", "p_out"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {getattr(self, name)}")
        widths = {len(row) for row in self.pattern}
        if not self.pattern or len(widths) != 1 or 0 in widths:
            raise ValueError(
                f"pattern must be a non-empty rectangle of pixel values (rows of equal length), got {self.pattern}"
            )
        if not all(0.0 <= value <= 1.0 for row in self.pattern for value in row):
            raise ValueError(f"pattern values must be pixel values in [0, 1], got {self.pattern}")
        if len(self.position) != 2 or min(self.position) < 0:
            raise ValueError(f"position must be (row, column) >= 0, got {self.position}")
        # Tuples from YAML arrive as lists: store tuples so tags compare and hash as values.
        object.__setattr__(self, "pattern", tuple(tuple(float(v) for v in row) for row in self.pattern))
        object.__setattr__(self, "position", tuple(int(v) for v in self.position))

    @property
    def is_control(self) -> bool:
        """True when the tag is as frequent in every class (it carries no label information)."""
        return self.p_in == self.p_out

    @property
    def box(self) -> tuple[int, int, int, int]:
        """(top, left, bottom, right) of the pattern, bottom and right exclusive, in pixels."""
        top, left = self.position
        return top, left, top + len(self.pattern), left + len(self.pattern[0])

    @property
    def region(self) -> Region:
        """The pattern's pixels: its whole box."""
        return Region.of_box(*self.box)

    def check_fits(self, height: int, width: int) -> None:
        """Raise a ValueError when the pattern does not fit in a (height, width) image."""
        _, _, bottom, right = self.box
        if bottom > height or right > width:
            raise ValueError(
                f"the tag (pattern {len(self.pattern)} x {len(self.pattern[0])} px at {self.position}) does not fit "
                f"in {height} x {width} px images: move its position or use a smaller pattern"
            )

    def mask(self, height: int, width: int) -> Tensor:
        """(height, width) bool: the tag's pixels."""
        self.check_fits(height, width)
        return self.region.pixels(height, width)

    def apply(self, image: Tensor) -> Tensor:
        """Paste the pattern into ``image`` (C, H, W), pixel values in [0, 1], in place; returns it."""
        self.check_fits(*image.shape[-2:])
        return image.copy_(paste(image, torch.tensor(self.pattern, dtype=image.dtype), self.region))

    def draw(self, in_class: Tensor, stream: int) -> Tensor:
        """Which items carry the tag under ``"sampled"``: (N,) bool.

        Args:
            in_class: (N,) bool, True for items of ``target_class``.
            stream: a number per split (e.g. 0 train, 1 val, 2 test) so splits draw independently.

        Returns:
            (N,) bool; item ``i`` depends only on ``seed``, ``stream``, ``i`` and ``in_class[i]``.
        """
        generator = torch.Generator().manual_seed(self.seed * _STREAM_STRIDE + stream)
        uniform = torch.rand(in_class.shape, generator=generator)
        return uniform < torch.where(in_class, self.p_in, self.p_out)

    def in_class(self, labels: Tensor) -> Tensor:
        """Labels (N,) int (multi-class) or (N, C) multi-hot (multi-label) -> (N,) bool: of ``target_class``."""
        if labels.ndim == 2:
            if self.target_class >= labels.shape[1]:
                raise ValueError(f"target_class {self.target_class} out of range for {labels.shape[1]} labels")
            return labels[:, self.target_class].bool()
        return labels == self.target_class

    def carriers(self, labels: Tensor, mode: TagMode, stream: int) -> Tensor:
        """Which items of a split carry the tag: (N,) bool, for labels (N,) or (N, C) and a :data:`TagMode`."""
        if mode not in TAG_MODES:
            raise ValueError(f"tag mode must be one of {TAG_MODES}, got {mode!r}")
        in_class = self.in_class(labels)
        if mode == "sampled":
            return self.draw(in_class, stream)
        return torch.full_like(in_class, mode == "always")


def spurious_score(logits: Tensor, target_class: int, multilabel: bool = False) -> float:
    """Fraction of (transplanted) images predicted as the tag's class.

    Args:
        logits: (N, K) model outputs on images of the other classes with the tag pasted on.
        target_class: the tag's class.
        multilabel: count a prediction when the class's logit is > 0 (sigmoid > 0.5) instead of
            when it is the arg-max.

    Returns:
        The score in [0, 1]; at least :data:`SPURIOUS_THRESHOLD` (0.85) means a spurious model.

    Example:
        >>> spurious_score(torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0], [1.0, 0.5]]), target_class=0)
        0.75
    """
    if logits.ndim != 2 or len(logits) == 0 or not 0 <= target_class < logits.shape[1]:
        raise ValueError(
            f"logits must be (N, K) with N >= 1 and target_class in [0, K), got shape {tuple(logits.shape)} "
            f"and target_class={target_class}"
        )
    predicted = logits[:, target_class] > 0 if multilabel else logits.argmax(dim=1) == target_class
    return float(predicted.float().mean())
