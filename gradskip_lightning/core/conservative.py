"""Conservative propagation (CP-LRP, Ali et al. 2022; the basis of AttnLRP, Achtibat et al. 2024).

Gradient x input is a conservative relevance propagation through a transformer once the two
non-linearities that mix channels or tokens multiplicatively are held constant in the backward:
the softmax attention probabilities A^l and the denominators of the normalisations (the LayerNorm
std, the RMSNorm rms, timm's SimpleNorm std). Forward hooks do exactly that for one
call (:func:`detached_outputs` for A^l, :func:`constant_norm_hooks` for the norms; the forward
values are unchanged); nothing is patched on any class.

Shapes: (B, N, D) tokens, the norms act on the last axis D.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from timm.layers import RmsNorm, SimpleNorm
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle


def layer_norm_constant_std(norm: nn.LayerNorm, x: Tensor) -> Tensor:
    """LayerNorm over the last axis with its std detached: (x - mean) / const * weight + bias."""
    centred = x - x.mean(dim=-1, keepdim=True)
    std = (x.var(dim=-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
    y = centred / std.detach()
    if norm.weight is not None:
        y = y * norm.weight
    return y if norm.bias is None else y + norm.bias


def rms_norm_constant_rms(norm: Any, x: Tensor) -> Tensor:
    """RMSNorm with its rms detached: x / const * weight."""
    eps = norm.eps if norm.eps is not None else torch.finfo(x.dtype).eps
    rms = (x.pow(2).mean(dim=-1, keepdim=True) + eps).sqrt()
    y = x / rms.detach()
    return y if norm.weight is None else y * norm.weight


def simple_norm_constant_std(norm: Any, x: Tensor) -> Tensor:
    """timm's SimpleNorm (x scaled by its std, unbiased, not centred) with the std detached."""
    std = (x.var(dim=-1, keepdim=True) + norm.eps).sqrt()
    y = x / std.detach()
    return y if norm.weight is None else y * norm.weight


#: Norm class -> its constant-denominator forward (module, input) -> output; subclasses match.
CONSTANT_DENOMINATOR: dict[type[nn.Module], Callable[[Any, Tensor], Tensor]] = {
    nn.LayerNorm: layer_norm_constant_std,
    nn.RMSNorm: rms_norm_constant_rms,
    RmsNorm: rms_norm_constant_rms,
    SimpleNorm: simple_norm_constant_std,
}


def constant_denominator_rule(module: nn.Module) -> Callable[[Any, Tensor], Tensor] | None:
    """The rule of ``module``'s norm class (or of a parent class), or None for other modules."""
    return next((rule for cls, rule in CONSTANT_DENOMINATOR.items() if isinstance(module, cls)), None)


def _detach_output(_module: nn.Module, _args: tuple, out: Tensor) -> Tensor:
    return out.detach()


def _constant_norm(module: nn.Module, args: tuple, out: Tensor) -> Tensor:
    rule = constant_denominator_rule(module)
    return out if rule is None else rule(module, args[0])


@contextmanager
def detached_outputs(modules: Sequence[nn.Module]) -> Iterator[None]:
    """Inside the block, each of ``modules`` returns its output detached (the forward value unchanged):
    for the modules whose output is A^l, the attention probabilities held constant in the backward."""
    handles = [m.register_forward_hook(_detach_output) for m in modules]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def constant_norm_hooks(scope: list[nn.Module]) -> list[RemovableHandle]:
    """Forward hooks that hold the norm denominators of ``scope`` constant in the backward: every
    submodule with a rule in :data:`CONSTANT_DENOMINATOR` computes its output with a detached
    denominator. The caller removes the handles after its one forward."""
    norms = {id(m): m for root in scope for m in root.modules() if constant_denominator_rule(m) is not None}
    return [m.register_forward_hook(_constant_norm) for m in norms.values()]
