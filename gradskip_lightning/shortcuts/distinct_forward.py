"""A model's forward that runs each distinct image once: the discovery stage's transplants repeat images.

The stage forwards the unchanged probes for the hotspot tests and again for the property tests, and many
pasted or transferred images come out pixel for pixel the same: a control arm of two classes with the same
hotspot pastes the same probe onto the same recipient, a random place can fall on the hotspot itself, a
transfer can leave an image as it was. :class:`DistinctForward` keys every image by its bytes and forwards
only those it has not seen, so one stage run pays one forward per distinct image. The logits are the
model's own (the same module on the same images), so every rate, p-value and flag stays as it was. Valid
while the model is deterministic and unchanged: one instance per stage run, in eval mode.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import torch
from torch import Tensor

from gradskip_lightning.core.validation import check_logits

__all__ = ["DistinctForward"]


class DistinctForward:
    """``model`` images (B, C, H, W) -> logits (B, K), each distinct image forwarded once over this object's life.

    Attributes:
        model: the wrapped forward (eval mode, unchanged while this object is used).
        forwarded: images actually forwarded; requested: images asked for.

    Example:
        >>> calls = []
        >>> def model(x):
        ...     calls.append(len(x))
        ...     return x.flatten(1)[:, :2]
        >>> forward = DistinctForward(model)
        >>> images = torch.arange(12.0).reshape(3, 1, 2, 2)
        >>> first = forward(images)
        >>> again = forward(torch.cat([images[1:], images[:1], images[:1]]))
        >>> torch.equal(again, torch.cat([first[1:], first[:1], first[:1]])), calls, forward.requested
        (True, [3], 7)
    """

    def __init__(self, model: Callable[[Tensor], Tensor]) -> None:
        self.model = model
        self._logits: dict[bytes, Tensor] = {}
        self.forwarded = 0
        self.requested = 0

    def __call__(self, images: Tensor) -> Tensor:
        if not len(images):
            return self.model(images)
        keys = [_key(image) for image in images.detach().cpu()]
        self.requested += len(keys)
        new: dict[bytes, int] = {}
        for position, key in enumerate(keys):
            if key not in self._logits and key not in new:
                new[key] = position
        if new:
            positions = torch.tensor(list(new.values()), device=images.device)
            logits = self.model(images[positions])
            check_logits(self.model, logits, len(positions))
            self._logits.update(zip(new, logits.detach(), strict=True))
            self.forwarded += len(positions)
        return torch.stack([self._logits[key] for key in keys])


def _key(image: Tensor) -> bytes:
    """A digest of an image's dtype, shape and bytes."""
    digest = hashlib.blake2b(digest_size=20)
    digest.update(f"{image.dtype}{tuple(image.shape)}".encode())
    digest.update(image.contiguous().view(torch.uint8).numpy().tobytes())
    return digest.digest()
