"""What every method is (a visitor of one pass) and returns, and the row normalisation they share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from gradskip_lightning.core.tensors import BlockVisitor


@dataclass
class MethodOutput:
    """Patch relevance (B, P) and, for GradSkip, its internals."""

    patch_relevance: Tensor
    head_weights: Tensor | None = None  # omega (B, L, H)
    grad_flow: Tensor | None = None  # g~ (B, L, H)
    sparsity: Tensor | None = None  # s~ (B, L, H)
    gates: Tensor | None = None  # beta_main (B, L, N)


class MethodVisitor(BlockVisitor, Protocol):
    """A method: a :class:`~gradskip_lightning.core.tensors.BlockVisitor` built from its options that
    gives its :class:`MethodOutput` once the pass is over."""

    def __init__(self, options: object) -> None: ...

    def result(self) -> MethodOutput: ...


def normalise(x: Tensor, dim: int = -1) -> Tensor:
    """x / sum(x) along ``dim``; 0 where the sum is 0.

    Example:
        >>> normalise(torch.tensor([[1.0, 3.0], [0.0, 0.0]]))
        tensor([[0.2500, 0.7500],
                [0.0000, 0.0000]])
    """
    total = x.sum(dim=dim, keepdim=True)
    return torch.where(total > 0, x / total.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(x))
