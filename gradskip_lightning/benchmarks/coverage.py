"""Which timm ViT-family models the Explainer accepts, and whether its properties hold on each kind.

Every model name of the ViT-family timm modules is built on the meta device with a classifier head
(as a user fine-tuning it would: no weights, no memory) and handed to the adapter registry:
``accepted`` true, or false with the reason. For each kind of accepted backbone (module, backbone,
block and attention classes, pooling, prefix tokens) one small instance of its first name (random
init, 2 blocks, a 4x4 token grid where the model allows it, float64, CPU) is checked: a batch of 3 gives the
maps of 3 single calls (relative error < 1e-5) and GradSkip conserves relevance at every block.
"""

from __future__ import annotations

import argparse
import time
import warnings
from dataclasses import asdict, dataclass

import timm
import torch
from torch import nn

from gradskip_lightning.adapters import Adapter, UnsupportedModel, find_adapter
from gradskip_lightning.explainer import Explainer
from gradskip_lightning.methods import GradSkipOptions, propagation

#: The timm modules whose models are ViT-family classifiers.
FAMILY_MODULES = (
    "vision_transformer",
    "deit",
    "vision_transformer_hybrid",
    "vitamin",
    "eva",
    "beit",
    "vision_transformer_relpos",
    "naflexvit",
)
NUM_CLASSES = 3
BATCH = 3
TOLERANCE = 1e-5


@dataclass
class CoverageRecord:
    """One model name: its timm module, whether it is accepted (else why), and its small-instance check.

    ``checked`` is None for a name that was not the one checked for its kind, else whether its
    small instance passed (on failure ``reason`` says which check).
    """

    model: str
    family: str
    accepted: bool
    reason: str
    checked: bool | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--names", nargs="+", default=None, help="only these timm names (default: every one)")


def family_names() -> list[tuple[str, str]]:
    """(timm module, model name) for every model of :data:`FAMILY_MODULES`."""
    return [(module, name) for module in FAMILY_MODULES for name in timm.list_models(module=module)]


def kind(adapter: Adapter) -> tuple[str, ...]:
    """What distinguishes one backbone configuration from another for the adapters."""
    block = adapter.blocks[0]
    return (
        type(adapter.backbone).__name__,
        type(block).__name__,
        type(block.attn).__name__,
        str(adapter.backbone.global_pool),
        str(adapter.num_prefix_tokens),
    )


def build(name: str, **overrides) -> nn.Module:
    """``timm.create_model(name)`` with a classifier head, random weights, in eval mode."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return timm.create_model(name, pretrained=False, num_classes=NUM_CLASSES, **overrides).eval()


def small_instance(name: str, full: Adapter) -> nn.Module:
    """``name`` with 2 blocks, in float64, on a 4x4 token grid (set by the image size or, for
    NaFlexViT, the position-embedding grid), else at the first size the model accepts. ``full``:
    the adapter of the full-size (meta) model; per-block key/value heads become those of its
    fewest-heads block, so grouped-query attention is exercised.

    Float64: a batch must equal single calls up to rounding, and the skip gates of a random wide
    model amplify float32 rounding (a nearly cancelling sum) past any useful tolerance.
    """
    small = (4 * full.patch_size[0], 4 * full.patch_size[1])
    kv_heads = {getattr(block.attn, "num_kv_heads", None) for block in full.blocks}
    grouped = sorted(h for h in kv_heads if h is not None)
    fixed = dict(depth=2, num_kv_heads=(grouped[0],) * 2) if len(kv_heads) > 1 else dict(depth=2)
    built = None
    for overrides in (dict(img_size=small), dict(pos_embed_grid_size=(4, 4)), {}):
        torch.manual_seed(0)
        try:
            model = build(name, **fixed, **overrides).double()
        except (TypeError, AssertionError, ValueError, RuntimeError):
            continue
        built = built or model
        if find_adapter(model).grid_size == (4, 4):
            return model
    if built is None:
        raise ValueError(f"{name} cannot be built with depth=2")
    return built


def check_properties(model: nn.Module) -> str:
    """ "" when batch == singles and conservation hold on random images, else what failed."""
    explainer = Explainer(model)
    images = torch.randn(BATCH, explainer.in_chans, *explainer.img_size, dtype=torch.float64)
    targets = torch.arange(BATCH) % NUM_CLASSES
    batch = explainer.explain(images, targets)
    singles = torch.cat([explainer.explain(images[i : i + 1], targets[i : i + 1]).maps for i in range(BATCH)])
    error = ((batch.maps - singles).abs().max() / batch.maps.abs().max()).item()
    if not batch.valid.all() or not error < TOLERANCE:
        return f"batch of {BATCH} != single calls (relative error {error:.2e}, valid {batch.valid.tolist()})"
    capture = explainer.adapter.capture(model, images, targets)
    for step in propagation(capture, GradSkipOptions()):
        above, below = step.relevance_above.sum(-1), step.relevance_below.sum(-1)
        if not torch.allclose(above, below, rtol=TOLERANCE, atol=TOLERANCE):
            return f"relevance not conserved at block {step.layer}: {above.tolist()} -> {below.tolist()}"
    return ""


def cover(names: list[tuple[str, str]]) -> list[CoverageRecord]:
    """Acceptance of every (module, name) on the meta device, and one checked small instance per kind."""
    records, checked_kinds = [], set()
    for module, name in names:
        with torch.device("meta"):
            model = build(name)
        try:
            adapter = find_adapter(model)
        except UnsupportedModel as error:
            records.append(CoverageRecord(name, module, False, str(error).split(" Supported")[0]))
            continue
        record = CoverageRecord(name, module, True, "")
        key = (module, *kind(adapter))
        if key not in checked_kinds:
            checked_kinds.add(key)
            try:
                record.reason = check_properties(small_instance(name, adapter))
            except Exception as error:  # noqa: BLE001 - a failed check is a record, not the end of the run
                record.reason = f"check raised {type(error).__name__}: {error}"
            record.checked = not record.reason
        records.append(record)
    return records


def run(args: argparse.Namespace) -> list[dict]:
    start = time.perf_counter()
    names = family_names()
    if args.names:
        unknown = set(args.names) - {n for _, n in names}
        if unknown:
            raise ValueError(f"--names: {sorted(unknown)} are not timm models of {FAMILY_MODULES}")
        names = [(m, n) for m, n in names if n in args.names]
    records = cover(names)
    print(f"{'timm module':28s} {'accepted':>9s} {'checked kinds':>14s}")
    for module in FAMILY_MODULES:
        rows = [r for r in records if r.family == module]
        if rows:
            kinds = [r.checked for r in rows if r.checked is not None]
            accepted = sum(r.accepted for r in rows)
            print(f"{module:28s} {accepted:4d}/{len(rows):<4d} {sum(kinds):6d}/{len(kinds):<6d} passed")
    accepted = sum(r.accepted for r in records)
    print(f"{'all':28s} {accepted:4d}/{len(records):<4d} ({100 * accepted / max(len(records), 1):.1f} %)")
    for r in records:
        if not r.accepted or r.checked is False:
            print(f"  {r.model}: {r.reason}")
    print(f"{time.perf_counter() - start:.0f} s")
    return [asdict(r) for r in records]
