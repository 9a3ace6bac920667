"""Right for the right reasons: a loss that penalises a model's sensitivity to an artifact's pixels.

Ross, Hughes and Doshi-Velez (IJCAI 2017, "Right for the Right Reasons") add to the training loss, for
annotations ``A`` (the pixels that must not matter), ``lambda * sum_n sum_d (A_nd * d/dx_nd sum_k log p_k(x_n))^2``:
the squared input gradient of the summed log-probabilities inside the annotated pixels. Here ``A`` is an
artifact's region (:class:`~.regions.Region`) and the sum over images is a mean, so ``weight`` does not depend on
the batch size. Attention runs on PyTorch's math kernel there: the fused kernels have no second derivative.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

__all__ = ["input_gradient_penalty"]


def input_gradient_penalty(model: Callable[[Tensor], Tensor], images: Tensor, pixels: Tensor) -> Tensor:
    """The mean over ``images`` (B, C, H, W) of ``sum_d (pixels_d * d/dx_d sum_k log p_k(x))^2``, a scalar with a
    graph to ``model``'s parameters (its ``backward()`` adds the penalty's gradient to theirs).

    Args:
        model: images -> logits (B, K), in the mode it trains in.
        images: (B, C, H, W) inputs, not changed (a copy is differentiated).
        pixels: (H, W) bool, the pixels whose input gradient is penalised.

    Example:
        >>> linear = torch.nn.Linear(2, 2, bias=False)
        >>> with torch.no_grad():
        ...     _ = linear.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
        >>> model = lambda x: linear(x.flatten(1))
        >>> image, first = torch.tensor([[[[1.0, 0.0]]]]), torch.tensor([[True, False]])
        >>> round(input_gradient_penalty(model, image, first).item(), 4)  # (1 - 2 p_1)^2, p_1 = sigmoid(1)
        0.2136
        >>> input_gradient_penalty(model, image, ~first).item()  # the model does not look at x_2
        0.0
    """
    inputs = images.detach().clone().requires_grad_(True)
    with torch.enable_grad(), sdpa_kernel(SDPBackend.MATH):  # fused attention has no second derivative
        summed = model(inputs).log_softmax(dim=-1).sum()
        (gradient,) = torch.autograd.grad(summed, inputs, create_graph=True)
        return (gradient * pixels.to(gradient.device)).square().flatten(1).sum(dim=1).mean()
