"""Method name -> :class:`MethodSpec`: the function of the capture, whether it needs the backward,
and its options dataclass. The :class:`~gradskip_lightning.explainer.Explainer` looks methods up here.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

from gradskip_lightning.adapters import Capture
from gradskip_lightning.methods.baselines import (
    NoOptions,
    RandomOptions,
    chefer_method,
    random_method,
    raw_attention_method,
    rollout_method,
)
from gradskip_lightning.methods.gradskip import GradSkipOptions, gradskip
from gradskip_lightning.methods.lrp import lrp_method
from gradskip_lightning.methods.output import MethodOutput

MethodName = Literal["gradskip", "raw_attention", "rollout", "chefer", "lrp", "random"]


@dataclass(frozen=True)
class MethodSpec:
    """One explanation method.

    Attributes:
        fn: (capture, options) -> :class:`~gradskip_lightning.methods.output.MethodOutput`.
        needs_backward: whether the capture must hold gradients.
        options: the frozen dataclass of the method's options (keyword arguments of the Explainer).
        conservative: whether the capture holds attention and norm denominators constant in the
            backward and keeps only dy/dx^0 (CP-LRP).
    """

    fn: Callable[[Capture, Any], MethodOutput]
    needs_backward: bool
    options: type
    conservative: bool = False

    def make_options(self, method: str, **options: Any) -> Any:
        """The options dataclass built from keyword arguments; ValueError naming unknown ones."""
        allowed = sorted(f.name for f in fields(self.options))
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise ValueError(f"Method {method!r} takes no option(s) {unknown}; it takes {allowed}")
        return self.options(**options)


METHOD_SPECS: dict[str, MethodSpec] = {
    "gradskip": MethodSpec(gradskip, needs_backward=True, options=GradSkipOptions),
    "raw_attention": MethodSpec(raw_attention_method, needs_backward=False, options=NoOptions),
    "rollout": MethodSpec(rollout_method, needs_backward=False, options=NoOptions),
    "chefer": MethodSpec(chefer_method, needs_backward=True, options=NoOptions),
    "lrp": MethodSpec(lrp_method, needs_backward=True, options=NoOptions, conservative=True),
    "random": MethodSpec(random_method, needs_backward=False, options=RandomOptions),
}
#: Method names, in the order of :data:`MethodName`.
METHODS: tuple[str, ...] = get_args(MethodName)
assert tuple(METHOD_SPECS) == METHODS, "MethodName and METHOD_SPECS must list the same methods"


def method_spec(name: str) -> MethodSpec:
    """The spec of method ``name``; ValueError naming the choices for an unknown one.

    Example:
        >>> method_spec("rollout").needs_backward, method_spec("gradskip").options.__name__
        (False, 'GradSkipOptions')
    """
    if name not in METHOD_SPECS:
        raise ValueError(f"Unknown method {name!r}; choose one of {METHODS}")
    return METHOD_SPECS[name]
