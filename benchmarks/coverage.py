"""Which models the explainers accept, and whether their properties hold on each kind.

Every model name of the ViT-family timm modules is built on the meta device with a classifier head
(as a user fine-tuning it would: no weights, no memory) and handed to the adapter registry:
``accepted`` true, or false with the reason. For each kind of accepted backbone (module, backbone,
block and attention classes, pooling, prefix tokens) one small instance of its first name (random
init, 2 blocks, a 4x4 token grid where the model allows it, float64, CPU) is checked: a batch of 3 gives the
maps of 3 single calls (relative error < 1e-5) and GradSkip conserves relevance at every block.

The other families the same way (:data:`OTHER_FAMILIES`): torchvision's ViT builders and timm's Swin
names on the meta device (one small instance each: 2 blocks, or 2 stages of 2 blocks for Swin), and
every supported HF ``transformers`` ViT class from its default config (a small instance per class;
only when ``transformers`` is installed).
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import timm
import torch
from torch import nn

from gradskip_lightning.core.explanation import UnsupportedModel
from gradskip_lightning.core.pass_explainer import PassExplainer
from gradskip_lightning.core.validation import required
from gradskip_lightning.families import swin
from gradskip_lightning.families.hf_vit import HF_MODELS, HFViTAdapter, HFViTExplainer
from gradskip_lightning.families.swin import SWIN_METHODS, SwinAdapter, SwinExplainer
from gradskip_lightning.families.timm_vit import TimmViTAdapter, TimmViTExplainer, adapter_for
from gradskip_lightning.methods import BlockStep, GradSkipOptions, propagation

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


def kind(adapter: TimmViTAdapter) -> tuple[str, ...]:
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


def small_instance(name: str, full: TimmViTAdapter) -> nn.Module:
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
        if adapter_for(model).grid_size == (4, 4):
            return model
    if built is None:
        raise ValueError(f"{name} cannot be built with depth=2")
    return built


def check_properties(model: nn.Module) -> str:
    """ "" when batch == singles and conservation hold on random images, else what failed."""
    return check_explainer(TimmViTExplainer(model), vit_steps)


def vit_steps(explainer: PassExplainer, images: torch.Tensor, targets: torch.Tensor) -> list[BlockStep]:
    """GradSkip's block steps of one capture through the explainer's adapter (timm, torchvision, HF)."""
    return propagation(explainer.adapter.capture(explainer.model, images, targets), GradSkipOptions())


def swin_steps(explainer: PassExplainer, images: torch.Tensor, targets: torch.Tensor) -> list[BlockStep]:
    """GradSkip's windowed block steps of one Swin capture."""
    adapter: Any = explainer.adapter  # a SwinAdapter: its layout maps window slots to grid positions
    visitor = SWIN_METHODS["gradskip"].step(GradSkipOptions(), adapter.layout(images.device))
    explainer.adapter.capture(explainer.model, images, targets).replay(visitor)
    return required(visitor.steps, "the Swin visitor's steps")


def check_explainer(
    explainer: PassExplainer, steps: Callable[[PassExplainer, torch.Tensor, torch.Tensor], list]
) -> str:
    """ "" when batch == singles and every one of GradSkip's ``steps`` conserves relevance, else what failed."""
    images = torch.randn(BATCH, explainer.in_chans, *explainer.img_size, dtype=torch.float64)
    targets = torch.arange(BATCH) % NUM_CLASSES
    batch = explainer.explain(images, targets)
    singles = torch.cat([explainer.explain(images[i : i + 1], targets[i : i + 1]).maps for i in range(BATCH)])
    error = ((batch.maps - singles).abs().max() / batch.maps.abs().max()).item()
    if not batch.valid.all() or not error < TOLERANCE:
        return f"batch of {BATCH} != single calls (relative error {error:.2e}, valid {batch.valid.tolist()})"
    for step in steps(explainer, images, targets):
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
            adapter = adapter_for(model)
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


def torchvision_vit(name: str) -> nn.Module:
    """torchvision's ViT builder ``name`` with a classifier head, random weights, in eval mode."""
    import torchvision

    return torchvision.models.get_model(name, weights=None, num_classes=NUM_CLASSES).eval()


def small_torchvision_vit() -> nn.Module:
    """2 blocks, width 32, 16 patches of 8 px, float64; the head re-drawn (torchvision zeroes it)."""
    from torchvision.models import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(32, 8, 2, 2, 32, 64, num_classes=NUM_CLASSES)
    nn.init.normal_(model.heads.head.weight, std=0.3)
    return model.eval().double()


def small_swin(name: str) -> nn.Module:
    """``name`` shrunk to 2 stages of 2 blocks, 16 x 16 and 8 x 8 grids, 4 x 4 windows, width 32, float64."""
    torch.manual_seed(0)
    shrink = dict(img_size=32, patch_size=2, window_size=4, embed_dim=32, depths=(2, 2), num_heads=(2, 4))
    return build(name, **shrink).double()


