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

A model holding several supported networks (a teacher and a student, an EMA copy) is refused,
naming them (:func:`backbones`); ``explainer_for(model, backbone="student")`` explains the one at
that module path (as ``model.get_submodule`` takes it), whatever its family: the explained module
is ``model.get_submodule(backbone)``, so its forward must return that network's logits (a timm
model with its head, an HF ``...ForImageClassification``, torchvision's ViT, a LightningModule).

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

__all__ = [
    "FAMILIES",
    "Backbone",
    "Family",
    "all_methods",
    "backbones",
    "check_backbone",
    "explainer_for",
    "family_of",
    "register_family",
]


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


@dataclass(frozen=True)
class Backbone:
    """One supported network inside a model, and where to find it.

    Attributes:
        path: the module path to pass as ``backbone=``: the network's highest ancestor below the
            model that holds no other network ("" when the model holds only this one).
        module: the module at ``path``.
        network_path: the network's own path (``path`` itself, or below it: ``"student.backbone"``).
        network: the network.
        families: the families that take it.
    """

    path: str
    module: nn.Module
    network_path: str
    network: nn.Module
    families: tuple[str, ...]

    def describe(self) -> str:
        """``'student' (VisionTransformer; timm_vit)``, with the network's path when it lies deeper."""
        where = repr(self.path) if self.path else "the model itself"
        network = type(self.network).__name__
        held = "" if self.network is self.module else f" holding a {network} at {self.network_path!r}"
        return f"{where} ({type(self.module).__name__}{held}; {', '.join(self.families)})"


def backbones(model: nn.Module) -> list[Backbone]:
    """The supported networks of ``model``, by module path.

    A network is a smallest module some family matches (a timm ``VisionTransformer``, an HF
    ``ViTModel``); it is reported at its highest ancestor holding no other network, the module a
    ``backbone=`` path names (``"student"`` for a network at ``"student.backbone"``).

    Example:
        >>> import timm
        >>> vit = lambda: timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2, num_classes=3)
        >>> [b.path for b in backbones(nn.ModuleDict({"teacher": vit(), "student": vit()}))]
        ['teacher', 'student']
    """
    modules = dict(model.named_modules())
    matched = {path: tuple(n for n, f in FAMILIES.items() if f.matches(m)) for path, m in modules.items()}

    def child_paths(path: str) -> list[str]:
        return [f"{path}.{name}" if path else name for name, _ in modules[path].named_children()]

    networks = [p for p, found in matched.items() if found and not any(matched.get(c) for c in child_paths(p))]

    def owner(network: str) -> str:
        parts = network.split(".")
        for end in range(1, len(parts) + 1):
            prefix = ".".join(parts[:end])
            others = [o for o in networks if o != network and (o == prefix or o.startswith(f"{prefix}."))]
            if not others:
                return prefix
        return network

    return [Backbone(owner(n), modules[owner(n)], n, modules[n], matched[n]) for n in networks]


def check_backbone(path: object) -> str:
    """``path`` if it can name a submodule (``"student"``, ``"nets.student"``, ``"models.0"``).

    Raises:
        TypeError: not a string. ValueError: empty, or an empty part (``"a..b"``, ``".a"``).
    """
    if not isinstance(path, str):
        raise TypeError(f"backbone must be a module path such as 'student' or 'nets.student'; got {path!r}")
    if any(not part for part in path.split(".")):
        raise ValueError(
            f"backbone must be a dotted module path such as 'student' or 'nets.student' (what "
            f"model.get_submodule takes); got {path!r}"
        )
    return path


def _listed(found: list[Backbone]) -> str:
    return ", ".join(b.describe() for b in found) if found else "none"


def _select(model: nn.Module, backbone: str) -> nn.Module:
    """``model.get_submodule(backbone)``, or ValueError listing where ``model``'s supported networks are."""
    check_backbone(backbone)
    try:
        module = model.get_submodule(backbone)
    except AttributeError as err:
        raise ValueError(
            f"backbone={backbone!r} is not a submodule of {type(model).__name__} ({err}). Its supported networks "
            f"are at: {_listed(backbones(model))}"
        ) from None
    held = backbones(module)
    if len(held) > 1:
        inside = [b for b in backbones(model) if b.network_path.startswith(f"{backbone}.")]
        raise ValueError(
            f"backbone={backbone!r} is a {type(module).__name__} holding {len(held)} supported networks: "
            f"{_listed(inside)}. Name the one to explain"
        )
    if not held:
        raise ValueError(
            f"backbone={backbone!r} is a {type(module).__name__}, which holds no supported network. "
            f"{type(model).__name__}'s supported networks are at: {_listed(backbones(model))}"
        )
    return module


def family_of(model: nn.Module) -> str:
    """The name of the one registered family that ``model`` is or holds.

    Raises:
        UnsupportedModel (a TypeError): no family matches, or ``model`` holds several networks
            (the message names their module paths and classes, see :func:`backbones`).
    """
    if not isinstance(model, nn.Module):
        raise UnsupportedModel(
            f"Cannot explain a {type(model).__name__}: not a torch.nn.Module. Supported: {_supported()}."
        )
    held = backbones(model)
    if len(held) > 1:
        raise UnsupportedModel(
            f"Cannot explain {type(model).__name__}: it holds {len(held)} supported networks: {_listed(held)}. "
            f"Pass backbone= with the module path of the one to explain (e.g. backbone={held[-1].path!r}); "
            "that module's forward must return its logits"
        )
    found = [name for name, family in FAMILIES.items() if family.matches(model)]
    if len(found) != 1:
        what = "no supported model" if not found else f"models of several families ({', '.join(found)})"
        raise UnsupportedModel(
            f"Cannot explain {type(model).__name__}: it holds {what}; exactly one is needed. Supported: {_supported()}."
        )
    return found[0]


def explainer_for(
    model: nn.Module, method: str = "gradskip", *, backbone: str | None = None, **options: Any
) -> ModelExplainer:
    """The explainer of ``model``'s family, explaining with ``method`` and its ``options``.

    Args:
        backbone: the module path (``model.get_submodule``) of the network to explain when
            ``model`` holds several (``"student"``, ``"nets.student"``); the explained module is
            that submodule, whose forward must return the network's logits. None: ``model``.

    Raises:
        UnsupportedModel (a TypeError): see :func:`family_of`, or the family's own refusal.
        ValueError: a method or option the family does not have; a ``backbone`` path that names no
            submodule, or one without a supported network (the message lists where they are).
    """
    explained = model if backbone is None else _select(model, backbone)
    explainer: Any = FAMILIES[family_of(explained)].explainer  # a class implementing the protocol
    return explainer(explained, method, **options)


def all_methods() -> tuple[str, ...]:
    """Every method name of any registered family, in first-registration order."""
    return tuple(dict.fromkeys(m for _, family in FAMILIES.items() for m in family.methods))
