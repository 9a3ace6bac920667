"""The registry of model families: which explainer explains a model.

A family is a predicate on the model (``matches``: is it, or does it hold, a network of this
family?) and the explainer class that implements
:class:`~gradskip_lightning.explanation.ModelExplainer` for it; the class gives the family's name
(``family``) and its methods (``methods``). :func:`explainer_for` is a lookup: the one family
whose predicate accepts the model builds its explainer. Each family's module registers it with
:func:`register_family` (as timm's model modules register their models): timm's ViT backbones in
:mod:`gradskip_lightning.explainer` (one :mod:`adapter <gradskip_lightning.adapters>` per timm
class, torchvision's ViT among them), HF SegFormer in :mod:`gradskip_lightning.segmentation.explainer`,
HF ViT/DeiT/DINOv2/BEiT classifiers in :mod:`gradskip_lightning.hf_vit`, timm Swin in
:mod:`gradskip_lightning.swin.explainer`; importing
:mod:`gradskip_lightning` imports them all, so the registry is complete whatever is imported.

Example:
    >>> import timm
    >>> vit = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2, num_classes=3)
    >>> explainer = explainer_for(vit, "rollout")
    >>> explainer.family, explainer.task, explainer.method in explainer.methods
    ('timm_vit', 'classification', True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from gradskip_lightning.adapters import UnsupportedModel
from gradskip_lightning.explanation import ModelExplainer
from gradskip_lightning.registry import Registry

__all__ = ["FAMILIES", "Family", "all_methods", "explainer_for", "family_of", "register_family"]


@dataclass(frozen=True)
class Family:
    """One model family.

    Attributes:
        matches: True when a model is, or holds, a network of the family (cheap: no forward).
        explainer: the explainer class, built as ``explainer(model, method, **options)``.
        describe: the family's networks in words, for error messages.
    """

    matches: Callable[[nn.Module], bool]
    explainer: type[ModelExplainer]
    describe: str

    @property
    def methods(self) -> tuple[str, ...]:
        """The method names the family's explainer takes."""
        return self.explainer.methods


#: The model families, in registration order.
FAMILIES: Registry[Family] = Registry("model family")


def register_family(*, matches: Callable[[nn.Module], bool], explainer: type[ModelExplainer], describe: str) -> Family:
    """Register a model family under its explainer's ``family`` name (see :class:`Family`); returns it."""
    return FAMILIES.register(explainer.family, Family(matches, explainer, describe))


def _supported() -> str:
    return "; ".join(f"{name}: {family.describe}" for name, family in FAMILIES.items())


def family_of(model: nn.Module) -> str:
    """The name of the one registered family that ``model`` is or holds.

    Raises:
        UnsupportedModel (a TypeError): no family, or several, match; the message names them all.
    """
    if not isinstance(model, nn.Module):
        raise UnsupportedModel(
            f"Cannot explain a {type(model).__name__}: not a torch.nn.Module. Supported: {_supported()}."
        )
    found = [name for name, family in FAMILIES.items() if family.matches(model)]
    if len(found) != 1:
        what = "no supported model" if not found else f"models of several families ({', '.join(found)})"
        raise UnsupportedModel(
            f"Cannot explain {type(model).__name__}: it holds {what}; exactly one is needed. Supported: {_supported()}."
        )
    return found[0]


def explainer_for(model: nn.Module, method: str = "gradskip", **options: Any) -> ModelExplainer:
    """The explainer of ``model``'s family, explaining with ``method`` and its ``options``.

    Raises:
        UnsupportedModel (a TypeError): see :func:`family_of`, or the family's own refusal.
        ValueError: a method or option the family does not have.
    """
    explainer: Any = FAMILIES[family_of(model)].explainer  # a class implementing the protocol
    return explainer(model, method, **options)


def all_methods() -> tuple[str, ...]:
    """Every method name of any registered family, in first-registration order."""
    return tuple(dict.fromkeys(m for _, family in FAMILIES.items() for m in family.methods))
