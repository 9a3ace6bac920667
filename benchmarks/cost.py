"""Cost of one map per method: FLOPs (torch.utils.flop_counter), CPU milliseconds and peak memory.

FLOP convention: FlopCounterMode counts a multiply-add as 2 FLOPs, so a ViT-B/16 forward at 224 px
is about 35.1 GFLOPs here, which is the 17.6 G multiply-accumulates the literature (and the GradSkip
paper) calls "17.6 GFLOPs". Ratios to one forward do not depend on the convention. Attention runs
non-fused during counting (FlopCounterMode sees no FLOPs in fused CPU attention), as during explaining.

Memory: peak resident set size of one batched call over the loaded model (Linux: the peak is reset
through /proc/self/clear_refs after loading), in MiB per image, each (model, method) in a fresh
subprocess so that one configuration's peak cannot hide another's. Milliseconds: the fastest of
``--repeats`` rounds per method, the methods interleaved in one fresh process per model. The row ``floor`` is what any
gradient method pays: one forward with non-fused attention (as explaining runs it) and one
activation-only backward (dy/dx^0 at the tokens entering block 0, no weight gradients); ``x floor`` divides by it.

Models: timm ViTs, torchvision's ViT, timm's Swin, and HF SegFormers and ViTs (optional
``transformers``, imported only for their rows; named with ``--models``): a SegFormer map explains
class 0 summed over the whole logits grid (random weights: a fixed, non-empty target; the cost does
not depend on which).
"""

from __future__ import annotations

import argparse
import gc
import math
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import timm
import torch
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from gradskip_lightning.families.hf_vit import HFViTAdapter, HFViTExplainer
from gradskip_lightning.families.segformer import SEGFORMER_METHODS, SegFormerExplainer
from gradskip_lightning.families.segformer import explain_mode as segformer_explain_mode
from gradskip_lightning.families.swin import SwinAdapter, SwinExplainer
from gradskip_lightning.families.timm_vit import TimmViTExplainer, adapter_for

#: The pseudo-method of the floor row: forward + activation-only backward, no method.
FLOOR = "floor"
#: What a registry entry builds: a model with random weights in eval mode, and its (C, H, W) input.
Built = tuple[nn.Module, tuple[int, int, int]]


def timm_model(name: str) -> Built:
    """``timm.create_model(name)`` with random weights, at its pretrained input size."""
    model: Any = timm.create_model(name, pretrained=False).eval()
    channels, height, width = model.pretrained_cfg["input_size"]
    return model, (channels, height, width)


def torchvision_vit_model(size: int, **config: Any) -> Built:
    """A torchvision ``VisionTransformer(image_size=size, **config)``, random weights, on (3, size, size)."""
    from torchvision.models import VisionTransformer

    return VisionTransformer(image_size=size, **config).eval(), (3, size, size)


def hf_vit_model(size: int, **config: Any) -> Built:
    """An HF ``ViTForImageClassification(ViTConfig(image_size=size, **config))``, random weights, on
    (3, size, size) (imports the optional ``transformers``)."""
    from transformers import ViTConfig, ViTForImageClassification

    return ViTForImageClassification(ViTConfig(image_size=size, **config)).eval(), (3, size, size)


def segformer_model(size: int, **config: Any) -> Built:
    """An HF ``SegformerForSemanticSegmentation(SegformerConfig(**config))``, random weights, on
    (3, size, size) images (imports the optional ``transformers``).

    Raises:
        ImportError: ``transformers`` is not installed.
    """
    try:
        from transformers import SegformerConfig, SegformerForSemanticSegmentation
    except ImportError as error:
        raise ImportError(
            "The SegFormer cost rows need transformers: pip install 'gradskip-lightning[segmentation]', "
            "or leave the segformer_* models out of --models."
        ) from error

    return SegformerForSemanticSegmentation(SegformerConfig(**config)).eval(), (3, size, size)


