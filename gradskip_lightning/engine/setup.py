"""What a door's setup builds and checks from the model and the datamodule (or a ``transformers`` model's config).

Each function refuses a bad setup with a message naming the argument and the fix, before any
training step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from gradskip_lightning.core.explanation import ModelExplainer
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.engine.discovery.stage import DiscoveryStage
from gradskip_lightning.engine.output.report import probe_sheet
from gradskip_lightning.engine.output.sinks import ProbeSheet
from gradskip_lightning.engine.probes import ProbeSet, check_probes
from gradskip_lightning.engine.settings import RenderSettings, ScoreSettings
from gradskip_lightning.families import explainer_for
from gradskip_lightning.shortcuts.tags import SpuriousTag
from gradskip_lightning.shortcuts.transplant import Transplant

__all__ = [
    "folder",
    "refuse_shared_folder",
    "explainers_for",
    "checked_normalisation",
    "checked_class_names",
    "checked_transplant",
    "DataSetup",
    "data_setup",
    "check_patch_counts",
    "check_discovery",
]


def folder(prefix: str) -> str:
    """The output folder name of a log prefix: "gradskip/" -> "gradskip", "gs/a/" -> "gs_a"."""
    return prefix.strip("/").replace("/", "_") or "gradskip"


def refuse_shared_folder(prefix: str, others: Sequence[str]) -> None:
    """Refuse a ``log_prefix`` whose output folder another callback's prefix (``others``) shares."""
    for other in others:
        if folder(other) == folder(prefix):
            raise ValueError(
                f"two GradSkipCallbacks on this Trainer log under log_prefix {prefix!r} and {other!r}, which share "
                f"the output folder {folder(prefix)!r}: their keys and files would overwrite each other. Give each "
                "a distinct log_prefix, e.g. 'rollout/'"
            )


def explainers_for(
    pl_module: nn.Module, methods: Sequence[str], options: dict[str, object], backbone: str | None = None
) -> dict[str, ModelExplainer]:
    """An explainer per method name (the first gets ``options``) of the network at the module path
    ``backbone`` of ``pl_module`` (None: ``pl_module``), through :func:`~gradskip_lightning.explainer_for`.

    ``pl_module``: the LightningModule the hooks receive, or the model a ``transformers.Trainer``'s
    hooks do. The path is relative to it, also under DDP (which wraps it without copying: the
    explained submodule holds the weights being trained).
    """
    explainers = {}
    for name in methods:
        try:
            explainers[name] = explainer_for(
                pl_module, method=name, backbone=backbone, **(options if name == methods[0] else {})
            )
        except TypeError as err:  # one short message, not chained to the family search's
            received = f"{type(pl_module).__module__}.{type(pl_module).__qualname__}"
            raise TypeError(
                f"GradSkipCallback: {str(err).rstrip('.')}. Received a {received}: pass a module that is or holds one "
                "such network (several: name it, backbone='<its module path>')."
            ) from None
    return explainers


def checked_normalisation(
    explainer: ModelExplainer, given: Normalisation | None, datamodule: Any
) -> Normalisation | None:
    """The images' normalisation: the front door's ``given``, else the datamodule's ``mean``/``std`` (None without
    either), with 1 or ``in_chans`` values."""
    normalisation = given or Normalisation.of(datamodule)
    if normalisation is not None:
        normalisation.check_channels(explainer.in_chans, "normalisation" if given else "the datamodule's mean/std")
    return normalisation


def checked_class_names(explainer: ModelExplainer, names: Sequence[str] | None) -> list[str] | None:
    """The datamodule's class names if there is one per class (None without names)."""
    if not names:
        return None
    if len(names) < explainer.num_classes:
        raise ValueError(
            f"datamodule.class_names has {len(names)} names but the model has {explainer.num_classes} classes: give "
            "one name per class (or none)"
        )
    return list(names)


