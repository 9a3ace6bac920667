"""Cost of one map per method: FLOPs (torch.utils.flop_counter) and CPU milliseconds.

FLOP convention: FlopCounterMode counts a multiply-add as 2 FLOPs, so a ViT-B/16 forward at 224 px
is about 35.1 GFLOPs here, which is the 17.6 G multiply-accumulates the literature (and the GradSkip
paper) calls "17.6 GFLOPs". Ratios to one forward do not depend on the convention. Attention runs
non-fused during counting (FlopCounterMode sees no FLOPs in fused CPU attention), as during explaining.
"""
from __future__ import annotations

import argparse
import time

import timm
import torch
from torch.utils.flop_counter import FlopCounterMode

from gradskip_lightning.adapters import find_adapter
from gradskip_lightning.explainer import METHODS, Explainer

#: (label, timm name, create_model overrides); random weights: cost does not depend on them.
MODELS = {
    "vit_base_patch16_224": ("vit_base_patch16_224", {}),
    "deit_base_distilled_patch16_224": ("deit_base_distilled_patch16_224", {}),
    "vit_tiny_patch16_224": ("vit_tiny_patch16_224", {}),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--batch-size", type=int, default=8, help="batch for the millisecond timing")
    parser.add_argument("--repeats", type=int, default=2, help="timed calls per method (after one warm-up)")


def count_flops(fn) -> int:
    """FLOPs (2 per multiply-add) of ``fn()``, backward included."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def forward_flops(model: torch.nn.Module, images: torch.Tensor) -> int:
    """FLOPs of one plain forward with non-fused attention (as counted for the maps)."""
    with find_adapter(model).explain_mode(model), torch.no_grad():
        return count_flops(lambda: model(images))


def ms_per_map(explainer: Explainer, images: torch.Tensor, repeats: int) -> float:
    """Mean CPU wall milliseconds per map over ``repeats`` batched calls, after one warm-up."""
    explainer.explain(images)
    start = time.perf_counter()
    for _ in range(repeats):
        explainer.explain(images)
    return (time.perf_counter() - start) * 1000.0 / (repeats * images.shape[0])


def run(args: argparse.Namespace) -> list[dict]:
    records = []
    print(__doc__.strip().splitlines()[2].strip(), "...")
    print(f"{'model':34s} {'method':14s} {'fwd GFLOPs':>10s} {'GFLOPs/map':>10s} {'x forward':>9s} {'ms/map':>9s}")
    for label in args.models:
        name, overrides = MODELS[label]
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False, **overrides).eval()
        c, h, w = model.pretrained_cfg["input_size"]
        one = torch.randn(1, c, h, w)
        batch = torch.randn(args.batch_size, c, h, w)
        fwd = forward_flops(model, one)
        for method in args.methods:
            explainer = Explainer(model, method)
            per_map = count_flops(lambda: explainer.explain(one))
            record = {
                "model": label,
                "method": method,
                "forward_flops": fwd,
                "flops_per_map": per_map,
                "ratio_to_forward": per_map / fwd,
                "ms_per_map": ms_per_map(explainer, batch, args.repeats),
                "batch_size": args.batch_size,
                "threads": torch.get_num_threads(),
            }
            records.append(record)
            print(
                f"{label:34s} {method:14s} {fwd / 1e9:10.2f} {per_map / 1e9:10.2f} "
                f"{record['ratio_to_forward']:9.3f} {record['ms_per_map']:9.1f}",
                flush=True,
            )
    print("FLOPs: 2 per multiply-add (ViT-B/16 forward ~35.1 G = the paper's '17.6 GFLOPs' in MACs).")
    return records