def segformer_map(model: Any, method: str) -> Callable[[Tensor], object]:
    """images (B, 3, H, W) -> the explanation of class 0 over the whole logits grid
    (B, ceil(H / stride_0), ceil(W / stride_0))."""
    stride = model.config.strides[0]
    explainer = SegFormerExplainer(model, method)

    def run(images: Tensor) -> object:
        b, _, h, w = images.shape
        region = torch.ones(b, -(-h // stride), -(-w // stride), dtype=torch.bool)
        return explainer.explain(images, torch.zeros(b, dtype=torch.long), region)

    return run


@dataclass(frozen=True)
class Family:
    """How the benchmark runs one kind of model.

    Attributes:
        methods: its method names (the floor comes on top).
        eager: model -> context with non-fused attention and eval mode, as explaining runs it.
        logits: (model, images (B, C, H, W)) -> logits (B, K) or (B, K, h, w).
        first_block: model -> the block whose input tokens x^0 the floor differentiates.
        explain: (model, method) -> a call images -> one batched map.
    """

    methods: tuple[str, ...]
    eager: Callable[[nn.Module], AbstractContextManager]
    logits: Callable[[Any, Tensor], Tensor]
    first_block: Callable[[Any], nn.Module]
    explain: Callable[[nn.Module, str], Callable[[Tensor], object]]


def pass_family(explainer: Any, adapter: Callable[[nn.Module], Any], logits: Callable[[Any, Tensor], Tensor]) -> Family:
    """A family explained by one streamed pass: its ``explainer`` class and its methods, its ``adapter`` of a
    model (eager attention, the first block) and how it gives ``logits``."""
    return Family(
        methods=explainer.methods,
        eager=lambda model: adapter(model).explain_mode(model),
        logits=logits,
        first_block=lambda model: adapter(model).blocks[0],
        explain=lambda model, method: explainer(model, method).explain,
    )


def _called(model: Any, images: Tensor) -> Tensor:
    return model(images)


def _hf_logits(model: Any, images: Tensor) -> Tensor:
    return model(pixel_values=images).logits


ModelFamily = Literal["vit", "segformer", "hf_vit", "swin"]
#: Kind of model -> how it is run.
FAMILIES: dict[ModelFamily, Family] = {
    "vit": pass_family(TimmViTExplainer, adapter_for, _called),
    "segformer": Family(
        methods=tuple(SEGFORMER_METHODS),
        eager=segformer_explain_mode,
        logits=_hf_logits,
        first_block=lambda model: model.segformer.stages[0].blocks[0],
        explain=segformer_map,
    ),
    "hf_vit": pass_family(HFViTExplainer, HFViTAdapter, _hf_logits),
    "swin": pass_family(SwinExplainer, SwinAdapter, _called),
}

#: The SegFormer of ``tests/segmentation/conftest.py`` (64 px: stage grids 16/8/4/2).
TINY_SEGFORMER = {
    "hidden_sizes": [8, 8, 16, 16],
    "num_attention_heads": [1, 2, 2, 4],
    "depths": [1, 2, 1, 1],
    "sr_ratios": [4, 2, 1, 1],
    "mlp_ratios": [2, 2, 2, 2],
    "decoder_hidden_size": 16,
    "num_labels": 3,
}


#: ViT-Ti/16 for the torchvision and HF rows: 12 blocks, width 192, 3 heads, MLP 768, 1000 classes.
TINY_VIT_TORCHVISION = {"patch_size": 16, "num_layers": 12, "num_heads": 3, "hidden_dim": 192, "mlp_dim": 768}
TINY_VIT_HF = {
    "patch_size": 16,
    "num_hidden_layers": 12,
    "num_attention_heads": 3,
    "hidden_size": 192,
    "intermediate_size": 768,
    "layer_norm_eps": 1e-6,
    "num_labels": 1000,
}


@dataclass(frozen=True)
class CostModel:
    """A registry entry: the model's family and how to build it (random weights: cost does not
    depend on them)."""

    family: ModelFamily
    build: Callable[[], Built]


MODELS: dict[str, CostModel] = {
    "vit_base_patch16_224": CostModel("vit", partial(timm_model, "vit_base_patch16_224")),
    "deit_base_distilled_patch16_224": CostModel("vit", partial(timm_model, "deit_base_distilled_patch16_224")),
    "vit_tiny_patch16_224": CostModel("vit", partial(timm_model, "vit_tiny_patch16_224")),
    "vit_large_patch16_384": CostModel("vit", partial(timm_model, "vit_large_patch16_384")),
    # MiT-b0 (the SegformerConfig defaults) with ADE20K's 150 classes, at 512 x 512.
    "segformer_mit_b0_512": CostModel("segformer", partial(segformer_model, 512, num_labels=150)),
    "segformer_tiny_64": CostModel("segformer", partial(segformer_model, 64, **TINY_SEGFORMER)),
    # ViT-Ti/16 (vit_tiny_patch16_224's shape) in torchvision's and HF's classes.
    "torchvision_vit_ti16_224": CostModel("vit", partial(torchvision_vit_model, 224, **TINY_VIT_TORCHVISION)),
    "hf_vit_ti16_224": CostModel("hf_vit", partial(hf_vit_model, 224, **TINY_VIT_HF)),
    "swin_tiny_patch4_window7_224": CostModel("swin", partial(timm_model, "swin_tiny_patch4_window7_224")),
}
#: Measured when --models is not given (the others only when named).
DEFAULT_MODELS = ("vit_base_patch16_224", "deit_base_distilled_patch16_224", "vit_tiny_patch16_224")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--models",
        nargs="+",
        default=list(DEFAULT_MODELS),
        choices=list(MODELS),
        help="vit_large_patch16_384 (about 3 GiB per image), the SegFormers and HF ViTs (need "
        "transformers), torchvision's ViT and the Swin only when named",
    )
    every = dict.fromkeys(m for family in FAMILIES.values() for m in (*family.methods, FLOOR))
    parser.add_argument(
        "--methods",
        nargs="+",
        default=None,
        choices=list(every),
        help=f"methods to measure (default: every method of each model's family); {FLOOR!r} "
        "is the forward + activation-only backward row; a method a model lacks is skipped",
    )
    parser.add_argument("--batch-size", type=int, default=8, help="batch of the timed and memory-measured calls")
    parser.add_argument(
        "--repeats", type=int, default=2, help="timed rounds (methods interleaved, fastest kept; 0: no timing)"
    )


def count_flops(fn: Callable[[], object]) -> int:
    """FLOPs (2 per multiply-add) of ``fn()``, backward included."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def forward_flops(model: nn.Module, family: Family, images: Tensor) -> int:
    """FLOPs of one plain forward with non-fused attention (as counted for the maps)."""
    with family.eager(model), torch.no_grad():
        return count_flops(lambda: family.logits(model, images))


def floor_pass(model: nn.Module, family: Family) -> Callable[[Tensor], Tensor]:
    """images (B, C, H, W) -> dy/dx^0 (B, N, D) at the tokens entering the first block, y the sum
    of the predicted logits (over every position for a SegFormer): one forward with non-fused
    attention and one activation-only backward, the floor of every gradient method."""

    def run(images: Tensor) -> Tensor:
        tokens = []
        hook = family.first_block(model).register_forward_pre_hook(lambda _m, args: tokens.append(args[0]))
        try:
            with family.eager(model), torch.enable_grad():
                logits = family.logits(model, images.detach().clone().requires_grad_(True))
        finally:
            hook.remove()
        (grad,) = torch.autograd.grad(logits.max(dim=1).values.sum(), tokens[0])
        return grad

    return run


def ms_per_map(calls: dict[str, Callable[[Tensor], object]], images: Tensor, repeats: int) -> dict[str, float]:
    """CPU wall milliseconds per image of each call: the fastest of ``repeats`` rounds, the calls
    interleaved within each round (after one warm-up round), so that load from other processes on
    a shared machine hits every call alike."""
    best = dict.fromkeys(calls, math.inf)
    for round_ in range(repeats + 1):
        for name, call in calls.items():
            start = time.perf_counter()
            call(images)
            if round_:
                best[name] = min(best[name], (time.perf_counter() - start) * 1000.0 / images.shape[0])
    return best


def _status_mib(key: str) -> float:
    """A size from /proc/self/status (VmRSS: resident now, VmHWM: its peak), in MiB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(key + ":")) / 1024.0


