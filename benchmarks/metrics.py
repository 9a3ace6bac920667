"""Insertion/deletion throughput by batch size: milliseconds per perturbed image and forward calls.

Run as ``python -m benchmarks metrics``. Defaults: the main config's model
(``configs/bloodmnist.yaml``: a timm ViT of embed 96, 4 blocks, 3 heads, 4 px patches on 28 px
images, random weights) on ``--device`` (cpu), 32 images (the callback's probes), K = 16 steps,
random maps; the batch sizes ``--batch-sizes`` are swept (the per-device default of
:func:`~gradskip_lightning.metrics.perturbation.default_batch_size` comes from this sweep).
"""

from __future__ import annotations

import argparse
import statistics
import time

import timm
import torch

from benchmarks.configs import config_settings
from gradskip_lightning.families.timm_vit import adapter_for
from gradskip_lightning.metrics import CountingModel, insertion_deletion
from gradskip_lightning.metrics.perturbation import default_batch_size


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``metrics`` subcommand."""
    parser.add_argument("--images", type=int, default=32, help="images scored per run")
    parser.add_argument("--steps", type=int, default=16, help="insertion/deletion steps K")
    parser.add_argument(
        "--batch-sizes", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512], help="perturbed images per forward"
    )
    parser.add_argument("--config", default="bloodmnist", help="configs/<name>.yaml whose model is timed")
    parser.add_argument("--img-size", type=int, default=28, help="image side in pixels")
    parser.add_argument("--num-classes", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", choices=("full", "bfloat16"), default="full")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs after one warm-up; the median is reported")
    parser.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> list[dict]:
    """Time insertion_deletion at each batch size; print one line and return one record per batch size."""
    torch.manual_seed(args.seed)
    settings, _, _ = config_settings(args.config)
    model = timm.create_model(
        settings["model_name"],
        pretrained=False,
        num_classes=args.num_classes,
        img_size=args.img_size,
        patch_size=settings["patch_size"],
        depth=settings["depth"],
        num_heads=settings["num_heads"],
        embed_dim=settings["embed_dim"],
    )
    model = model.to(args.device).eval()
    images = torch.randn(args.images, 3, args.img_size, args.img_size, device=args.device)
    targets = torch.randint(0, args.num_classes, (args.images,), device=args.device)
    maps = torch.rand(args.images, args.img_size, args.img_size, device=args.device)
    patch = adapter_for(model).patch_size

    def score(batch_size: int) -> CountingModel:
        counted = CountingModel(model)
        options = dict(patch_size=patch, steps=args.steps, batch_size=batch_size, precision=args.precision)
        insertion_deletion(counted, images, targets, maps, **options)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        return counted

    counts = {batch_size: score(batch_size) for batch_size in args.batch_sizes}  # warm-up
    seconds: dict[int, list[float]] = {batch_size: [] for batch_size in args.batch_sizes}
    for _ in range(args.repeats):  # interleaved, so a load change on a shared machine hits every batch size
        for batch_size in args.batch_sizes:
            start = time.perf_counter()
            score(batch_size)
            seconds[batch_size].append(time.perf_counter() - start)
    records = []
    for batch_size, counted in counts.items():
        median = statistics.median(seconds[batch_size])
        record = {
            "device": args.device,
            "precision": args.precision,
            "images": args.images,
            "steps": args.steps,
            "batch_size": batch_size,
            "forward_calls": counted.calls,
            "forwarded_images": counted.images,
            "ms_per_image": 1000 * median / counted.images,
            "images_per_s": args.images / median,
        }
        records.append(record)
        print(
            f"metrics insertion/deletion on {args.device} ({args.precision}): {args.images} images of "
            f"{args.img_size} px, K={args.steps}, batch {batch_size:4d}: {record['ms_per_image']:.3f} ms per "
            f"forwarded image, {record['images_per_s']:.1f} images/s, {counted.calls} forward calls "
            f"({counted.images} images)"
        )
    print(f"default batch size on {args.device}: {default_batch_size(args.device)}")
    return records
