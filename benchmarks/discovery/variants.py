"""The models of the discovery benchmark: stamps at positions no config uses, a stamp on part of a class, a
dark bar across a patch boundary, the clean model, the negative control, and the global shortcuts (colour
casts of three strengths, a darkening, a blur on one class, and their property controls); each as a
datamodule of the dataset's config."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, get_args

from benchmarks.configs import build_datamodule, config_settings
from benchmarks.training import with_data_root
from gradskip_lightning.data.base import ImageClassificationDataModule
from gradskip_lightning.shortcuts.tags import SpuriousTag

from ..shortcuts import ACQUISITION, HELD_OUT, SHORTCUTS, ShortcutName, add_shortcut

#: stamped: the stamp on (a share of) one class; clean: no stamp; control: the stamp on every class alike;
#: partial: the stamp on :data:`PARTIAL_P` of one class's images; bar: a dark bar across a patch boundary on one
#: class; corrected: the stamped data trained with the discovery stage and a
#: :class:`~gradskip_lightning.ShortcutCorrection` following it (the stamped model, unlearning its stamp); the
#: global variants (:data:`GLOBAL`, no stamp): cast, cast_weak, cast_strong, dim and blur on one class, and the
#: property controls cast_control, dim_control and blur_control (the same change on every class alike); the
#: acquisition families of :data:`~benchmarks.shortcuts.ACQUISITION` and the held-out ones of
#: :data:`~benchmarks.shortcuts.HELD_OUT` on one class, each with its ``_control``.
Variant = Literal[
    "stamped", "clean", "control", "cast", "partial", "bar", "corrected", "cast_weak", "cast_strong", "dim", "blur",
    "cast_control", "dim_control", "blur_control",
    "white_balance", "stain", "gain", "gamma", "saturation", "jpeg", "resolution", "focus", "sensor_noise",
    "white_balance_control", "stain_control", "gain_control", "gamma_control", "saturation_control", "jpeg_control",
    "resolution_control", "focus_control", "sensor_noise_control",
    "resolution_strong", "focus_strong", "resolution_strong_control", "focus_strong_control",
    "vignette", "hue", "sharpen", "contrast", "chromatic", "dead_pixels", "frame", "banding",
    "vignette_control", "hue_control", "sharpen_control", "contrast_control", "chromatic_control",
    "dead_pixels_control", "frame_control", "banding_control",
    "radial_chromatic", "column_stripes", "interlace", "column_noise",
    "radial_chromatic_control", "column_stripes_control", "interlace_control", "column_noise_control",
    "radial_chromatic_strong", "interlace_strong", "column_noise_strong",
    "radial_chromatic_strong_control", "interlace_strong_control", "column_noise_strong_control",
    "illumination", "zoom", "motion_blur", "posterize",
    "illumination_control", "zoom_control", "motion_blur_control", "posterize_control",
    "illumination_strong", "zoom_strong", "motion_blur_strong", "posterize_strong",
    "illumination_strong_control", "zoom_strong_control", "motion_blur_strong_control", "posterize_strong_control",
    "zoom_severe", "motion_blur_severe", "posterize_severe",
    "zoom_severe_control", "motion_blur_severe_control", "posterize_severe_control",
    "motion_blur_extreme", "motion_blur_extreme_control", "demosaic", "dust", "demosaic_control", "dust_control",
    "demosaic_strong", "dust_strong", "demosaic_strong_control", "dust_strong_control",
]  # fmt: skip
VARIANTS: tuple[Variant, ...] = get_args(Variant)
#: The variants whose class carries a shortcut with a place (the transplant's targets).
PLACED: tuple[Variant, ...] = ("stamped", "partial", "bar", "corrected")
#: The variants whose maps are traced (the hotspot tables'); the other global variants trace their property
#: transplants only (every model does).
MAPPED: tuple[Variant, ...] = (*PLACED, "clean", "control", "cast")
#: Share of every class's images stamped in the negative control (and given the change in a property control).
CONTROL_P = 0.5


@dataclass(frozen=True)
class GlobalVariant:
    """A variant with a shortcut of :data:`~benchmarks.shortcuts.SHORTCUTS`: on the
    dataset's class, or (``control``) on :data:`CONTROL_P` of every class's images alike."""

    shortcut: ShortcutName
    control: bool = False


def _global(shortcuts: tuple[ShortcutName, ...], control: bool = False) -> dict[Variant, GlobalVariant]:
    """The variant of each of ``shortcuts`` on one class, or (``control``) its ``<name>_control`` on every class."""
    found = {}
    for shortcut in shortcuts:
        name = f"{shortcut}_control" if control else shortcut
        if name not in VARIANTS:
            raise ValueError(f"{name!r} is not a Variant")
        found[name] = GlobalVariant(shortcut, control)
    return found


#: The global variants, in the order of the report's rows. ``cast`` keeps its meaning since its first version:
#: (0.12, 0, -0.12) added to the RGB pixel values in [0, 1] units (it was added as that shift divided by the std
#: to the normalised images: the same).
GLOBAL: dict[Variant, GlobalVariant] = {
    **_global(("cast_weak", "cast", "cast_strong", "dim", "blur")),
    **_global(("cast", "dim", "blur"), control=True),
    **_global(ACQUISITION),
    **_global(ACQUISITION, control=True),
    **_global(HELD_OUT),
    **_global(HELD_OUT, control=True),
}
#: The variants a run trains unless told: all but the acquisition and held-out families (opt in with ``--variants``).
DEFAULT_VARIANTS: tuple[Variant, ...] = tuple(
    v for v in VARIANTS if v not in GLOBAL or GLOBAL[v].shortcut not in (*ACQUISITION, *HELD_OUT)
)
#: Share of the class's images stamped in the ``partial`` variant.
PARTIAL_P = 0.6


@dataclass(frozen=True)
class Stamp:
    """A checkerboard stamp of ``size`` px at ``position`` (row, column) on ``strength`` of one class's images;
    with ``bar`` (height, width) a black bar of that many px instead."""

    size: int
    position: tuple[int, int]
    strength: float = 1.0
    bar: tuple[int, int] | None = None

    @property
    def pattern(self) -> tuple[tuple[float, ...], ...]:
        """(size, size) black-and-white checkerboard, or the (height, width) black bar."""
        if self.bar is not None:
            return ((0.0,) * self.bar[1],) * self.bar[0]
        return tuple(tuple(float((row + col) % 2) for col in range(self.size)) for row in range(self.size))

    def tag(self, target: int, p_in: float, p_out: float) -> SpuriousTag:
        """The stamp as a :class:`SpuriousTag` of class ``target``, on the shares ``p_in`` and ``p_out``."""
        return SpuriousTag(target_class=target, p_in=p_in, p_out=p_out, pattern=self.pattern, position=self.position)

    def describe(self) -> str:
        shape = f"{self.size} px" if self.bar is None else f"{self.bar[0]} x {self.bar[1]} px dark bar"
        return f"{shape} at {self.position}, {self.strength:.0%}"


@dataclass(frozen=True)
class BenchData:
    """A dataset of the benchmark: its config, the shortcut's class (every variant's), the stamps (seed i uses
    stamp ``i % len(stamps)``) and the bar (across a boundary of the config's 4 px patches)."""

    config: str
    target: int
    stamps: tuple[Stamp, ...]
    bar: Stamp


#: Planted shapes (32 px, objects kept clear of the stamp, which must end by 23 px) and BloodMNIST (28 px).
#: The configs and tests use the top-left corner and class 0; these stamps use neither.
DATASETS: dict[str, BenchData] = {
    "planted_shapes": BenchData(
        "planted_shapes",
        target=2,
        stamps=(Stamp(4, (14, 14)), Stamp(6, (0, 13)), Stamp(4, (13, 0), strength=0.8)),
        bar=Stamp(0, (17, 13), bar=(2, 6)),  # columns 13-18: patches 3 and 4
    ),
    "bloodmnist": BenchData(
        "bloodmnist",
        target=5,
        stamps=(Stamp(4, (24, 24)), Stamp(6, (0, 22)), Stamp(4, (12, 12), strength=0.8)),
        bar=Stamp(0, (25, 9), bar=(2, 6)),  # columns 9-14: patches 2 and 3
    ),
}


def stamp_of(dataset: str, seed: int, variant: Variant = "stamped") -> Stamp:
    """The stamp of ``dataset``'s models of ``variant`` under training ``seed``: the seed's (at :data:`PARTIAL_P`
    for ``partial``), or the dataset's bar."""
    bench = DATASETS[dataset]
    if variant == "bar":
        return bench.bar
    stamp = bench.stamps[seed % len(bench.stamps)]
    return replace(stamp, strength=PARTIAL_P) if variant == "partial" else stamp


def make_datamodule(
    dataset: str, variant: Variant, seed: int, data_root: Path | None, target: int | None = None
) -> ImageClassificationDataModule:
    """The datamodule of ``dataset``'s config for ``variant`` under ``seed``: every variant carries the
    seed's stamp as its tag (none stamped for clean and the global variants), so the images are otherwise the same;
    a global variant's splits carry its shortcut (:func:`~benchmarks.shortcuts.add_shortcut`). The shortcut's class
    is ``target`` (None: the dataset's :attr:`BenchData.target`)."""
    bench = DATASETS[dataset]
    target = bench.target if target is None else target
    _, data, _ = config_settings(bench.config)
    stamp = stamp_of(dataset, seed, variant)
    shares: dict[Variant, tuple[float, float]] = {
        "stamped": (stamp.strength, 0.0),
        "partial": (stamp.strength, 0.0),
        "bar": (stamp.strength, 0.0),
        "corrected": (stamp.strength, 0.0),
        "control": (CONTROL_P, CONTROL_P),
    }  # clean and the global variants: none
    tag = stamp.tag(target, *shares.get(variant, (0.0, 0.0)))
    data = with_data_root(dataset, {**data, "tag": tag}, data_root)
    datamodule = build_datamodule(bench.config, ImageClassificationDataModule, **data)
    if variant in GLOBAL:
        shortcut = GLOBAL[variant]
        add_shortcut(datamodule, target, SHORTCUTS[shortcut.shortcut].change, shortcut.control, CONTROL_P)
    return datamodule