def peak_mib(run: Callable[[], object]) -> float:
    """Peak resident memory of ``run()`` above the resident memory before it, in MiB (Linux)."""
    gc.collect()
    before = _status_mib("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset VmHWM to the current RSS
    run()
    return _status_mib("VmHWM") - before


def load(label: str, batch_size: int) -> tuple[nn.Module, Tensor, Tensor]:
    """The model of ``label`` (random weights, eval), one image and a batch at its input size."""
    torch.manual_seed(0)
    model, (c, h, w) = MODELS[label].build()
    return model, torch.randn(1, c, h, w), torch.randn(batch_size, c, h, w)


def map_call(model: nn.Module, family: Family, method: str) -> Callable[[Tensor], object]:
    """images -> one batched map of ``method`` (or the floor's forward + backward)."""
    return floor_pass(model, family) if method == FLOOR else family.explain(model, method)


def methods_of(label: str, wanted: list[str] | None) -> list[str]:
    """The methods measured on model ``label``: ``wanted`` (None: all) that its family has, and the floor."""
    offered = [*FAMILIES[MODELS[label].family].methods, FLOOR]
    return offered if wanted is None else [m for m in wanted if m in offered]


def measure(label: str, method: str, batch_size: int) -> dict:
    """One row without timing: peak memory of the first batched call, then FLOPs of one image.
    Meant to run alone in a fresh process (see :func:`in_fresh_process`)."""
    model, one, batch = load(label, batch_size)
    family = FAMILIES[MODELS[label].family]
    call = map_call(model, family, method)
    peak = peak_mib(lambda: call(batch))
    forward, per_map = forward_flops(model, family, one), count_flops(lambda: call(one))
    return {
        "model": label,
        "method": method,
        "forward_flops": forward,
        "flops_per_map": per_map,
        "ratio_to_forward": per_map / forward,
        "peak_mib": peak,
        "peak_mib_per_image": peak / batch_size,
        "batch_size": batch_size,
        "threads": torch.get_num_threads(),
    }


def time_methods(label: str, methods: list[str], batch_size: int, repeats: int) -> dict[str, float]:
    """:func:`ms_per_map` of every method on model ``label``, all in this (fresh) process."""
    model, _, batch = load(label, batch_size)
    family = FAMILIES[MODELS[label].family]
    return ms_per_map({method: map_call(model, family, method) for method in methods}, batch, repeats)


def in_fresh_process(fn: Callable[..., dict], *args: object) -> dict:
    """``fn(*args)`` in a new spawned Python process (its own peak memory), returning its result."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def ratio(records: list[dict], label: str, key: str, method: str, reference: str) -> float | None:
    """``key`` of ``method`` over that of ``reference`` for model ``label``; None if one is missing."""
    values = {r["method"]: r[key] for r in records if r["model"] == label}
    return values[method] / values[reference] if method in values and reference in values else None


def run(args: argparse.Namespace) -> list[dict]:
    records = []
    print(__doc__.strip().splitlines()[2].strip(), "...")
    print(f"batch {args.batch_size}, {torch.get_num_threads()} thread(s) in this process; one fresh process per row")
    print(
        f"{'model':32s} {'method':14s} {'fwd GFLOPs':>10s} {'GFLOPs/map':>10s} {'x forward':>9s} "
        f"{'ms/map':>9s} {'MiB/image':>9s} {'x floor':>7s}"
    )
    for label in args.models:
        methods = methods_of(label, args.methods)
        if not methods:
            print(f"{label}: none of {args.methods} applies to a {MODELS[label].family} model; skipped")
            continue
        rows = [in_fresh_process(measure, label, method, args.batch_size) for method in methods]
        timed = args.repeats > 0
        timings = in_fresh_process(time_methods, label, methods, args.batch_size, args.repeats) if timed else {}
        floor = next((r for r in rows if r["method"] == FLOOR), None)
        for record in rows:
            record["ms_per_map"] = timings.get(record["method"], math.nan)
            record["peak_to_floor"] = record["peak_mib"] / floor["peak_mib"] if floor else None
            records.append(record)
            to_floor = f"{record['peak_to_floor']:7.2f}" if floor else f"{'-':>7s}"
            print(
                f"{label:32s} {record['method']:14s} {record['forward_flops'] / 1e9:10.2f} "
                f"{record['flops_per_map'] / 1e9:10.2f} {record['ratio_to_forward']:9.3f} "
                f"{record['ms_per_map']:9.1f} {record['peak_mib_per_image']:9.1f} {to_floor}",
                flush=True,
            )
        speed = ratio(records, label, "ms_per_map", "gradskip", "chefer")
        if timed and speed is not None:
            print(f"{label}: gradskip / chefer ms per map = {speed:.2f}")
    print("FLOPs: 2 per multiply-add (ViT-B/16 forward ~35.1 G = the paper's '17.6 GFLOPs' in MACs).")
    return records
