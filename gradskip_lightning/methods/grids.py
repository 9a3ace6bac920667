"""Relevance between token grids of different resolutions: a coarse token's relevance spread over the
fine tokens of its stride cell (SegFormer's reduced keys and stages, Swin's patch mergings).

Shapes: (h, w) grids, N = h * w tokens row-major, B images.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradskip_lightning.methods.output import normalise

__all__ = ["cell_spread", "spread_to_cells"]


def cell_spread(
    coarse: tuple[int, int], fine: tuple[int, int], stride: int, device: torch.device, dtype: torch.dtype
) -> Tensor:
    """(N_coarse, N_fine): row i spreads coarse token (a, b) uniformly over the fine tokens of its
    stride cell [a*stride, (a+1)*stride) x [b*stride, (b+1)*stride), clipped to the fine grid.

    Example:
        >>> cell_spread((1, 2), (1, 3), 2, torch.device("cpu"), torch.float32)
        tensor([[0.5000, 0.5000, 0.0000],
                [0.0000, 0.0000, 1.0000]])

    Raises:
        ValueError: a coarse token's cell holds no fine token.
    """
    rows, cols = (
        (torch.arange(f, device=device)[None, :] // stride == torch.arange(c, device=device)[:, None]).to(dtype)
        for c, f in zip(coarse, fine)
    )
    cells = torch.einsum("ik,jl->ijkl", rows, cols).reshape(coarse[0] * coarse[1], fine[0] * fine[1])
    if (cells.sum(dim=-1) == 0).any():
        raise ValueError(f"A {coarse} grid at stride {stride} over a {fine} grid has cells with no token.")
    return normalise(cells)


def spread_to_cells(relevance: Tensor, coarse: tuple[int, int], fine: tuple[int, int], stride: int) -> Tensor:
    """``relevance @ cell_spread(coarse, fine, stride)`` without the (N_coarse, N_fine) matrix:
    (B, N_coarse) -> (B, N_fine), each coarse token's relevance split evenly over its stride cell.

    Example:
        >>> spread_to_cells(torch.tensor([[1.0, 2.0]]), (1, 2), (1, 3), 2)
        tensor([[0.5000, 0.5000, 2.0000]])

    Raises:
        ValueError: a coarse token's cell holds no fine token.
    """
    rows, cols = (torch.arange(f, device=relevance.device) // stride for f in fine)
    inside = ((rows < coarse[0])[:, None] & (cols < coarse[1])[None, :]).flatten()
    cell = (rows[:, None] * coarse[1] + cols[None, :]).flatten().clamp_max(coarse[0] * coarse[1] - 1)
    counts = torch.bincount(cell[inside], minlength=coarse[0] * coarse[1])
    if (counts == 0).any():
        raise ValueError(f"A {coarse} grid at stride {stride} over a {fine} grid has cells with no token.")
    return torch.where(inside, (relevance / counts.to(relevance.dtype))[:, cell], 0.0)
