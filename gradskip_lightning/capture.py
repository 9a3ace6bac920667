"""Activation capture for timm Vision Transformers: the only module that knows timm's internals.

One forward and one activation-only backward record, for every block l = 1..L:

- ``attn``        A^l, post-softmax attention probabilities, (B, H, N, N)
- ``attn_grad``   dy/dA^l, (B, H, N, N)
- ``value_norm``  ||v^l_{q,j}||, the L2 norm of each head's value vector, (B, H, N)
- ``block_input`` x^{l-1}, (B, N, D)
- ``branch``      a^l, the attention-branch output after ``ls1``/``drop_path1``, (B, N, D)
- ``branch_grad`` dy/du^l (= dy/da^l), (B, N, D)

plus the last block's output x^L and its gradient, the logits and the explained targets, where
y = sum_b logit[b, target_b]. Hooks exist only during :func:`capture`; the model's fused-attention
flags, gradient checkpointing, train/eval modes are restored, and no parameter ``.grad`` is written.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from timm.models.vision_transformer import VisionTransformer
from torch import Tensor, nn

#: Pooling modes whose read-out is the mean (or max) over patch tokens.
PATCH_POOLS = ("avg", "max", "avgmax")
SUPPORTED = (
    "timm VisionTransformer-family models (vit_*, deit_* incl. distilled, *_reg register-token "
    "variants) with global_pool 'token' or 'avg'"
)


@dataclass
class Capture:
    """Per-block activations and gradients of one batched explain pass (shapes in module doc)."""

    attn: list[Tensor]
    attn_grad: list[Tensor] | None
    value_norm: list[Tensor]
    block_input: list[Tensor]
    branch: list[Tensor]
    branch_grad: list[Tensor] | None
    output: Tensor
    output_grad: Tensor | None
    logits: Tensor
    targets: Tensor
    readout: Tensor
    num_prefix_tokens: int
    grid_size: tuple[int, int]

    @property
    def num_blocks(self) -> int:
        return len(self.attn)


def find_vit(model: nn.Module) -> VisionTransformer:
    """Return the timm ``VisionTransformer`` that is, or is inside, ``model``.

    Raises:
        TypeError: when there is none, more than one, or its blocks are not timm ``Block``-like.
    """
    if isinstance(model, VisionTransformer):
        vit = model
    elif not isinstance(model, nn.Module):
        raise TypeError(f"Cannot explain a {type(model).__name__}: not a torch.nn.Module. Supported: {SUPPORTED}.")
    else:
        found = [m for m in model.modules() if isinstance(m, VisionTransformer)]
        if len(found) != 1:
            what = "no" if not found else f"{len(found)}"
            raise TypeError(
                f"Cannot explain {type(model).__name__}: it contains {what} timm VisionTransformer "
                f"(exactly one is needed). Supported: {SUPPORTED}."
            )
        vit = found[0]
    for i, block in enumerate(vit.blocks):
        attn = getattr(block, "attn", None)
        needed = ("qkv", "attn_drop", "fused_attn", "num_heads")
        if attn is None or not all(hasattr(attn, n) for n in needed) or not hasattr(block, "drop_path1"):
            raise TypeError(
                f"Cannot explain {type(vit).__name__}: block {i} ({type(block).__name__}) is not a "
                f"timm pre-norm Block with a standard Attention (qkv, attn_drop, drop_path1). "
                f"Supported: {SUPPORTED}."
            )
    if vit.global_pool not in ("token", *PATCH_POOLS):
        raise TypeError(
            f"Cannot explain {type(vit).__name__} with global_pool={vit.global_pool!r}. Supported: {SUPPORTED}."
        )
    return vit


def readout_weights(vit: VisionTransformer, batch: int, device: torch.device) -> Tensor:
    """The token distribution the classifier head reads, (B, N), each row summing to 1.

    CLS pooling reads token 0 (a distilled DeiT averages its CLS and distillation heads: tokens
    0 and 1); average/max pooling reads the patch tokens uniformly.
    """
    prefix = vit.num_prefix_tokens
    n = prefix + vit.patch_embed.num_patches
    r = torch.zeros(batch, n, device=device)
    if vit.global_pool == "token":
        heads = 2 if getattr(vit, "dist_token", None) is not None else 1
        r[:, :heads] = 1.0 / heads
    else:
        r[:, prefix:] = 1.0 / (n - prefix)
    return r


@contextmanager
def explain_mode(vit: VisionTransformer) -> Iterator[None]:
    """Eval mode, non-fused attention, no gradient checkpointing; everything restored on exit."""
    modes = [(m, m.training) for m in vit.modules()]
    fused = [(b.attn, b.attn.fused_attn) for b in vit.blocks]
    checkpointing = getattr(vit, "grad_checkpointing", None)
    try:
        vit.eval()
        for attn, _ in fused:
            attn.fused_attn = False
        if checkpointing is not None:
            vit.grad_checkpointing = False
        yield
    finally:
        for module, training in modes:
            module.training = training
        for attn, flag in fused:
            attn.fused_attn = flag
        if checkpointing is not None:
            vit.grad_checkpointing = checkpointing


def capture(
    vit: VisionTransformer, images: Tensor, targets: Tensor | None = None, with_gradients: bool = True
) -> Capture:
    """Run one forward (and, if ``with_gradients``, one activation-only backward) with hooks.

    Args:
        vit: a model accepted by :func:`find_vit`.
        images: (B, C, H, W), already validated and normalised as the model expects.
        targets: (B,) class indices, or None for the predicted classes.
        with_gradients: False skips the backward (methods that only need attention).

    Works inside ``torch.no_grad()`` and ``torch.inference_mode()``.
    """
    blocks = list(vit.blocks)
    record: dict[str, list[Tensor]] = {k: [] for k in ("attn", "value_norm", "block_input", "branch", "output")}

    def on_attn(_m: nn.Module, _i: tuple, out: Tensor) -> None:
        record["attn"].append(out)

    def value_norm_hook(heads: int):
        def on_qkv(_m: nn.Module, _i: tuple, out: Tensor) -> None:
            b, n, _ = out.shape
            v = out.detach().reshape(b, n, 3, heads, -1)[:, :, 2]  # (B, N, H, d)
            record["value_norm"].append(v.norm(dim=-1).transpose(1, 2))  # (B, H, N)

        return on_qkv

    def on_block_input(_m: nn.Module, args: tuple) -> None:
        record["block_input"].append(args[0])

    def on_branch(_m: nn.Module, _i: tuple, out: Tensor) -> None:
        record["branch"].append(out)

    def on_output(_m: nn.Module, _i: tuple, out: Tensor) -> None:
        record["output"].append(out)

    handles = []
    with explain_mode(vit), torch.inference_mode(False), torch.enable_grad():
        try:
            for block in blocks:
                handles += [
                    block.attn.attn_drop.register_forward_hook(on_attn),
                    block.attn.qkv.register_forward_hook(value_norm_hook(block.attn.num_heads)),
                    block.register_forward_pre_hook(on_block_input),
                    block.drop_path1.register_forward_hook(on_branch),
                ]
            handles.append(blocks[-1].register_forward_hook(on_output))
            # A fresh leaf that requires grad: the graph exists even for a frozen model, and the
            # clone is a normal tensor even when the caller's batch is an inference tensor.
            x = images.detach().clone().requires_grad_(True)
            logits = vit(x)
        finally:
            for h in handles:
                h.remove()

        if targets is None:
            targets = logits.detach().argmax(dim=1)
        attn_grad = branch_grad = output_grad = None
        if with_gradients:
            y = logits.gather(1, targets[:, None]).sum()
            grads = torch.autograd.grad(y, [*record["attn"], *record["branch"], record["output"][0]])
            n_blocks = len(blocks)
            attn_grad = list(grads[:n_blocks])
            branch_grad = list(grads[n_blocks : 2 * n_blocks])
            output_grad = grads[-1]

    return Capture(
        attn=[a.detach() for a in record["attn"]],
        attn_grad=attn_grad,
        value_norm=record["value_norm"],
        block_input=[t.detach() for t in record["block_input"]],
        branch=[t.detach() for t in record["branch"]],
        branch_grad=branch_grad,
        output=record["output"][0].detach(),
        output_grad=output_grad,
        logits=logits.detach(),
        targets=targets,
        readout=readout_weights(vit, images.shape[0], images.device),
        num_prefix_tokens=vit.num_prefix_tokens,
        grid_size=tuple(vit.patch_embed.grid_size),
    )