def checked_transplant(
    explainer: ModelExplainer,
    transplant: SpuriousTag | bool,
    datamodule_tag: SpuriousTag | None,
    normalisation: Normalisation | None,
) -> Transplant | None:
    """The live transplant test of the callback's ``transplant`` argument (None when False)."""
    if transplant is False:
        return None
    if explainer.task != "classification":
        raise ValueError(f"transplant tests a classifier's shortcut; a {explainer.task} model has none: use False")
    tag = transplant if isinstance(transplant, SpuriousTag) else datamodule_tag
    if tag is None:
        raise ValueError(
            "transplant=True uses the datamodule's tag, but the datamodule has none: give the tag "
            "(transplant: {target_class: ..., position: ...}) or use a datamodule with a tag"
        )
    if not 0 <= tag.target_class < explainer.num_classes:
        raise ValueError(f"transplant tag's target_class {tag.target_class} is not in [0, {explainer.num_classes})")
    if explainer.img_size is not None:
        tag.check_fits(*explainer.img_size)
    if normalisation is None:
        raise ValueError(
            "transplant pastes the tag in pixel values and needs the images' normalisation: give "
            "normalisation=Normalisation(mean=..., std=...), or use a datamodule with mean/std attributes"
        )
    return Transplant(tag, normalisation)


@dataclass(frozen=True)
class DataSetup:
    """What the callback takes from the datamodule, checked against the model.

    Attributes:
        multilabel: the datamodule's ``task`` is "multilabel".
        normalisation: the images' normalisation: the callback's, else the datamodule's; None without either
            (pictures then min-max scale each image, image properties each channel's range over the probes).
        class_names: one name per class, or None (class indices are shown).
        transplant: the live transplant test, or None.
    """

    multilabel: bool
    normalisation: Normalisation | None
    class_names: list[str] | None
    transplant: Transplant | None


def data_setup(
    explainer: ModelExplainer, datamodule: Any, normalisation: Normalisation | None, transplant: SpuriousTag | bool
) -> DataSetup:
    """The callback's :class:`DataSetup` from its ``normalisation``, ``transplant`` and the datamodule (or None)."""
    normalisation = checked_normalisation(explainer, normalisation, datamodule)
    return DataSetup(
        multilabel=getattr(datamodule, "task", None) == "multilabel",
        normalisation=normalisation,
        class_names=checked_class_names(explainer, getattr(datamodule, "class_names", None)),
        transplant=checked_transplant(explainer, transplant, getattr(datamodule, "tag", None), normalisation),
    )


def check_patch_counts(
    explainer: ModelExplainer, image_size: Sequence[int], insertion_steps: int, fvt_top_k: int
) -> None:
    """Refuse ``insertion_steps`` or ``fvt_top_k`` above the number of patches of the probes' maps."""
    (height, width), (ph, pw) = image_size, explainer.patch_size
    patches = (height // ph) * (width // pw)
    for name, value in (("insertion_steps", insertion_steps), ("fvt_top_k", fvt_top_k)):
        if value > patches:
            raise ValueError(
                f"scores.{name}={value} is above the {patches} patches of the probes ({height}x{width} px in "
                f"{ph}x{pw} px patches): every epoch would fail. Use ScoreSettings({name}=...) of at most {patches}"
            )


def prepared_sheet(
    explainer: ModelExplainer, probes: ProbeSet, data: DataSetup, scores: ScoreSettings, render: RenderSettings
) -> ProbeSheet:
    """Check ``probes`` against the model and the scores (before any epoch) and build their display sheet."""
    check_probes(probes, explainer.in_chans, explainer.img_size, explainer.num_classes)
    explainer.check_images(probes.images)  # what the family needs besides (SegFormer: sides it divides)
    check_patch_counts(explainer, probes.images.shape[-2:], scores.insertion_steps, scores.fvt_top_k)
    names = data.class_names or [str(c) for c in range(explainer.num_classes)]
    return probe_sheet(probes, names, data.normalisation, render.display_size)


def check_discovery(explainer: ModelExplainer, stage: DiscoveryStage | None) -> None:
    """Refuse the discovery stage on a model it does not analyse (it summarises a classifier's maps per class)."""
    if stage is not None and explainer.task != "classification":
        raise ValueError(
            f"discovery=DiscoveryStage() finds a classifier's shortcuts; this is a {explainer.task} "
            f"model ({explainer.family}): per-class region summaries are not built for it. Leave discovery off "
            "(discovery=None, the default)"
        )