def hf_vit(name: str, **config: object) -> nn.Module:
    """The HF class ``name`` from its default config (``config`` overriding), random weights, eval mode."""
    import transformers

    model_class = getattr(transformers, name)
    return model_class(model_class.config_class(num_labels=NUM_CLASSES, **config)).eval()


def small_hf_vit(name: str) -> nn.Module:
    """2 layers, width 32, 16 patches of 8 px, float64."""
    torch.manual_seed(0)
    shrink = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    return hf_vit(name, image_size=32, patch_size=8, **shrink).double()


def hf_check(name: str) -> str:
    """The properties of the small instance of HF class ``name`` (a base model: with a linear head outside)."""
    model = small_hf_vit(name)
    if HFViTAdapter(model).num_classes == 0:
        model = _BaseModelClassifier(model).double().eval()
    return check_explainer(HFViTExplainer(model), vit_steps)


class _BaseModelClassifier(nn.Module):
    """An HF base model with a linear head on its CLS token (how a base model is used)."""

    def __init__(self, body: Any) -> None:
        super().__init__()
        self.body, self.head = body, nn.Linear(body.config.hidden_size, NUM_CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(pixel_values=images).last_hidden_state[:, 0])


@dataclass(frozen=True)
class OtherFamily:
    """A family outside the timm ViT modules: its names, how one is built on the meta device and
    accepted (raising UnsupportedModel otherwise), and the check of its small instance for a name."""

    names: Callable[[], list[str]]
    build: Callable[[str], nn.Module]
    accept: Callable[[nn.Module], object]
    check: Callable[[str], str]


def _torchvision_names() -> list[str]:
    import torchvision
    from torchvision.models import vision_transformer

    return [name for name in torchvision.models.list_models() if hasattr(vision_transformer, name)]


def _hf_names() -> list[str]:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return []
    return list(HF_MODELS)


#: Family label -> how it is covered (one small instance per family, per class for HF).
OTHER_FAMILIES: dict[str, OtherFamily] = {
    "torchvision vision_transformer": OtherFamily(
        _torchvision_names,
        torchvision_vit,
        adapter_for,
        lambda name: check_explainer(TimmViTExplainer(small_torchvision_vit()), vit_steps),
    ),
    "timm swin_transformer": OtherFamily(
        lambda: timm.list_models(module="swin_transformer"),
        build,
        lambda model: SwinAdapter(swin.FAMILY.find(model)),
        lambda name: check_explainer(SwinExplainer(small_swin(name)), swin_steps),
    ),
    "transformers (hf_vit)": OtherFamily(_hf_names, hf_vit, HFViTAdapter, hf_check),
}


def cover_other(family: str, names: list[str]) -> list[CoverageRecord]:
    """Acceptance of each of ``family``'s ``names`` on the meta device; the first accepted one (every
    accepted HF class) checked on its small instance."""
    records: list[CoverageRecord] = []
    spec = OTHER_FAMILIES[family]
    for name in names:
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = spec.build(name)
        try:
            spec.accept(model)
        except UnsupportedModel as error:
            records.append(CoverageRecord(name, family, False, str(error)))
            continue
        record = CoverageRecord(name, family, True, "")
        if family.startswith("transformers") or not any(r.checked is not None for r in records):
            try:
                record.reason = spec.check(name)
            except Exception as error:  # noqa: BLE001 - a failed check is a record, not the end of the run
                record.reason = f"check raised {type(error).__name__}: {error}"
            record.checked = not record.reason
        records.append(record)
    return records


def run(args: argparse.Namespace) -> list[dict]:
    start = time.perf_counter()
    names = family_names()
    others = {family: spec.names() for family, spec in OTHER_FAMILIES.items()}
    if args.names:
        unknown = set(args.names) - {n for _, n in names} - {n for listed in others.values() for n in listed}
        if unknown:
            raise ValueError(
                f"--names: {sorted(unknown)} are not timm models of {FAMILY_MODULES} nor models of {list(others)}"
            )
        names = [(m, n) for m, n in names if n in args.names]
        others = {family: [n for n in listed if n in args.names] for family, listed in others.items()}
    records = cover(names)
    for family, listed in others.items():
        records += cover_other(family, listed)
    print(f"{'timm module / family':32s} {'accepted':>9s} {'checked kinds':>14s}")
    for module in (*FAMILY_MODULES, *OTHER_FAMILIES):
        rows = [r for r in records if r.family == module]
        if rows:
            kinds = [r.checked for r in rows if r.checked is not None]
            accepted = sum(r.accepted for r in rows)
            print(f"{module:32s} {accepted:4d}/{len(rows):<4d} {sum(kinds):6d}/{len(kinds):<6d} passed")
    accepted = sum(r.accepted for r in records)
    print(f"{'all':32s} {accepted:4d}/{len(records):<4d} ({100 * accepted / max(len(records), 1):.1f} %)")
    for r in records:
        if not r.accepted or r.checked is False:
            print(f"  {r.model}: {r.reason}")
    print(f"{time.perf_counter() - start:.0f} s")
    return [asdict(r) for r in records]
