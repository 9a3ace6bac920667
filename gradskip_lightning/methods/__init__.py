"""GradSkip and the baselines: per-block steps (pure functions of tensors), the visitors that apply
them to one streamed pass (:mod:`gradskip_lightning.core.tensors`), and the table that names them
for the families explained through that pass (:data:`PASS_METHODS`, :data:`MethodName`).

Adding a method: its step and visitor in a module here, one row in :data:`PASS_METHODS` and the
same name in :data:`MethodName` (docs/adapters.md); Swin and SegFormer have tables of their own.
"""

from typing import Literal

from gradskip_lightning.core.methods import MethodSpec
from gradskip_lightning.core.registry import Registry
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

#: The names of :data:`PASS_METHODS`, in its order (the structure test checks that both agree).
MethodName = Literal["gradskip", "raw_attention", "rollout", "chefer", "random", "lrp"]

#: The methods of the families explained through the streamed pass (timm, torchvision and HF ViTs):
#: name -> the method's visitor class (built from its options for each pass; its ``mode`` picks the
#: pass) and its options dataclass.
PASS_METHODS: Registry[MethodSpec[type[MethodVisitor]]] = Registry(
    "method",
    {
        "gradskip": MethodSpec(GradSkipVisitor, GradSkipOptions),
        "raw_attention": MethodSpec(RawAttentionVisitor, NoOptions),
        "rollout": MethodSpec(RolloutVisitor, NoOptions),
        "chefer": MethodSpec(CheferVisitor, NoOptions),
        "random": MethodSpec(RandomVisitor, RandomOptions),
        "lrp": MethodSpec(LrpVisitor, NoOptions),
    },
)

__all__ = [
    "PASS_METHODS",
    "BlockStep",
    "CheferVisitor",
    "GradSkipOptions",
    "GradSkipVisitor",
    "LrpVisitor",
    "MethodName",
    "MethodOutput",
    "MethodVisitor",
    "NoOptions",
    "RandomOptions",
    "RandomVisitor",
    "RawAttentionVisitor",
    "RolloutVisitor",
    "block_step",
    "chefer_step",
    "gini",
    "head_weights",
    "mixed_attention",
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
