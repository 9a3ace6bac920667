"""What a model family is (:class:`Family`), and the one way every family finds its networks in a
model (:func:`find_network`, :func:`backbones`, :func:`select_backbone`, :func:`family_of`).

A family is its explainer class (which gives the family's name, ``family``, and its method names,
``methods``), a predicate that recognises one of its networks, and the networks in words. The
family index, :mod:`gradskip_lightning.families`, lists every family and binds these functions to
that list (``explainer_for``).

A network is a module the family's predicate recognises (a timm ``VisionTransformer``, an HF
``ViTForImageClassification``); an outer match holds the inner ones (an HF classifier holds its
base model), so only the outermost count. A model holding several networks (a teacher and a
student, an EMA copy) names the one to explain by its module path (``backbone="student"``); the
explained module is ``model.get_submodule(backbone)``, whose forward must return that network's
logits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from gradskip_lightning.core.explanation import ModelExplainer, UnsupportedModel

__all__ = [
    "Backbone",
    "Family",
    "backbones",
    "check_backbone",
    "family_of",
    "find_network",
    "outermost",
    "select_backbone",
]


@dataclass(frozen=True)
class Family:
    """One model family.

    Attributes:
        explainer: the explainer class, built as ``explainer(model, method, **options)``.
        is_network: True for a network of the family itself (cheap: no forward).
        describe: the family's networks in words, for messages.
        method_names: the ``Literal`` of the family's method names (the structure test checks it
            against ``explainer.methods``).
    """

    explainer: type[ModelExplainer]
    is_network: Callable[[nn.Module], bool]
    describe: str
    method_names: Any

    @property
    def name(self) -> str:
        """The family's name: its explainer's ``family``."""
        return self.explainer.family

    @property
    def methods(self) -> tuple[str, ...]:
        """The method names the family's explainer takes."""
        return self.explainer.methods

    def find(self, model: nn.Module) -> nn.Module:
        """The one outermost network of the family that ``model`` is or holds (:func:`find_network`)."""
        return find_network(model, self.is_network, self.name, self.describe)


def outermost(model: nn.Module, is_network: Callable[[nn.Module], bool]) -> list[tuple[str, nn.Module]]:
    """The outermost modules of ``model`` (itself included) that ``is_network`` accepts: (module path, module)."""
    found = [(path, m) for path, m in model.named_modules() if is_network(m)]
    inner = {id(sub) for _, m in found for sub in m.modules() if sub is not m}
    return [(path, m) for path, m in found if id(m) not in inner]


def find_network(model: nn.Module, is_network: Callable[[nn.Module], bool], family: str, describe: str) -> nn.Module:
    """The one outermost network (``is_network``) of ``family`` that ``model`` is or holds; the one
    finder every family uses.

    Raises:
        UnsupportedModel (a TypeError): none, or several (the message names their paths).
    """
    found = outermost(model, is_network)
    if len(found) != 1:
        where = f" at {', '.join(repr(p) for p, _ in found)}" if found else ""
        raise UnsupportedModel(
            f"Cannot explain {type(model).__name__} as a {family} model: it holds {len(found)} {describe} "
            f"network(s){where}; exactly one is needed."
        )
    return found[0][1]


@dataclass(frozen=True)
class Backbone:
    """One network inside a model, and where to find it.

    Attributes:
        path: the module path to pass as ``backbone=``: the network's highest ancestor below the
            model that holds no other network ("" when the model holds only this one).
        module: the module at ``path``.
        network_path: the network's own path (``path`` itself, or below it: ``"student.backbone"``).
        network: the network.
        family: its family.
        refused: why the family's explainer cannot explain ``module`` ("" when it can): a container
            with no forward, a network without head alone.
    """

    path: str
    module: nn.Module
    network_path: str
    network: nn.Module
    family: Family
    refused: str

    def describe(self) -> str:
        """``'student' (VisionTransformer; timm_vit)``, with the network's path when it lies deeper."""
        where = repr(self.path) if self.path else "the model itself"
        network = type(self.network).__name__
        held = "" if self.network is self.module else f" holding a {network} at {self.network_path!r}"
        return f"{where} ({type(self.module).__name__}{held}; {self.family.name})"


def _refusal(family: Family, module: nn.Module) -> str:
    """Why ``family``'s explainer cannot explain ``module`` ("" when it can); builds nothing but adapters."""
    try:
        family.explainer(module)  # type: ignore[call-arg]  # the default method
    except (UnsupportedModel, ValueError) as error:
        return str(error)
    return ""


