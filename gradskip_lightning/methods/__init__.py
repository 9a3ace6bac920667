"""GradSkip and the baselines as pure functions of a :class:`~gradskip_lightning.adapters.Capture`,
and the registry that names them (:data:`METHODS`, :data:`MethodName`, :func:`method_spec`)."""
from gradskip_lightning.methods.baselines import (
    NoOptions,
    RandomOptions,
    chefer,
    random_relevance,
    raw_attention,
    rollout,
)
from gradskip_lightning.methods.gradskip import (
    BlockStep,
    GradSkipOptions,
    gini,
    gradskip,
    head_weights,
    propagate_block,
    propagation,
    skip_gates,
    weighted_attention,
)
from gradskip_lightning.methods.lrp import lrp_method, token_relevance
from gradskip_lightning.methods.output import MethodOutput
from gradskip_lightning.methods.registry import METHOD_SPECS, METHODS, MethodName, MethodSpec, method_spec

__all__ = [
    "METHODS",
    "METHOD_SPECS",
    "BlockStep",
    "GradSkipOptions",
    "MethodName",
    "MethodOutput",
    "MethodSpec",
    "NoOptions",
    "RandomOptions",
    "chefer",
    "gini",
    "gradskip",
    "head_weights",
    "lrp_method",
    "method_spec",
    "propagate_block",
    "propagation",
    "random_relevance",
    "raw_attention",
    "rollout",
    "skip_gates",
    "token_relevance",
    "weighted_attention",
]
