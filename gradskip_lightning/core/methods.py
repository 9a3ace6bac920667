"""One method-spec type for every family: a method's step and its options.

A family's methods are a :class:`~gradskip_lightning.core.registry.Registry` of :class:`MethodSpec`
(name -> spec), written as one table next to the family's ``Literal`` of the same names (the
structure test checks that both agree, for every family at once). The step is what the family runs
for the method: the visitor class of a streamed pass (timm, torchvision and HF ViTs), the visitor
factory of the windowed pass (Swin), or a propagation over a capture (SegFormer).

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Seeded:
    ...     seed: int = 0
    ...     sharpness: float = 1.0
    >>> spec = MethodSpec(step=print, options=Seeded, unsupported=("sharpness",))
    >>> spec.make_options("random", seed=3)
    Seeded(seed=3, sharpness=1.0)
    >>> spec.make_options("random", colour=1)
    Traceback (most recent call last):
    ...
    ValueError: Method 'random' takes no option(s) ['colour']; it takes ['seed', 'sharpness']
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Generic, TypeVar

__all__ = ["MethodSpec", "build_options"]

Step = TypeVar("Step")


def build_options(options_type: type, method: str, **options: Any) -> Any:
    """``options_type(**options)``, a frozen dataclass of ``method``'s options; ValueError naming
    unknown keywords and the allowed ones."""
    allowed = sorted(f.name for f in fields(options_type))
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"Method {method!r} takes no option(s) {unknown}; it takes {allowed}")
    return options_type(**options)


@dataclass(frozen=True)
class MethodSpec(Generic[Step]):
    """One method of one family.

    Attributes:
        step: what the family runs for the method (see the module docstring).
        options: the frozen dataclass of the method's options (the explainer's keyword arguments).
        unsupported: options the family's step does not implement: refused unless at their default.
    """

    step: Step
    options: type
    unsupported: tuple[str, ...] = ()

    def make_options(self, method: str, **options: Any) -> Any:
        """The options dataclass built from keyword arguments; ValueError for unknown options and for
        an unsupported one changed from its default."""
        built, defaults = build_options(self.options, method, **options), self.options()
        changed = [f"{n}={getattr(built, n)!r}" for n in self.unsupported if getattr(built, n) != getattr(defaults, n)]
        if changed:
            raise ValueError(
                f"{method} does not implement {', '.join(changed)} for this model family (see docs/method.md); "
                "leave these at their defaults"
            )
        return built
