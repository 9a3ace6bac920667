"""One adapter per backbone family: how GradSkip reaches into a model, and nothing else does.

``find_adapter(model)`` returns the adapter of the one supported backbone inside ``model``;
methods only see the tensors it streams (:mod:`gradskip_lightning.adapters.tensors`). Adding a family: docs/adapters.md.
"""

from gradskip_lightning.adapters import (  # noqa: F401 - importing a family registers its adapter
    beit,
    eva,
    naflexvit,
    torchvision_vit,
    vision_transformer,
    vision_transformer_relpos,
)
from gradskip_lightning.adapters.base import (
    ADAPTERS,
    Adapter,
    UnsupportedModel,
    find_adapter,
    supported,
)
from gradskip_lightning.adapters.tensors import BlockTensors, BlockVisitor, Capture, CaptureMode, Recorder, Top

__all__ = [
    "ADAPTERS",
    "Adapter",
    "BlockTensors",
    "BlockVisitor",
    "Capture",
    "CaptureMode",
    "Recorder",
    "Top",
    "UnsupportedModel",
    "find_adapter",
    "supported",
]
