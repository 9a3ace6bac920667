"""Unlearning a shortcut during training (augmentative ClArC): :class:`ShortcutCorrection` (:mod:`.core`) takes
a known tag's or a discovered hotspot's or global property's artifact (:mod:`.artifacts`) off its class's images
and puts it on every class's, in the training batches (:mod:`.batches`)."""

from gradskip_lightning.callback.correction.artifacts import (
    ARTIFACT_KINDS,
    Artifact,
    ArtifactKind,
    PatchPaste,
    PropertyPaste,
    erase_from_class,
    paste_share,
    restore_artifact,
)
from gradskip_lightning.callback.correction.core import (
    CORRECTION_VALUES,
    Correction,
    ShortcutCorrection,
    artifact_for,
    property_artifact_for,
)

__all__ = [
    "ARTIFACT_KINDS",
    "Artifact",
    "ArtifactKind",
    "CORRECTION_VALUES",
    "Correction",
    "PatchPaste",
    "PropertyPaste",
    "ShortcutCorrection",
    "artifact_for",
    "erase_from_class",
    "paste_share",
    "property_artifact_for",
    "restore_artifact",
]