def backbones(model: nn.Module, families: Sequence[Family]) -> list[Backbone]:
    """The networks of ``families`` in ``model``, by module path, each at its highest ancestor below
    ``model`` that holds no other network (the module a ``backbone=`` path names: ``"student"`` for
    a network at ``"student.backbone"``), with whether the family can explain that module.

    Example:
        >>> import timm
        >>> from gradskip_lightning.families import FAMILIES
        >>> vit = lambda: timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2, num_classes=3)
        >>> pair = nn.ModuleDict({"teacher": vit(), "student": vit()})
        >>> [(b.path, b.refused) for b in backbones(pair, list(FAMILIES.values()))]
        [('teacher', ''), ('student', '')]
    """
    families = list(families)
    found = [
        (path, m, next(f for f in families if f.is_network(m)))
        for path, m in outermost(model, lambda m: any(f.is_network(m) for f in families))
    ]
    networks = [path for path, _, _ in found]

    def owner(network: str) -> str:
        parts = network.split(".") if network else []
        for end in range(1, len(parts) + 1):
            prefix = ".".join(parts[:end])
            if not any(o != network and (o == prefix or o.startswith(f"{prefix}.")) for o in networks):
                return prefix
        return network

    result = []
    for path, network, family in found:
        module = model.get_submodule(owner(path))
        result.append(Backbone(owner(path), module, path, network, family, _refusal(family, module)))
    return result


def _listed(found: list[Backbone]) -> str:
    return ", ".join(b.describe() for b in found) if found else "none"


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


def _explainable(model: nn.Module, families: Sequence[Family]) -> str:
    """The explainable networks of ``model`` in words, for the hints of an error."""
    return _listed([b for b in backbones(model, families) if not b.refused])


def select_backbone(model: nn.Module, backbone: str, families: Sequence[Family]) -> nn.Module:
    """``model.get_submodule(backbone)`` when it holds exactly one network its family can explain.

    Raises:
        ValueError: no such submodule; a module without a forward (a ``ModuleDict``); one holding
            none or several networks, or a network its family refuses (a headless network alone).
            The message lists where the explainable networks are.
    """
    check_backbone(backbone)
    hint = f"{type(model).__name__}'s networks that can be explained are at: {_explainable(model, families)}"
    try:
        module = model.get_submodule(backbone)
    except AttributeError as err:
        raise ValueError(
            f"backbone={backbone!r} is not a submodule of {type(model).__name__} ({err}). {hint}"
        ) from None
    held = backbones(module, families)
    if len(held) > 1:
        inside = [b for b in backbones(model, families) if b.network_path.startswith(f"{backbone}.") and not b.refused]
        raise ValueError(
            f"backbone={backbone!r} is a {type(module).__name__} holding {len(held)} networks: name the one to "
            f"explain: {_listed(inside)}"
        )
    if not held:
        raise ValueError(
            f"backbone={backbone!r} is a {type(module).__name__}, which holds no supported network. {hint}"
        )
    refused = _refusal(held[0].family, module)
    if refused:
        raise ValueError(f"backbone={backbone!r} cannot be explained: {refused}. {hint}")
    return module


def family_of(model: nn.Module, families: Sequence[Family]) -> Family:
    """The one family of ``families`` whose networks ``model`` is or holds.

    Raises:
        UnsupportedModel (a TypeError): not a module, no network, or several (the message names
            where the explainable ones are, see :func:`backbones`).
    """
    supported = f"{', '.join(f.name for f in families)} (which networks each covers: the README's Supported models)"
    if not isinstance(model, nn.Module):
        raise UnsupportedModel(
            f"Cannot explain a {type(model).__name__}: not a torch.nn.Module. Supported: {supported}."
        )
    held = backbones(model, families)
    if len(held) > 1:
        explainable = [b for b in held if not b.refused]
        example = f" (e.g. backbone={explainable[-1].path!r})" if explainable else ""
        raise UnsupportedModel(
            f"Cannot explain {type(model).__name__}: it holds {len(held)} networks; those that can be explained are "
            f"at: {_listed(explainable)}. Pass backbone= with the module path of the one to explain{example}; "
            "that module's forward must return its logits"
        )
    if not held:
        raise UnsupportedModel(
            f"Cannot explain {type(model).__name__}: it holds no supported network. Supported: {supported}."
        )
    return held[0].family
