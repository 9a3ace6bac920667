"""The family index: every model family the library explains, and :func:`explainer_for`.

Each family is a subpackage holding its adapter(s) or capture, its explainer, its method table and
its :class:`~gradskip_lightning.core.family.Family` (``FAMILY``); this module only lists them
(adding a family: docs/adapters.md). What a family is and how its networks are found:
:mod:`gradskip_lightning.core.family`.

Example:
    >>> import timm
    >>> vit = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2, num_classes=3)
    >>> explainer = explainer_for(vit, "rollout")
    >>> explainer.family, explainer.task, explainer.method in explainer.methods
    ('timm_vit', 'classification', True)
"""

from __future__ import annotations

from typing import Any

from torch import nn

from gradskip_lightning.core.explanation import ModelExplainer
from gradskip_lightning.core.family import Backbone, Family, family_of, select_backbone
from gradskip_lightning.core.family import backbones as find_backbones
from gradskip_lightning.core.registry import Registry
from gradskip_lightning.families import hf_vit, segformer, swin, timm_vit, torchvision_vit

__all__ = ["FAMILIES", "all_methods", "backbones", "explainer_for"]

#: Every model family, by name, in the order messages list them.
FAMILIES: Registry[Family] = Registry(
    "model family", {f.FAMILY.name: f.FAMILY for f in (timm_vit, torchvision_vit, hf_vit, swin, segformer)}
)


def backbones(model: nn.Module) -> list[Backbone]:
    """The networks of every family in ``model``, by module path
    (:func:`~gradskip_lightning.core.family.backbones`)."""
    return find_backbones(model, list(FAMILIES.values()))


def explainer_for(
    model: nn.Module, method: str = "gradskip", *, backbone: str | None = None, **options: Any
) -> ModelExplainer:
    """The explainer of ``model``'s family, explaining with ``method`` and its ``options``.

    Args:
        backbone: the module path (``model.get_submodule``) of the network to explain when
            ``model`` holds several (``"student"``, ``"nets.student"``); the explained module is
            that submodule, whose forward must return the network's logits. None: ``model``.

    Raises:
        UnsupportedModel (a TypeError): no network of any family, several without ``backbone``, or
            the family's own refusal (e.g. a network without head passed alone).
        ValueError: a method or option the family does not have; a ``backbone`` path that names no
            submodule, a container, or a module without an explainable network (the message lists
            where they are).
    """
    families = list(FAMILIES.values())
    explained = model if backbone is None else select_backbone(model, backbone, families)
    explainer: Any = family_of(explained, families).explainer  # a class implementing the protocol
    return explainer(explained, method, **options)


def all_methods() -> tuple[str, ...]:
    """Every method name of any family, in first-appearance order."""
    return tuple(dict.fromkeys(m for family in FAMILIES.values() for m in family.methods))
