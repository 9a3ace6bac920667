"""Insertion/deletion throughput: images scored per second and forward calls made.

Run as ``python -m gradskip_lightning.benchmarks metrics`` (defaults: 64 images of 32 px,
K = 16 steps, a random-weight timm ViT with 8 px patches, random maps).
"""

from __future__ import annotations

import argparse
import statistics
import time

import timm
import torch

from gradskip_lightning.adapters import find_adapter
from gradskip_lightning.metrics import CountingModel, insertion_deletion


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``metrics`` subcommand."""
    parser.add_argument("--images", type=int, default=64, help="images scored per run")
    parser.add_argument("--img-size", type=int, default=32, help="image side in pixels")
    parser.add_argument("--patch-size", type=int, default=8, help="ViT patch side in pixels (the perturbation unit)")
    parser.add_argument("--steps", type=int, default=16, help="insertion/deletion steps K")
    parser.add_argument("--batch-size", type=int, default=256, help="perturbed images per forward call")
    parser.add_argument("--depth", type=int, default=2, help="ViT blocks")
    parser.add_argument("--embed-dim", type=int, default=48, help="ViT width")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs after one warm-up; the median is reported")
    parser.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> list[dict]:
    """Time insertion_deletion; print one line and return one record."""
    torch.manual_seed(args.seed)
    model = timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=False,
        num_classes=8,
        img_size=args.img_size,
        patch_size=args.patch_size,
        depth=args.depth,
        num_heads=3,
        embed_dim=args.embed_dim,
    ).eval()
    images = torch.randn(args.images, 3, args.img_size, args.img_size)
    targets = torch.randint(0, 8, (args.images,))
    maps = torch.rand(args.images, args.img_size, args.img_size)
    options = dict(patch_size=find_adapter(model).patch_size, steps=args.steps, batch_size=args.batch_size)

    def score() -> int:
        counted = CountingModel(model)
        insertion_deletion(counted, images, targets, maps, **options)
        return counted.calls

    forward_calls = score()  # warm-up
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        score()
        seconds.append(time.perf_counter() - start)
    record = {
        "images": args.images,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "forward_calls": forward_calls,
        "images_per_s": args.images / statistics.median(seconds),
    }
    print(
        f"metrics insertion/deletion: {record['images']} images of {args.img_size} px, K={record['steps']}, "
        f"batch {record['batch_size']}: {record['images_per_s']:.1f} images/s, "
        f"{record['forward_calls']} forward calls ({2 * args.images * (args.steps + 1)} perturbed images)"
    )
    return [record]
