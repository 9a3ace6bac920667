"""One adapter per backbone family: how GradSkip reaches into a model, and nothing else does.

``find_adapter(model)`` returns the adapter of the one supported backbone inside ``model``;
methods and metrics only see the :class:`Capture` it records. Adding a family: docs/adapters.md.
"""
from gradskip_lightning.adapters import (  # noqa: F401 - importing a family registers its adapter
    beit,
    eva,
    naflexvit,
    vision_transformer,
    vision_transformer_relpos,
)
from gradskip_lightning.adapters.base import (
    ADAPTERS,
    Adapter,
    Capture,
    UnsupportedModel,
    find_adapter,
    supported,
)

__all__ = ["ADAPTERS", "Adapter", "Capture", "UnsupportedModel", "find_adapter", "supported"]
