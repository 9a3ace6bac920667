"""GradSkip and the baselines: per-block steps (pure functions of tensors), the visitors that apply
them to one streamed pass (:mod:`gradskip_lightning.adapters.tensors`), and the registry that names
them (:data:`METHODS`, :data:`MethodName`, :func:`method_spec`)."""

from gradskip_lightning.methods.baselines import (
    CheferVisitor,
    NoOptions,
    RandomOptions,
    RandomVisitor,
    RawAttentionVisitor,
    RolloutVisitor,
    chefer_step,
    random_relevance,
    raw_attention,
    rollout_down,
    rollout_matrix,
    rollout_step,
)
from gradskip_lightning.methods.gradskip import (
    BlockStep,
    GradSkipOptions,
    GradSkipVisitor,
    attention_step,
    attention_weights,
    block_step,
    gini,
    head_weights,
    mixed_attention,
    propagate_block,
    propagate_through_keys,
    propagation,
    reweight,
    rows_or_identity,
    skip_gates,
)
from gradskip_lightning.methods.lrp import LrpVisitor, token_relevance
from gradskip_lightning.methods.output import MethodOutput, MethodVisitor
from gradskip_lightning.methods.registry import METHOD_SPECS, MethodName, MethodSpec, build_options, method_spec

#: Method names of the timm ViT family, in registration order (the modules above register them).
METHODS: tuple[str, ...] = METHOD_SPECS.names

__all__ = [
    "METHODS",
    "METHOD_SPECS",
    "BlockStep",
    "CheferVisitor",
    "GradSkipOptions",
    "GradSkipVisitor",
    "LrpVisitor",
    "MethodName",
    "MethodOutput",
    "MethodSpec",
    "MethodVisitor",
    "NoOptions",
    "RandomOptions",
    "RandomVisitor",
    "RawAttentionVisitor",
    "RolloutVisitor",
    "block_step",
    "build_options",
    "chefer_step",
    "gini",
    "head_weights",
    "mixed_attention",
    "method_spec",
    "attention_step",
    "attention_weights",
    "reweight",
    "propagate_block",
    "propagate_through_keys",
    "propagation",
    "rows_or_identity",
    "random_relevance",
    "raw_attention",
    "rollout_down",
    "rollout_matrix",
    "rollout_step",
    "skip_gates",
    "token_relevance",
]


#: Removed names -> what replaces them, for one release of deprecation warnings.
_DEPRECATED = {
    "weighted_attention": "rows_or_identity(mixed_attention(...))",
    "rollout": "Explainer(model, 'rollout') or rollout_down([rollout_matrix(a) for a in attn], readout)",
    "chefer": "Explainer(model, 'chefer') or chefer_step per block",
}


def __getattr__(name: str) -> object:
    """The list-based reference versions were test-only: each now warns and is built from the steps."""
    if name not in _DEPRECATED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import warnings

    warnings.warn(f"methods.{name} is deprecated: use {_DEPRECATED[name]}", DeprecationWarning, stacklevel=2)
    return _deprecated_functions()[name]


def _deprecated_functions() -> dict[str, object]:
    def weighted_attention(attn, attn_grad, value_norm, omega, options):
        return rows_or_identity(mixed_attention(attn, attn_grad, value_norm, omega, options))

    def rollout(attn, readout):
        return rollout_down([rollout_matrix(a) for a in attn], readout)

    def chefer(attn, attn_grad, readout):
        for a, g in zip(reversed(attn), reversed(attn_grad)):
            readout = chefer_step(readout, a, g)
        return readout

    return {"weighted_attention": weighted_attention, "rollout": rollout, "chefer": chefer}
