"""Live transplant test: paste the spurious tag into probes of the other classes and explain them.

For each probe not of the tag's class, the tag (:class:`~gradskip_lightning.shortcuts.tags.SpuriousTag`)
is pasted into its image and the result explained for the tag's class. Two per-probe values come
out: whether the prediction flipped to the tag's class (arg-max; multi-label: its sigmoid > 0.5)
and the relevance mass accuracy on the tag's pixels of that map (how much of the evidence for the
tag's class lies on the tag). Probes of the tag's class (multi-label: with that label) get NaN
and are left out of both means. A model that learnt the tag as a shortcut flips most probes
(Adebayo et al. 2022 call it spurious at a flip rate >= 0.85) and puts its relevance on the tag.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.shortcuts.regions import paste
from gradskip_lightning.shortcuts.tags import SpuriousTag

__all__ = ["Transplant"]


@dataclass(frozen=True)
class Transplant:
    """A tag and the normalisation of the model's images, to paste the tag into normalised probes.

    Attributes:
        tag: the spurious tag; its ``target_class`` is the artifact's class.
        normalisation: the normalisation of the images, as the model expects them.

    Example:
        >>> from gradskip_lightning.core.normalisation import Normalisation
        >>> from gradskip_lightning.shortcuts import SpuriousTag
        >>> tag = SpuriousTag(target_class=1, pattern=((1.0,),), position=(0, 0))
        >>> t = Transplant(tag, Normalisation(mean=(0.5,), std=(0.5,)))
        >>> t.paste(torch.zeros(1, 1, 2, 2))[0, 0]
        tensor([[1., 0.],
                [0., 0.]])
        >>> t.eligible(torch.tensor([0, 1, 2])).tolist()
        [True, False, True]
    """

    tag: SpuriousTag
    normalisation: Normalisation

    def mask(self, height: int, width: int) -> Tensor:
        """(height, width) bool: the tag's pixels."""
        return self.tag.mask(height, width)

    def paste(self, images: Tensor) -> Tensor:
        """A copy of normalised ``images`` (B, C, H, W) with the tag pasted in (normalised as they are)."""
        channels, height, width = images.shape[1:]
        pixels = self.tag.apply(torch.zeros(channels, height, width, dtype=images.dtype, device=images.device))
        return paste(images, self.normalisation.from_pixels(pixels), self.tag.region)

    def eligible(self, labels: Tensor, multi_hot: Tensor | None = None) -> Tensor:
        """(P,) bool: probes not of the tag's class (multi-hot labels (P, C): without that label)."""
        if multi_hot is not None:
            return ~self.tag.in_class(multi_hot)
        return ~self.tag.in_class(labels)

    def flipped(self, logits: Tensor, multilabel: bool) -> Tensor:
        """(B,) bool: predicted as the tag's class, from logits (B, K)."""
        target = self.tag.target_class
        return logits[:, target] > 0 if multilabel else logits.argmax(dim=1) == target
