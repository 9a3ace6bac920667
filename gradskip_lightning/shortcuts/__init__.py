"""Everything about shortcuts: spurious tags (:mod:`.tags`), the live transplant test
(:mod:`.transplant`), hotspot discovery from class-mean maps (:mod:`.discovery`, with
:mod:`.discovery_maps`, :mod:`.discovery_strategies`, :mod:`.discovery_transplant`, the pixel sample's
:mod:`.discovery_pixels`; their family-wise
error control :mod:`.multiplicity`), image-wide
properties and their transfer tests (:mod:`.image_properties`, :mod:`.discovery_properties`, the probes' side
kept over a fit :mod:`.probe_transfers`) and the
artifacts a correction pastes (:mod:`.artifacts`).

Functions of tensors and callables (a model's forward), like :mod:`gradskip_lightning.metrics`: no
training loop, no model family, no dataset loader.
"""

from gradskip_lightning.shortcuts.discovery import (
    ClassMapSummary,
    Discovery,
    DiscoverySettings,
    PixelSample,
    discover,
    summarise_classes,
)
from gradskip_lightning.shortcuts.tags import SPURIOUS_THRESHOLD, SpuriousTag, spurious_score

__all__ = [
    "SPURIOUS_THRESHOLD",
    "ClassMapSummary",
    "Discovery",
    "DiscoverySettings",
    "PixelSample",
    "SpuriousTag",
    "discover",
    "spurious_score",
    "summarise_classes",
]
