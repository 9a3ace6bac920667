"""HF ``transformers`` ViTs: ``ViTModel`` / ``ViTForImageClassification``, DeiT (with the
distillation token, and ``DeiTForImageClassificationWithTeacher``), DINOv2 (register tokens where
present) and BEiT (relative position bias), explained through the model's own modules.

Eager attention is set on the model's config for the call and restored (as the SegFormer capture
does): it returns the post-softmax probabilities A (B, H, N, N) the output is computed from, so the
attention module's output holds A on the path to the logits; the attention branch is what the
layer adds to its residual stream (the attention output, DINOv2's ``layer_scale1`` output, BEiT's
first ``drop_path`` output after ``lambda_1``); the values are ``v_proj``'s output. The pass is the
shared one (:mod:`gradskip_lightning.core.streaming`), and so are the methods.
For ``method="lrp"`` the config names, for that one call, an attention registered in transformers'
``AttentionInterface`` (its public extension point) that is eager attention with A detached in the
product. ``transformers`` is imported only when such a model is explained.

Shapes: B images, H heads, N tokens (CLS, distillation or register tokens, then P patches), D channels.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import torch
from timm.models.vision_transformer import init_weights_vit_timm
from torch import Tensor, nn

from gradskip_lightning.core.adapter import PassAdapter, UnsupportedModel
from gradskip_lightning.core.streaming import BlockPoints
from gradskip_lightning.families.transformers_attention import attention_implementation

__all__ = ["HF_MODELS", "HFViTAdapter", "LogitsOf", "is_hf_vit"]

#: Which tokens of x^L the classifier reads: the CLS token; CLS and distillation tokens averaged;
#: CLS and the patch mean concatenated (DINOv2); the patch mean (BEiT's mean pooling).
Readout = Literal["cls", "cls_and_distillation", "cls_and_patch_mean", "patch_mean"]


@dataclass(frozen=True)
class HFModel:
    """One supported ``transformers`` class.

    Attributes:
        body: the attribute holding its base model ("" for a base model).
        readout: what its head reads (a base model: what its ``pooler_output`` reads); BEiT's
            ``"patch_mean"`` falls back to ``"cls"`` when ``config.use_mean_pooling`` is False.
        heads: the attributes of its classifier(s).
    """

    body: str
    readout: Readout
    heads: tuple[str, ...] = ()


#: Supported class name -> how it reads its tokens.
HF_MODELS: dict[str, HFModel] = {
    "ViTForImageClassification": HFModel("vit", "cls", ("classifier",)),
    "ViTModel": HFModel("", "cls"),
    "DeiTForImageClassification": HFModel("deit", "cls", ("classifier",)),
    "DeiTForImageClassificationWithTeacher": HFModel(
        "deit", "cls_and_distillation", ("cls_classifier", "distillation_classifier")
    ),
    "DeiTModel": HFModel("", "cls"),
    "Dinov2ForImageClassification": HFModel("dinov2", "cls_and_patch_mean", ("classifier",)),
    "Dinov2Model": HFModel("", "cls"),
    "Dinov2WithRegistersForImageClassification": HFModel(
        "dinov2_with_registers", "cls_and_patch_mean", ("classifier",)
    ),
    "Dinov2WithRegistersModel": HFModel("", "cls"),
    "BeitForImageClassification": HFModel("beit", "patch_mean", ("classifier",)),
    "BeitModel": HFModel("", "patch_mean"),
}
#: Layer class name -> (module, tuple index) of its attention branch as added to the residual stream.
BRANCHES: dict[str, tuple[str, int | None]] = {
    "ViTLayer": ("attention", 0),
    "DeiTLayer": ("attention", 0),
    "Dinov2Layer": ("layer_scale1", None),
    "Dinov2WithRegistersLayer": ("layer_scale1", None),
    "BeitLayer": ("drop_path", None),  # its first call; the second adds the MLP branch
}
#: The attention implementation of a conservative pass (registered on first use).
CONSTANT_ATTENTION = "gradskip_constant_eager"


def is_hf_vit(module: nn.Module) -> bool:
    """True for an instance of a class of :data:`HF_MODELS` from ``transformers`` (never imports it:
    without it imported no module can be one)."""
    return (
        "transformers" in sys.modules
        and type(module).__name__ in HF_MODELS
        and (type(module).__module__.startswith("transformers."))
    )


def constant_eager_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Tensor, Tensor]:
    """transformers' eager attention (eval mode: no dropout) with the probabilities A (B, H, N, N)
    detached where they mix the values (B, H, N, d): the output's value is eager's, its backward
    holds A constant (CP-LRP). Returns (output (B, N, H, d), A)."""
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    logits = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        logits = logits + attention_mask
    attn = logits.softmax(dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(attn.detach(), value).transpose(1, 2).contiguous(), attn


class HFViTAdapter(PassAdapter):
    """The hook points, geometry and read-out of one supported ``transformers`` ViT.

    Args:
        backbone: an instance of a class of :data:`HF_MODELS`.
    """

    architecture = "hf_vit"

    def __init__(self, backbone: nn.Module) -> None:
        self.spec = HF_MODELS[type(backbone).__name__]
        self.body: Any = backbone.get_submodule(self.spec.body) if self.spec.body else backbone
        super().__init__(backbone)

    @property
    def config(self) -> Any:
        return self.body.config

    def check(self) -> None:
        for i, layer in enumerate(self.blocks):
            if type(layer).__name__ not in BRANCHES:
                raise UnsupportedModel(
                    f"Cannot explain {type(self.backbone).__name__}: layer {i} is a {type(layer).__name__}, "
                    f"not one of {tuple(BRANCHES)}."
                )

    @property
    def blocks(self) -> list[nn.Module]:
        layers = self.body.layers if hasattr(self.body, "layers") else self.body.encoder.layer
        return list(layers)

    def block_points(self, block: nn.Module) -> BlockPoints:
        attention: Any = block.get_submodule("attention")
        name, index = BRANCHES[type(block).__name__]
        return BlockPoints(
            attention, block.get_submodule(name), attention.v_proj, attention.num_attention_heads, 1, index
        )

    @property
    def num_prefix_tokens(self) -> int:
        embeddings = self.body.embeddings
        registers = getattr(embeddings, "register_tokens", None)
        distilled = getattr(embeddings, "distillation_token", None) is not None
        return 1 + int(distilled) + (0 if registers is None else registers.shape[1])

    @property
    def grid_size(self) -> tuple[int, int]:
        h, w = self.img_size
        p = self.config.patch_size
        ph, pw = (p, p) if isinstance(p, int) else p
        return (h // ph, w // pw)

    @property
    def img_size(self) -> tuple[int, int]:
        size = self.config.image_size
        return (size, size) if isinstance(size, int) else tuple(size)

    @property
    def in_chans(self) -> int:
        return int(self.config.num_channels)

    @property
    def head(self) -> nn.Module | None:
        heads = [self.backbone.get_submodule(name) for name in self.spec.heads]
        linear = [h for h in heads if isinstance(h, nn.Linear)]
        return None if not linear else linear[0] if len(linear) == 1 else nn.ModuleList(linear)

    @property
    def num_classes(self) -> int:
        return int(self.config.num_labels) if self.head is not None else 0

    @property
    def reads(self) -> Readout:
        """What the classifier reads (BEiT without mean pooling reads CLS)."""
        if self.spec.readout == "patch_mean" and not self.config.use_mean_pooling:
            return "cls"
        return self.spec.readout

    def readout(
        self, batch: int, pool_input: Tensor | None, device: torch.device, dtype: torch.dtype = torch.float32
    ) -> Tensor:
        """The token distribution of :attr:`reads`, (B, N): one-hot CLS; 1/2 on CLS and on the
        distillation token; 1/2 on CLS and 1/2 spread evenly over the patches (DINOv2's head reads
        their concatenation: [ours]); even over the patches."""
        prefix = self.num_prefix_tokens
        r = torch.zeros(batch, prefix + self.grid_size[0] * self.grid_size[1], device=device, dtype=dtype)
        reads = self.reads
        if reads == "cls":
            r[:, 0] = 1.0
        elif reads == "cls_and_distillation":
            r[:, :2] = 0.5
        elif reads == "cls_and_patch_mean":
            r[:, 0] = 0.5
            r[:, prefix:] = 0.5 / (r.shape[1] - prefix)
        else:
            r[:, prefix:] = 1.0 / (r.shape[1] - prefix)
        return r

    def reinitialise(self, layer: nn.Module) -> None:
        """timm's ViT init of every submodule of ``layer`` (trunc-normal Linear), in place."""
        for module in layer.modules():
            init_weights_vit_timm(module)

    def norm_scope(self) -> list[nn.Module]:
        """The layers, the final norm, BEiT's pooler (its mean-pool LayerNorm) and the classifiers."""
        scope = [nn.ModuleList(self.blocks), self.body.layernorm]
        if getattr(self.body, "pooler", None) is not None:
            scope.append(self.body.pooler)
        return scope + [self.backbone.get_submodule(name) for name in self.spec.heads]

    @contextmanager
    def explain_mode(self, model: nn.Module | None = None) -> Iterator[None]:
        """Eval mode and eager attention (which returns the probabilities) for the call; restored."""
        with super().explain_mode(model), attention_implementation(self.config, "eager"):
            yield

    @contextmanager
    def constant_attention(self) -> Iterator[None]:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, eager_mask

        AttentionInterface.register(CONSTANT_ATTENTION, constant_eager_attention)
        AttentionMaskInterface.register(CONSTANT_ATTENTION, eager_mask)
        with attention_implementation(self.config, CONSTANT_ATTENTION):
            yield


class LogitsOf(nn.Module):
    """images -> ``model(pixel_values=images).logits``, (B, K): an HF classifier as the logits
    function the methods and the perturbation metrics call (it holds ``model``, no copy)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: Tensor) -> Tensor:
        return self.model(pixel_values=images).logits
