"""Explainer: one interface over GradSkip and the baselines, batched, with input checks.

Example::

    explainer = Explainer(model, method="gradskip", alpha=0.5)
    explanation = explainer.explain(images, targets)   # one forward + one backward
    explanation.maps                                    # (B, H, W) relevance at input resolution
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gradskip_lightning import methods
from gradskip_lightning.capture import Capture, capture, find_vit

#: Method names accepted by :class:`Explainer`.
METHODS = ("gradskip", "raw_attention", "rollout", "chefer", "random")
#: Methods that need the activation-only backward.
GRADIENT_METHODS = ("gradskip", "chefer")


@dataclass
class Explanation:
    """Maps and internals of one batched explain call. Heights/widths in pixels."""

    maps: Tensor  # (B, H, W) float32 relevance at input resolution
    token_maps: Tensor  # (B, h, w) float32 relevance per patch
    targets: Tensor  # (B,) long, the explained classes
    logits: Tensor  # (B, num_classes) float32
    valid: Tensor  # (B,) bool; False where gradients or relevance were not finite (map zeroed)
    method: str
    head_weights: Tensor | None = None  # omega (B, L, H)
    grad_flow: Tensor | None = None  # g~ (B, L, H)
    sparsity: Tensor | None = None  # s~ (B, L, H)
    gates: Tensor | None = None  # beta_main (B, L, N), N the tokens propagated

    @property
    def probabilities(self) -> Tensor:
        """Softmax probability of each explained class, (B,)."""
        return self.logits.softmax(dim=1).gather(1, self.targets[:, None])[:, 0]

    @property
    def predictions(self) -> Tensor:
        """Predicted class per image, (B,)."""
        return self.logits.argmax(dim=1)


class Explainer:
    """Explain a timm Vision Transformer's decisions with GradSkip or a baseline.

    Args:
        model: a timm ``VisionTransformer`` (vit_*, deit_*, register-token variants), or a module
            holding exactly one (a LightningModule, a DDP wrapper).
        method: one of :data:`METHODS`.
        **options: for "gradskip" the fields of :class:`~gradskip_lightning.methods.GradSkipOptions`;
            for "random" ``seed`` (int); the other methods take none.

    Raises:
        TypeError: the model is not a supported ViT, or has no classifier head.
        ValueError: unknown method or option.
    """

    def __init__(self, model: nn.Module, method: str = "gradskip", **options) -> None:
        self.model = model  # images -> logits; what the metrics run
        self.vit = find_vit(model)
        if self.vit.num_classes <= 0:
            raise TypeError(f"{type(self.vit).__name__} has no classifier head (num_classes=0): nothing to explain")
        if method not in METHODS:
            raise ValueError(f"Unknown method {method!r}; choose one of {METHODS}")
        self.method = method
        if method == "gradskip":
            allowed = {f.name for f in fields(methods.GradSkipOptions)}
        elif method == "random":
            allowed = {"seed"}
        else:
            allowed = set()
        unknown = set(options) - allowed
        if unknown:
            raise ValueError(f"Method {method!r} takes no option(s) {sorted(unknown)}; it takes {sorted(allowed)}")
        self.options = methods.GradSkipOptions(**options) if method == "gradskip" else dict(options)

    @property
    def patch_size(self) -> tuple[int, int]:
        return tuple(self.vit.patch_embed.patch_size)

    @property
    def grid_size(self) -> tuple[int, int]:
        return tuple(self.vit.patch_embed.grid_size)

    @property
    def img_size(self) -> tuple[int, int]:
        return tuple(self.vit.patch_embed.img_size)

    @property
    def in_chans(self) -> int:
        return self.vit.patch_embed.proj.in_channels

    @property
    def num_classes(self) -> int:
        return self.vit.num_classes

    @property
    def num_prefix_tokens(self) -> int:
        return self.vit.num_prefix_tokens

    def check_images(self, images: Tensor) -> None:
        """Raise ValueError unless ``images`` is a finite float (B, C, H, W) batch the model accepts."""
        if not isinstance(images, Tensor) or images.ndim != 4 or not images.is_floating_point():
            got = f"{type(images).__name__} {getattr(images, 'dtype', '')} {tuple(getattr(images, 'shape', ()))}"
            raise ValueError(f"images must be a float tensor (B, C, H, W); got {got}")
        c, h, w = images.shape[1:]
        if c != self.in_chans or (h, w) != self.img_size:
            expected = ", ".join(str(d) for d in (self.in_chans, *self.img_size))
            raise ValueError(f"images must be (B, {expected}); got {tuple(images.shape)}")
        if not torch.isfinite(images).all():
            raise ValueError("images contain NaN or infinite values")

    def check_targets(self, targets: Tensor, batch: int) -> None:
        """Raise ValueError unless ``targets`` is (batch,) of class indices in [0, num_classes)."""
        if not isinstance(targets, Tensor) or targets.shape != (batch,) or targets.is_floating_point():
            raise ValueError(f"targets must be an integer tensor of shape ({batch},); got {targets!r}")
        if batch and (targets.min() < 0 or targets.max() >= self.num_classes):
            raise ValueError(f"targets must be in [0, {self.num_classes}); got {targets.tolist()}")

    def explain(self, images: Tensor, targets: Tensor | None = None) -> Explanation:
        """Explain a batch in one forward (and one activation-only backward for gradient methods).

        Args:
            images: (B, C, H, W), normalised as the model expects; moved to the model's device.
            targets: (B,) class indices; None explains the predicted classes.
        """
        self.check_images(images)
        device = next(self.vit.parameters()).device
        images = images.to(device)
        if targets is not None:
            self.check_targets(targets, images.shape[0])
            targets = targets.to(device=device, dtype=torch.long)
        with torch.autocast(device.type, enabled=False):
            cap = capture(self.vit, images.float(), targets, with_gradients=self.method in GRADIENT_METHODS)
            out = self._relevance(cap)
        h, w = cap.grid_size
        patch = out.patch_relevance.float()
        valid = torch.isfinite(patch).all(dim=1)
        for extra in (out.head_weights, out.gates):
            if extra is not None:
                valid &= torch.isfinite(extra).flatten(1).all(dim=1)
        token_maps = torch.where(valid[:, None], patch, torch.zeros_like(patch)).reshape(-1, h, w)
        maps = F.interpolate(token_maps[:, None], size=images.shape[-2:], mode="bilinear", align_corners=False)[:, 0]
        return Explanation(
            maps=maps,
            token_maps=token_maps,
            targets=cap.targets,
            logits=cap.logits.float(),
            valid=valid,
            method=self.method,
            head_weights=out.head_weights,
            grad_flow=out.grad_flow,
            sparsity=out.sparsity,
            gates=out.gates,
        )

    def _relevance(self, cap: Capture) -> methods.MethodOutput:
        p = cap.num_prefix_tokens
        if self.method == "gradskip":
            return methods.gradskip(cap, self.options)
        if self.method == "raw_attention":
            relevance = methods.raw_attention(cap.attn[-1], cap.readout)
        elif self.method == "rollout":
            relevance = methods.rollout(cap.attn, cap.readout)
        elif self.method == "chefer":
            relevance = methods.chefer(cap.attn, cap.attn_grad, cap.readout)
        else:
            n_patches = cap.grid_size[0] * cap.grid_size[1]
            return methods.MethodOutput(
                methods.random_relevance(cap.logits.shape[0], n_patches, self.options.get("seed", 0), cap.logits.device)
            )
        return methods.MethodOutput(relevance[:, p:])
