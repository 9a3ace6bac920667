"""How the callback's epoch-end time scales with the probes, the classes, the model and the image size.

From a base point, the main config's callback (``configs/bloodmnist.yaml``'s GradSkipCallback init args,
read through :mod:`~benchmarks.configs`, its discovery stage included) with the time budget off so that
every part runs at every epoch end, on the main config's model and image size (32 probes, 8 classes, its
4-block ViT of width 96 with 4 px patches, 28 px), one factor is varied at a time: ``--probes``,
``--classes``, ``--models`` (:data:`MODEL_SIZES`: width, blocks and heads of a timm ViT, the patch size
kept) and ``--sizes`` (image side in pixels, the patch size kept: 4x the pixels is 4x the tokens).

Each point is one short fit with a real Lightning Trainer on one CPU device: a random-weight
:class:`~gradskip_lightning.training.classifier.ViTClassifier` built from the main config's model settings,
planted-shapes data generated on the fly (``configs/planted_shapes.yaml``'s datamodule: no file; 2 to 8
classes), ``--train-batches`` training batches and one validation batch per epoch, ``--epochs`` epochs (1 by
default: on the base point the first epoch end took 5.3 s and forwarded 5,737 images, the next three 6.0 to
6.3 s and 6,170 to 6,752), the last epoch end reported. Its parts are the callback's own timings
(``GradSkipCallback.epoch_seconds``, split as :mod:`benchmarks.callback` does): maps, scores (the perturbation
forwards), discovery, report (rendering, the loggers, files) and other (the rest of the hook's wall time), in
seconds, with each part's ratio to the base point's measured in the same run. Also counted: the probes
explained by the callback and by the discovery stage, and the images forwarded through the model during the
epoch end, in all and inside the discovery stage (a forward pre-hook on the timm model counts the batch's
images).

The weights are random, trained for 2 batches: the discovery stage forwards some tests' images only when a
test of the run reaches its alert threshold, so on a trained model with a shortcut its cost can differ.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from benchmarks.callback import PARTS, HookTimer, benchmark_logger, configured_callback
from benchmarks.configs import build_datamodule, callback_settings, config_settings
from benchmarks.runs import RunClock
from benchmarks.tables import add_markdown_argument, generated_section, machine_sentence, table, write_section
from gradskip_lightning import GradSkipCallback

#: The factors, in the tables' order: the callback's probes, the data's classes, the model, the image side.
FACTORS = ("probes", "classes", "model", "img_size")

#: Model name -> ViTClassifier size arguments over the main config's (its patch size kept): "main" is the
#: main config's ViT (width 96, 4 blocks, 3 heads); the others are timm's ViT-Ti, ViT-S and ViT-B shapes.
MODEL_SIZES: dict[str, dict[str, int]] = {
    "main": {},
    "vit_tiny": {"embed_dim": 192, "depth": 12, "num_heads": 3},
    "vit_small": {"embed_dim": 384, "depth": 12, "num_heads": 6},
    "vit_base": {"embed_dim": 768, "depth": 12, "num_heads": 12},
}

#: The configs: whose callback, model and image size make the base point, and whose datamodule makes the data.
MAIN_CONFIG = "bloodmnist"
DATA_CONFIG = "planted_shapes"
#: BloodMNIST's classes: the base point's.
MAIN_CLASSES = 8


@dataclass(frozen=True)
class Point:
    """One measured setting.

    Attributes:
        probes: the callback's ``probes.num_probes``.
        classes: classes of the data and the model (planted shapes: 2 to 8).
        model: a :data:`MODEL_SIZES` name.
        img_size: image side in pixels (a multiple of the main config's patch size).
    """

    probes: int
    classes: int
    model: str
    img_size: int


def base_point() -> Point:
    """The main config's own point: its ``num_probes``, BloodMNIST's 8 classes, its model, its image size.

    >>> base_point()
    Point(probes=32, classes=8, model='main', img_size=28)
    """
    probes = callback_settings(MAIN_CONFIG)["probes"]["num_probes"]
    return Point(probes, MAIN_CLASSES, "main", config_settings(MAIN_CONFIG)[1]["size"])


def plan(base: Point, levels: dict[str, list[Any]]) -> list[tuple[str, Any, Point]]:
    """(factor, level, point) of every row: each factor's ``levels`` (the base's level added where missing,
    numbers sorted), the other factors at the base's; a factor without levels is left out.

    >>> rows = plan(Point(32, 8, "main", 28), {"probes": [8, 128], "classes": []})
    >>> [(factor, level) for factor, level, _ in rows]
    [('probes', 8), ('probes', 32), ('probes', 128)]
    >>> rows[0][2]
    Point(probes=8, classes=8, model='main', img_size=28)
    """
    rows = []
    for factor in FACTORS:
        given = list(levels.get(factor) or [])
        if not given:
            continue
        own = getattr(base, factor)
        chosen = given if own in given else [own, *given]
        if factor != "model":
            chosen = sorted(chosen)
        rows += [(factor, level, dataclasses.replace(base, **{factor: level})) for level in chosen]
    return rows


class ForwardCounter(Callback):
    """Images forwarded through the model (the LightningModule's ``model``) during each epoch end: in all,
    and inside the callback's discovery stage.

    List :meth:`start` before the GradSkipCallback and this one after it, as :class:`~.callback.HookTimer`.
    ``counts`` has one ``{"forwarded": n, "discovery_forwarded": n}`` per epoch end (sanity checks excluded).
    """

    def __init__(self, callback: GradSkipCallback) -> None:
        self.counts: list[dict[str, int]] = []
        self._callback = callback
        self._now = {"forwarded": 0, "discovery_forwarded": 0}
        self._in_discovery = False
        self._handle: RemovableHandle | None = None

    def start(self) -> Callback:
        """The callback that zeroes the counts as the epoch end begins."""
        counter = self

        class _Start(Callback):
            def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
                counter._now = {"forwarded": 0, "discovery_forwarded": 0}

        return _Start()

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        model: nn.Module = getattr(pl_module, "model", pl_module)
        self._handle = model.register_forward_pre_hook(self._count)
        discoverer = self._callback.monitor.runner.discoverer
        discoverer.run = self._marked(discoverer.run)  # type: ignore[method-assign]

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._handle is not None:
            self._handle.remove()

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.sanity_checking:
            self.counts.append(dict(self._now))

    def _count(self, module: nn.Module, inputs: tuple[Any, ...]) -> None:
        """Forward pre-hook: add the batch's images (inputs[0] (B, C, H, W))."""
        if inputs and isinstance(inputs[0], Tensor):
            images = inputs[0].shape[0]
            self._now["forwarded"] += images
            self._now["discovery_forwarded"] += images if self._in_discovery else 0

    def _marked(self, run: Callable[..., Any]) -> Callable[..., Any]:
        """``run`` (the discovery stage's), its forwards counted as the stage's."""

        @wraps(run)
        def marked(*args: Any, **kwargs: Any) -> Any:
            self._in_discovery = True
            try:
                return run(*args, **kwargs)
            finally:
                self._in_discovery = False

        return marked


@contextmanager
def _logged_to(kind: str) -> Iterator[Any]:
    """A logger of ``kind`` (``"wandb"``, offline, or ``"csv"``) in a temporary folder, W&B finished after."""
    saved = {name: os.environ.get(name) for name in ("WANDB_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR")}
    with tempfile.TemporaryDirectory() as folder:
        try:
            yield benchmark_logger(kind, folder), folder
        finally:
            if kind == "wandb":
                import wandb

                wandb.finish()
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def measure(point: Point, args: argparse.Namespace) -> dict[str, Any]:
    """One short fit at ``point``; the last epoch end's parts (seconds), hook seconds, probe and image counts.

    ``args``: the subcommand's options (``--epochs``, ``--train-batches``, ``--logger`` and the callback's
    overrides ``--insertion-steps``, ``--compare``, ``--discovery``).
    """
    from gradskip_lightning.data import PlantedShapesDataModule
    from gradskip_lightning.training.classifier import ViTClassifier

    seed_everything(0)
    overrides = argparse.Namespace(**{**vars(args), "config": MAIN_CONFIG, "num_probes": point.probes})
    overrides.max_overhead = None  # the budget off: every part at every epoch end
    callback = configured_callback(overrides)
    per_class = callback.discovery.probes_per_class if callback.discovery is not None else 0
    _, data_args, _ = config_settings(DATA_CONFIG)
    batch = data_args["batch_size"]
    data = build_datamodule(
        DATA_CONFIG,
        PlantedShapesDataModule,
        **{
            **data_args,
            "num_classes": point.classes,
            "img_size": point.img_size,
            "train_size": args.train_batches * batch,
            "val_size": max(batch, 2 * point.probes, 2 * point.classes * per_class),
        },
    )
    model_args = {**config_settings(MAIN_CONFIG)[0], **MODEL_SIZES[point.model]}
    model = ViTClassifier(num_classes=point.classes, img_size=point.img_size, **model_args)
    hook, counter = HookTimer(callback), ForwardCounter(callback)
    with _logged_to(args.logger) as (logger, folder):
        trainer = Trainer(
            max_epochs=args.epochs,
            limit_train_batches=args.train_batches,
            limit_val_batches=1,
            log_every_n_steps=args.train_batches,
            accelerator="cpu",
            devices=1,
            logger=logger,
            callbacks=[hook.start(), counter.start(), callback, hook, counter],
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            default_root_dir=folder,
        )
        trainer.fit(model, datamodule=data)
    parts = {part: hook.parts[-1].get(part, 0.0) for part in PARTS if part != "other"}
    parts["other"] = max(0.0, hook.seconds[-1] - sum(parts.values()))
    probes = callback.monitor.probes
    discovery = callback.monitor.runner.discoverer.probes
    return dict(
        parts=parts,
        hook_s=hook.seconds[-1],
        explained=0 if probes is None else probes.images.shape[0],
        discovery_probes=0 if discovery is None else discovery.images.shape[0],
        **counter.counts[-1],
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``scaling`` subcommand."""
    base = base_point()
    parser.add_argument("--probes", type=int, nargs="*", default=[8, 32, 128], help="probes.num_probes levels")
    parser.add_argument("--classes", type=int, nargs="*", default=[2, 4, 8], help="class levels (2 to 8)")
    parser.add_argument("--models", nargs="*", choices=tuple(MODEL_SIZES), default=["main", "vit_tiny", "vit_small"])
    parser.add_argument("--sizes", type=int, nargs="*", default=[28, 56, 112], help="image side levels, pixels")
    parser.add_argument("--base-probes", type=int, default=base.probes, help="the base point (main config's)")
    parser.add_argument("--base-classes", type=int, default=base.classes)
    parser.add_argument("--base-model", choices=tuple(MODEL_SIZES), default=base.model)
    parser.add_argument("--base-size", type=int, default=base.img_size)
    parser.add_argument("--epochs", type=int, default=1, help="epochs per point; the last epoch end is reported")
    parser.add_argument("--train-batches", type=int, default=2, help="training batches per epoch")
    parser.add_argument("--logger", choices=("wandb", "csv"), default="wandb", help="W&B offline (as the config)")
    parser.add_argument("--insertion-steps", type=int, default=None, help="override the config's")
    parser.add_argument("--compare", nargs="*", default=None, help="override the config's comparison methods")
    parser.add_argument(
        "--discovery", type=int, default=0, metavar="PER_CLASS", help="discovery probes per class (0: the config's)"
    )
    add_markdown_argument(parser)


def run(args: argparse.Namespace) -> list[dict]:
    """Measure every distinct point of :func:`plan` once (one at a time); one record per row, with ratios."""
    clock = RunClock()
    base = Point(args.base_probes, args.base_classes, args.base_model, args.base_size)
    levels = {"probes": args.probes, "classes": args.classes, "model": args.models, "img_size": args.sizes}
    measured: dict[Point, dict[str, Any]] = {}
    records = []
    for factor, level, point in [("base", None, base), *plan(base, levels)]:
        if point not in measured:
            measured[point] = measure(point, args)
            seen = measured[point]
            print(f"{point}: epoch end {seen['hook_s']:.2f} s, forwarded {seen['forwarded']}, parts {seen['parts']}")
        if factor != "base":
            records.append({"factor": factor, "level": level, **dataclasses.asdict(point), **measured[point]})
    for record in records:
        record["ratios"] = ratios(record, measured[base])
    facts = clock.finish("scaling")
    tables = markdown_tables(records)
    print("\n".join(tables))
    if args.markdown is not None:
        write_markdown(args.markdown, facts, tables)
    return [{**record, "facts": facts} for record in records]


def ratios(record: dict[str, Any], base: dict[str, Any]) -> dict[str, float | None]:
    """Each part's, the hook's and the forwarded images' ratio to the base point's (None where the base's is 0).

    >>> ratios({"parts": {"maps": 2.0}, "hook_s": 3.0, "forwarded": 10}, {"parts": {"maps": 1.0}, "hook_s": 1.5,
    ...        "forwarded": 0})
    {'maps': 2.0, 'epoch end': 2.0, 'forwarded': None}
    """
    pairs = {part: (record["parts"][part], base["parts"][part]) for part in record["parts"]}
    pairs["epoch end"] = (record["hook_s"], base["hook_s"])
    pairs["forwarded"] = (record["forwarded"], base["forwarded"])
    return {name: mine / theirs if theirs else None for name, (mine, theirs) in pairs.items()}


def _level(record: dict[str, Any]) -> str:
    level = record["level"]
    return f"{level} px" if record["factor"] == "img_size" else str(level)


def markdown_tables(records: list[dict[str, Any]]) -> list[str]:
    """Two markdown tables, one row per (factor, level): seconds per part with the probes and images, and
    each part's ratio to the base point's (the base's rows read 1.00)."""
    seconds = table(
        ["factor", "level", "probes (+ discovery)", "images forwarded (discovery)", *PARTS, "epoch end s"],
        [
            [
                r["factor"],
                _level(r),
                f"{r['explained']} (+ {r['discovery_probes']})",
                f"{r['forwarded']:,} ({r['discovery_forwarded']:,})",
                *(f"{r['parts'][part]:.3f}" for part in PARTS),
                f"**{r['hook_s']:.2f}**",
            ]
            for r in records
        ],
    )
    names = [*PARTS, "epoch end", "forwarded"]
    ratio = table(
        ["factor", "level", *(f"{name} x" for name in names)],
        [
            [r["factor"], _level(r), *("–" if r["ratios"][n] is None else f"{r['ratios'][n]:.2f}" for n in names)]
            for r in records
        ],
    )
    return [*seconds, "", *ratio]


#: The markers of the generated section in the results page.
BEGIN = "<!-- scaling: generated by python -m benchmarks scaling --markdown -->"
END = "<!-- end of scaling -->"


def write_markdown(path: Path, facts: dict[str, Any], tables: list[str]) -> None:
    """The tables, the command and the machine between :data:`BEGIN` and :data:`END` of ``path``."""
    machine = machine_sentence(facts["machine"], facts["wall_seconds"], what="Whole run (the fits included)")
    write_section(path, generated_section(BEGIN, END, facts["command"], [machine], tables), BEGIN, END)
