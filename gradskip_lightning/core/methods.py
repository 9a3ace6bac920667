"""The timm ViT family's methods: name -> :class:`MethodSpec` (the method's visitor of one pass,
which gives the pass it needs, and its options dataclass). Each method's module registers itself
(``METHOD_SPECS.register(name, MethodSpec(...))`` at its end; :mod:`gradskip_lightning.methods`
imports them all); the :class:`~gradskip_lightning.explainer.Explainer` looks methods up here;
:data:`MethodName` types the same names, in registration order (a test checks that both agree).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

from gradskip_lightning.adapters import CaptureMode
from gradskip_lightning.methods.output import MethodVisitor
from gradskip_lightning.registry import Registry

MethodName = Literal["gradskip", "raw_attention", "rollout", "chefer", "random", "lrp"]


class HasOptions:
    """What every family's method spec shares: its options dataclass and how a call's keyword
    arguments become one (:func:`build_options`)."""

    options: type

    def make_options(self, method: str, **options: Any) -> Any:
        """The options dataclass built from keyword arguments (ValueError naming unknown ones)."""
        return build_options(self.options, method, **options)


@dataclass(frozen=True)
class MethodSpec(HasOptions):
    """One explanation method.

    Attributes:
        visitor: the method's :class:`~gradskip_lightning.methods.output.MethodVisitor` class,
            built from the options for each pass; its ``mode`` picks the pass.
        options: the frozen dataclass of the method's options (keyword arguments of the Explainer).
    """

    visitor: type[MethodVisitor]
    options: type

    @property
    def mode(self) -> CaptureMode:
        """The pass the method needs: "forward", "gradients" or "conservative"."""
        return self.visitor.mode

    @property
    def needs_backward(self) -> bool:
        return self.mode != "forward"


def build_options(options_type: type, method: str, **options: Any) -> Any:
    """``options_type(**options)``, a frozen dataclass of ``method``'s options; ValueError naming
    unknown keywords and the allowed ones.

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass(frozen=True)
        ... class Seeded:
        ...     seed: int = 0
        >>> build_options(Seeded, "random", seed=3)
        Seeded(seed=3)
    """
    allowed = sorted(f.name for f in fields(options_type))
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"Method {method!r} takes no option(s) {unknown}; it takes {allowed}")
    return options_type(**options)


#: The methods of the timm ViT family, in registration order (that of :data:`MethodName`).
METHOD_SPECS: Registry[MethodSpec] = Registry("method")


def method_spec(name: str) -> MethodSpec:
    """The spec of method ``name``; ValueError naming the choices for an unknown one.

    Example:
        >>> import gradskip_lightning.methods  # registers the methods
        >>> method_spec("rollout").needs_backward, method_spec("gradskip").options.__name__
        (False, 'GradSkipOptions')
    """
    return METHOD_SPECS[name]
