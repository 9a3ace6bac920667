"""Conservative LRP (CP-LRP, Ali et al. 2022, "XAI for Transformers: better explanations through
conservative propagation"; the rule AttnLRP, Achtibat et al. 2024, builds on) as a function of a
conservative capture: gradient x input at the tokens entering block 0, with the attention
probabilities and the norm denominators held constant in the backward
(:mod:`gradskip_lightning.core.conservative`). One forward and one activation-only backward.

Shapes: B images, N tokens (prefix tokens first, then P patches), D channels.
"""

from __future__ import annotations

from torch import Tensor

from gradskip_lightning.core.tensors import CaptureMode
from gradskip_lightning.core.validation import required
from gradskip_lightning.methods.baselines import BaselineVisitor


def token_relevance(tokens: Tensor, tokens_grad: Tensor) -> Tensor:
    """Gradient x input summed over channels, signed: (B, N, D), (B, N, D) -> (B, N).

    Example:
        >>> import torch
        >>> token_relevance(torch.tensor([[[1.0, 2.0], [3.0, -1.0]]]), torch.tensor([[[0.5, 1.0], [1.0, 2.0]]]))
        tensor([[2.5000, 1.0000]])
    """
    return (tokens * tokens_grad).sum(dim=-1)


class LrpVisitor(BaselineVisitor):
    """CP-LRP relevance of the tokens x^0 (signed) from a conservative pass; blocks are ignored."""

    mode: CaptureMode = "conservative"

    def token_relevance(self) -> Tensor:
        tokens = required(self.top.input_tokens, "lrp: the input tokens x^0 (a 'conservative' pass)")
        return token_relevance(
            tokens, required(self.top.input_grad, "lrp: the input tokens' gradient (a 'conservative' pass)")
        )
