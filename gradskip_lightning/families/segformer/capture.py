"""One explain pass through an HF ``SegformerForSemanticSegmentation``: every block's tensors and
every stage output the decoder reads, with their gradients.

Shapes: B images, K classes, s a stage, (h_s, w_s) its token grid, N_s = h_s * w_s tokens, M_s =
N_s / sr_s^2 reduced keys, H_s heads, D_s channels; (h, w) = (h_0, w_0) is the logits grid.

The target of image b is a class c_b and a region Omega_b of logit positions; the pass runs one
activation-only backward of y = sum_b sum_{p in Omega_b} logit[b, c_b, p]. Hooks exist only
during one call; eval mode and the attention implementation are restored, no parameter
``.grad`` is written, and it works inside ``torch.no_grad()`` and ``torch.inference_mode()``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from gradskip_lightning.core.adapter import eval_mode, parameter_holders_outside
from gradskip_lightning.core.family import find_network
from gradskip_lightning.core.streaming import value_norms
from gradskip_lightning.core.tensors import BlockTensors
from gradskip_lightning.families.transformers_attention import attention_implementation


@dataclass
class StageTensors:
    """Stage s of one pass.

    Attributes:
        index: s, 0 = the stage next to the pixels.
        grid: (h_s, w_s), its token grid.
        stride: stride of its overlapping patch embedding (pixels for stage 0, stage s-1 tokens
            otherwise).
        reduction: sr_s, the key/value reduction ratio (keys on a (h_s // sr_s, w_s // sr_s) grid).
        blocks: its blocks, bottom first; ``attn`` and ``attn_grad`` (B, H_s, N_s, M_s),
            ``value_norm`` (B, H_s, M_s), ``block_input``, ``branch``, ``branch_grad`` (B, N_s, D_s).
        output: z_s, the stage output after its LayerNorm (what the decoder and stage s+1 read),
            (B, N_s, D_s); output_grad: dy/dz_s from the decoder and stage s+1 together.
    """

    index: int
    grid: tuple[int, int]
    stride: int
    reduction: int
    blocks: list[BlockTensors]
    output: Tensor
    output_grad: Tensor


@dataclass
class SegmentationCapture:
    """Every stage of one batched pass, bottom stage first, and the target.

    Attributes:
        logits: (B, K, h, w); targets: c_b, (B,); region: Omega_b, (B, h, w) bool.
        region_found: (B,) False where the default region (positions predicted as c_b) was empty and the
            whole logits grid was used instead.
        image_size: (H, W) pixels.
    """

    stages: list[StageTensors]
    logits: Tensor
    targets: Tensor
    region: Tensor
    region_found: Tensor
    image_size: tuple[int, int]


#: The SegFormer family's networks in words.
SEGFORMER = "HF transformers SegformerForSemanticSegmentation"


def is_segformer(module: nn.Module) -> bool:
    """True for an HF ``SegformerForSemanticSegmentation`` (never imports ``transformers``: without it
    imported no module can be one)."""
    transformers = sys.modules.get("transformers")
    return transformers is not None and isinstance(module, transformers.SegformerForSemanticSegmentation)


def find_segformer(model: nn.Module) -> Any:
    """The one HF ``SegformerForSemanticSegmentation`` that ``model`` is or holds (typed ``Any``: its
    submodules are reached by their ``transformers`` attribute names).

    Raises:
        UnsupportedModel (a TypeError): none, or several.
    """
    return find_network(model, is_segformer, "segformer", SEGFORMER)


def segmentation_logits(model: nn.Module, images: Tensor) -> Tensor:
    """``model(images)`` as logits (B, K, h, w): the HF output's ``logits``, or the tensor a module
    around the SegFormer returns.

    Raises:
        ValueError: the forward returned no (B, K, h, w) tensor.
    """
    out = model(pixel_values=images) if model is find_segformer(model) else model(images)
    logits = getattr(out, "logits", out)
    if not isinstance(logits, Tensor) or logits.ndim != 4 or logits.shape[0] != images.shape[0]:
        got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(
            f"{type(model).__name__}.forward must return segmentation logits (B, K, h, w) for "
            f"{images.shape[0]} images, got {got}"
        )
    return logits


def most_predicted_class(logits: Tensor) -> Tensor:
    """The class predicted at the most positions of each image, (B,) long; ties to the lowest.

    Example:
        >>> logits = torch.zeros(1, 3, 2, 2)
        >>> logits[0, 2, :, 1] = logits[0, 1, 0, 0] = 1.0  # class 2 on 2 positions, 1 and 0 on one each
        >>> most_predicted_class(logits)
        tensor([2])
    """
    predicted = logits.argmax(dim=1).flatten(1)  # (B, h*w)
    counts = torch.nn.functional.one_hot(predicted, logits.shape[1]).sum(dim=1)  # (B, K)
    return counts.argmax(dim=1)


@contextmanager
def explain_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode of every module of ``model`` and eager attention (which returns probabilities) in
    its SegFormer, for the call; both restored."""
    with attention_implementation(find_segformer(model).config, "eager"), eval_mode(model):
        yield


def target_region(logits: Tensor, targets: Tensor, region: Tensor | None) -> tuple[Tensor, Tensor]:
    """Omega (B, h, w) bool and found (B,) bool: ``region``, or the positions predicted as the
    target class, or (where none is) the whole grid with found False.

    Raises:
        ValueError: ``region`` is not a (B, h, w) mask on the logits grid.
    """
    b, _, h, w = logits.shape
    if region is not None:
        if region.shape != (b, h, w):
            raise ValueError(
                f"region must be a (B, h, w) = {(b, h, w)} mask on the logits grid, got {tuple(region.shape)}; "
                "pass None for the positions predicted as the target class."
            )
        return region.to(device=logits.device, dtype=torch.bool), torch.ones(b, dtype=torch.bool, device=logits.device)
    predicted = logits.argmax(dim=1) == targets[:, None, None]
    found = predicted.flatten(1).any(dim=1)
    return predicted | ~found[:, None, None], found


def capture_segmentation(
    model: nn.Module, images: Tensor, targets: Tensor | None, region: Tensor | None = None
) -> SegmentationCapture:
    """Run ``model(images)`` and one activation-only backward of y = sum over Omega of logit_c.

    Args:
        model: an HF ``SegformerForSemanticSegmentation``, or a module holding one whose forward
            returns its logits (B, K, h, w) (e.g. a LightningModule).
        images: (B, C, H, W), normalised as the model expects.
        targets: (B,) long, the explained class of each image; None for the class predicted at
            the most positions (:func:`most_predicted_class`).
        region: (B, h, w) bool on the logits grid, or None for the positions predicted as the class.

    Returns:
        The :class:`SegmentationCapture`.

    Raises:
        TypeError: not a SegFormer model. ValueError: bad targets or region.
    """
    segformer = find_segformer(model)
    if targets is not None and (targets.shape != (images.shape[0],) or targets.dtype != torch.long):
        got = f"{targets.dtype} {tuple(targets.shape)}"
        raise ValueError(f"targets must be a (B,) = ({images.shape[0]},) long tensor of classes, got {got}")
    stages = segformer.segformer.stages
    kept: list[dict[str, Any]] = [{"blocks": [{} for _ in s.blocks]} for s in stages]

    def block_hooks(s: int, j: int, block: Any) -> list[RemovableHandle]:
        record = kept[s]["blocks"][j]

        def on_block_input(_m: nn.Module, args: tuple, kwargs: dict) -> None:
            record["block_input"] = args[0]
            kept[s]["grid"] = (int(args[1]), int(args[2]))

        def on_values(_m: nn.Module, _i: tuple, out: Tensor) -> None:
            record["value_norm"] = value_norms(out.detach(), block.attention.num_attention_heads)

        def on_attention(_m: nn.Module, _i: tuple, out: tuple[Tensor, Tensor]) -> None:
            record["branch"], record["attn"] = out

        return [
            block.register_forward_pre_hook(on_block_input, with_kwargs=True),
            block.attention.v_proj.register_forward_hook(on_values),
            block.attention.register_forward_hook(on_attention),
        ]

    def stage_hook(s: int, stage: Any) -> RemovableHandle:
        return stage.layer_norm.register_forward_hook(lambda _m, _i, out: kept[s].__setitem__("output", out))

    handles: list[RemovableHandle] = []
    with explain_mode(model), torch.inference_mode(False), torch.enable_grad():
        try:
            for s, stage in enumerate(stages):
                handles.append(stage_hook(s, stage))
                for j, block in enumerate(stage.blocks):
                    handles += block_hooks(s, j, block)
            x = images.detach().clone().requires_grad_(True)
            logits = segmentation_logits(model, x)
        finally:
            for h in handles:
                h.remove()
        if targets is None:
            targets = most_predicted_class(logits.detach())
        omega, found = target_region(logits.detach(), targets, region)
        y = (logits.gather(1, targets[:, None, None, None].expand(-1, 1, *logits.shape[-2:]))[:, 0] * omega).sum()
        wanted = [
            t for stage in kept for t in (stage["output"], *[b[k] for b in stage["blocks"] for k in ("attn", "branch")])
        ]
        grads = iter(torch.autograd.grad(y, wanted, allow_unused=True, materialize_grads=True))
    captured = []
    for s, (stage, record) in enumerate(zip(stages, kept)):
        output_grad = next(grads)
        blocks: list[BlockTensors] = []
        for b in record["blocks"]:
            attn_grad, branch_grad = next(grads), next(grads)
            layer = sum(len(x.blocks) for x in stages[:s]) + len(blocks)
            blocks.append(
                BlockTensors(
                    layer,
                    b["attn"].detach(),
                    b["value_norm"],
                    b["block_input"].detach(),
                    b["branch"].detach(),
                    attn_grad.detach(),
                    branch_grad.detach(),
                )  # fmt: skip
            )
        reduction = stage.blocks[0].attention.sequence_reduction_ratio
        stride = stage.patch_embeddings.proj.stride[0]
        captured.append(
            StageTensors(s, record["grid"], stride, reduction, blocks, record["output"].detach(), output_grad.detach())
        )
    height, width = images.shape[-2:]
    return SegmentationCapture(captured, logits.detach(), targets, omega, found, (height, width))


class SegformerCascade:
    """The layers of the parameter-randomisation test for a model holding a SegFormer, top first:
    ``"decode_head"`` (with every module outside the SegFormer that holds parameters), then each
    block from the top stage's last, ``"stages.<s>.blocks.<j>"``; re-initialised with PyTorch's
    default init (``reset_parameters`` of each submodule).

    Args:
        model: the module (a copy, for the test) holding the SegFormer.
    """

    def __init__(self, model: nn.Module) -> None:
        self.segformer = find_segformer(model)

    def cascade(self, model: nn.Module) -> list[tuple[str, list[nn.Module]]]:
        outside = parameter_holders_outside(model, self.segformer)
        blocks = [
            (f"stages.{s}.blocks.{j}", [block])
            for s, stage in enumerate(self.segformer.segformer.stages)
            for j, block in enumerate(stage.blocks)
        ]
        return [("decode_head", [self.segformer.decode_head, *outside]), *blocks[::-1]]

    def reinitialise(self, layer: nn.Module) -> None:
        for module in layer.modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                reset()
