"""The callback's probes: how items are read (:mod:`.items`), the probe set and its checks
(:mod:`.probe_set`), the stratified draw (:mod:`.drawing`) and the set over fits and resumes
(:mod:`.source`)."""

from .drawing import (
    dataset_labels,
    is_segmentation_dataset,
    label_presence,
    load_probes,
    load_segmentation_probes,
    segmentation_pairs,
    stratified_indices,
)
from .items import (
    IMAGE_KEYS,
    ITEM_FORMS,
    LABEL_KEYS,
    OBJECT,
    REGION_KEYS,
    ItemKeys,
    check_region_name,
    explained_labels,
)
from .probe_set import ProbeImages, ProbeSet, check_probes
from .source import ProbeSource

__all__ = [
    "IMAGE_KEYS",
    "ITEM_FORMS",
    "LABEL_KEYS",
    "OBJECT",
    "REGION_KEYS",
    "ItemKeys",
    "ProbeImages",
    "ProbeSet",
    "ProbeSource",
    "check_probes",
    "check_region_name",
    "dataset_labels",
    "explained_labels",
    "is_segmentation_dataset",
    "label_presence",
    "load_probes",
    "load_segmentation_probes",
    "segmentation_pairs",
    "stratified_indices",
]
