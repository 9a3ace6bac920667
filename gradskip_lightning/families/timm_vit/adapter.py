"""The adapter interface: what GradSkip needs from a ViT-like backbone, and the registry of families.

An :class:`Adapter` finds nothing itself: :func:`find_adapter` picks, among the registered families,
the one whose backbone class is inside the model. The adapter then runs :meth:`Adapter.run`
through the model's own forward (logits = model(images)), with hooks on the backbone only, and
streams each block's tensors (A^l, dy/dA^l, ||v^l||, x^{l-1}, a^l, dy/du^l: shapes and order in
:mod:`gradskip_lightning.adapters.tensors`) to a method's visitor as soon as they exist; methods
and metrics never see the model. :meth:`Adapter.capture` keeps every block instead (a
:class:`Capture`, for tests). Hooks exist only during one call; train/eval modes, fused-attention
flags and gradient checkpointing are restored, and no parameter ``.grad`` is written.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import init_weights_vit_timm
from torch import Tensor, nn

from gradskip_lightning.adapters.streaming import StreamedPass
from gradskip_lightning.adapters.tensors import BlockVisitor, Capture, CaptureMode, Recorder, Top


class UnsupportedModel(TypeError):
    """A model (or one of its settings) no adapter can explain; the message says which and why."""


@contextmanager
def eval_mode(*models: nn.Module) -> Iterator[None]:
    """Every module of ``models`` in eval mode inside the block; each module's own mode restored on
    exit (``model.train()`` afterwards would flip modules a user froze in eval)."""
    modules = {id(m): m for model in models for m in model.modules()}.values()
    modes = [(m, m.training) for m in modules]
    try:
        for module, _ in modes:
            module.training = False
        yield
    finally:
        for module, training in modes:
            module.training = training


def parameter_holders_outside(model: nn.Module, inner: nn.Module) -> list[nn.Module]:
    """The modules of ``model`` outside ``inner`` that hold parameters of their own (e.g. a head in
    the LightningModule around a backbone): what the randomisation test re-initialises with the head."""
    inside = {id(m) for m in inner.modules()}
    return [m for m in model.modules() if id(m) not in inside and next(m.parameters(recurse=False), None) is not None]


class Adapter:
    """Access to one backbone family: its blocks, token grid, prefix tokens and pooling.

    Subclasses set :attr:`family` and :attr:`backbone_types`, and override :meth:`check` (raise
    :class:`UnsupportedModel` with the reason for a configuration they cannot explain) and the
    geometry properties whose attribute names differ from timm's ``VisionTransformer``.

    Args:
        backbone: an instance of one of :attr:`backbone_types`.
    """

    family: ClassVar[str]
    backbone_types: ClassVar[tuple[type[nn.Module], ...]]
    #: Pooling modes the family's ``global_pool`` may take that this adapter explains.
    pools: ClassVar[tuple[str, ...]] = ("token", "avg", "map")

    def __init__(self, backbone: nn.Module) -> None:
        self.backbone: Any = backbone  # the family's timm class: its attributes are checked by check()
        self.check()

    # -- what a family adapter may override -------------------------------------------------
    def check(self) -> None:
        """Raise :class:`UnsupportedModel` when this backbone's configuration cannot be explained."""
        name = type(self.backbone).__name__
        pool = self.backbone.global_pool
        if pool not in self.pools:
            reason = {
                "": "global_pool='' returns all tokens: the pooling is outside the backbone and unknown",
                "max": "max pooling reads a different token per channel: no token distribution to start from",
                "avgmax": "avg+max pooling reads a different token per channel: no token distribution to start from",
            }.get(pool, f"global_pool={pool!r} is not a known pooling")
            raise UnsupportedModel(f"Cannot explain {name}: {reason}. Supported pooling: {self.pools}.")
        for i, block in enumerate(self.blocks):
            attn = getattr(block, "attn", None)
            needed = ("attn_drop", "fused_attn", "num_heads")
            if attn is None or not all(hasattr(attn, n) for n in needed) or not hasattr(block, "drop_path1"):
                raise UnsupportedModel(
                    f"Cannot explain {name}: block {i} ({type(block).__name__}) is not a residual block "
                    f"with one softmax attention (attn.attn_drop, attn.fused_attn, drop_path1)."
                )

    @property
    def blocks(self) -> list[Any]:
        """The transformer blocks, bottom first."""
        return list(self.backbone.blocks)

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: CLS, distillation, register tokens."""
        return int(self.backbone.num_prefix_tokens)

    @property
    def grid_size(self) -> tuple[int, int]:
        """Patch grid (h, w)."""
        h, w = self.backbone.patch_embed.grid_size
        return (int(h), int(w))

    @property
    def img_size(self) -> tuple[int, int]:
        """Input size (H, W) in pixels."""
        h, w = self.backbone.patch_embed.img_size
        return (int(h), int(w))

    @property
    def in_chans(self) -> int:
        """Input channels: those of the first convolution or linear layer of the patch embedding."""
        first = next(m for m in self.backbone.patch_embed.modules() if isinstance(m, (nn.Conv2d, nn.Linear)))
        return first.in_channels if isinstance(first, nn.Conv2d) else first.in_features

    @property
    def read_tokens(self) -> int:
        """How many leading tokens a ``"token"`` pooling averages (2 for a distilled DeiT)."""
        return 1

    # -- derived ------------------------------------------------------------------------------
    @property
    def patch_size(self) -> tuple[int, int]:
        """Pixels per token (ph, pw): image size over grid size (a hybrid stem counts as its stride)."""
        (h, w), (gh, gw) = self.img_size, self.grid_size
        return (h // gh, w // gw)

    @property
    def num_classes(self) -> int:
        """Classes of the backbone's own head; 0 when it has none (the head is outside)."""
        return int(getattr(self.backbone, "num_classes", 0))

    def cascade(self, model: nn.Module) -> list[tuple[str, list[nn.Module]]]:
        """Layers of the parameter-randomisation test, top first: ``"head"`` (the backbone's own
        head and every module of ``model`` outside the backbone that holds parameters), then
        ``"blocks.{L-1}"`` down to ``"blocks.0"``."""
        outside = parameter_holders_outside(model, self.backbone)
        head = [self.backbone.head] if self.num_classes > 0 else []
        blocks = [(f"blocks.{i}", [block]) for i, block in reversed(list(enumerate(self.blocks)))]
        return [("head", head + outside), *blocks]

    def reinitialise(self, layer: nn.Module) -> None:
        """Re-initialise every submodule of ``layer`` with timm's ViT init (trunc-normal Linear,
        ``init_weights`` where a module has one), in place."""
        for module in layer.modules():
            init_weights_vit_timm(module)

    def readout(
        self, batch: int, pool_input: Tensor | None, device: torch.device, dtype: torch.dtype = torch.float32
    ) -> Tensor:
        """The token distribution the pooling reads, (B, N), each row summing to 1.

        ``"token"`` reads the first :attr:`read_tokens` tokens; ``"avg"`` the patch tokens
        uniformly (all tokens when the backbone pools prefix tokens too); ``"map"`` (attention
        pooling) what its latent queries attend to, head and query mean, from ``pool_input``
        (B, N or P, D), the tokens entering the pool.
        """
        pool = self.backbone.global_pool
        prefix = self.num_prefix_tokens
        n = prefix + self.grid_size[0] * self.grid_size[1]
        if pool == "map":  # a pool fed the patches only reads 0 from the prefix tokens
            if pool_input is None:
                raise ValueError("attention pooling reads the tokens entering the pool: pass pool_input")
            read = latent_attention(self.backbone.attn_pool, pool_input)
            return F.pad(read, (n - read.shape[1], 0))
        r = torch.zeros(batch, n, device=device, dtype=dtype)
        if pool == "token":
            r[:, : self.read_tokens] = 1.0 / self.read_tokens
        else:
            first = 0 if getattr(self.backbone, "pool_include_prefix", False) else prefix
            r[:, first:] = 1.0 / (n - first)
        return r

    @contextmanager
    def explain_mode(self, model: nn.Module | None = None) -> Iterator[None]:
        """Eval mode (of ``model``, default the backbone), non-fused attention, no gradient
        checkpointing; everything restored on exit."""
        model = self.backbone if model is None else model
        fused = [(b.attn, b.attn.fused_attn) for b in self.blocks]
        checkpointing = getattr(self.backbone, "grad_checkpointing", None)
        try:
            for attn, _ in fused:
                attn.fused_attn = False
            if checkpointing is not None:
                self.backbone.grad_checkpointing = False
            with eval_mode(model, self.backbone):
                yield
        finally:
            for attn, flag in fused:
                attn.fused_attn = flag
            if checkpointing is not None:
                self.backbone.grad_checkpointing = checkpointing

    def norm_scope(self) -> list[nn.Module]:
        """The backbone's children from the blocks on (blocks, final norms, pooling, head): where a
        conservative capture holds norm denominators constant."""
        children = list(self.backbone.children())
        first = next(i for i, child in enumerate(children) if child is self.backbone.blocks)
        return children[first:]

    def capture(
        self,
        model: nn.Module,
        images: Tensor,
        targets: Tensor | None = None,
        with_gradients: bool = True,
        conservative: bool = False,
    ) -> Capture:
        """Every block's tensors of one pass (:meth:`run` into a :class:`Recorder`): for tests and
        property checks; the Explainer streams instead.

        Args:
            with_gradients: False: mode "forward" (no backward); True: mode "gradients".
            conservative: mode "conservative" (CP-LRP; ``with_gradients`` is then ignored).

        Other arguments and errors as in :meth:`run`.
        """
        mode: CaptureMode = "conservative" if conservative else "gradients" if with_gradients else "forward"
        recorder = Recorder(mode)
        self.run(model, images, targets, recorder)
        return recorder.capture()

    def run(self, model: nn.Module, images: Tensor, targets: Tensor | None, visitor: BlockVisitor) -> Top:
        """Run ``model(images)`` once, and in modes "gradients" and "conservative" one
        activation-only backward of y = sum_b logit[b, target_b], streaming into ``visitor``.

        Each block's tensors go to ``visitor.block`` as soon as they exist and are dropped here
        right after (order: :mod:`gradskip_lightning.adapters.tensors`); mode "forward" runs
        without autograd graph. Hooks exist only during this call, whose state is a fresh
        :class:`~gradskip_lightning.adapters.streaming.StreamedPass`.

        Args:
            model: the module whose forward maps images to logits (B, num_classes); it holds
                :attr:`backbone`.
            images: (B, C, H, W), validated and normalised as the model expects.
            targets: (B,) class indices, or None for the predicted classes.
            visitor: the consumer; its ``mode`` picks the pass.

        Returns:
            The :class:`Top` also given to ``visitor.start``.

        Raises:
            ValueError: the forward does not return logits (B, C), or does not run the backbone
                once, or a block's attention gets no gradient.

        Works inside ``torch.no_grad()`` and ``torch.inference_mode()``.
        """
        return StreamedPass(self, model, visitor).run(images, targets)


def latent_attention(pool: Any, x: Tensor) -> Tensor:
    """What timm's ``AttentionPoolLatent`` reads: softmax(q k^T) of its latent queries over the
    tokens x (B, N, D), mean over heads and queries, (B, N), rows summing to 1."""
    b, n, _ = x.shape
    if pool.pos_embed is not None:
        x = x + pool.pos_embed.unsqueeze(0).to(x.dtype)
    q = pool.q(pool.latent.expand(b, -1, -1)).reshape(b, pool.latent_len, pool.num_heads, pool.head_dim)
    k = pool.kv(x).reshape(b, n, 2, pool.num_heads, pool.head_dim)[:, :, 0]
    q, k = pool.q_norm(q.transpose(1, 2)), pool.k_norm(k.transpose(1, 2))
    attn = (q * pool.scale @ k.transpose(-2, -1)).softmax(dim=-1)  # (B, H, latent_len, N)
    return attn.mean(dim=(1, 2))


#: Family name -> adapter class, in registration order.
ADAPTERS: dict[str, type[Adapter]] = {}


def register(adapter: type[Adapter]) -> type[Adapter]:
    """Class decorator adding a family adapter to :data:`ADAPTERS`."""
    ADAPTERS[adapter.family] = adapter
    return adapter


def supported() -> str:
    """One line naming every registered family and its backbone classes."""
    return "; ".join(f"{f} ({', '.join(t.__name__ for t in a.backbone_types)})" for f, a in ADAPTERS.items())


def find_adapter(model: nn.Module) -> Adapter:
    """The adapter of the one registered backbone that is, or is inside, ``model``.

    Args:
        model: a backbone, or a module holding exactly one (a LightningModule, a DDP wrapper).

    Raises:
        UnsupportedModel (a TypeError): no backbone, more than one, or an unsupported
            configuration; the message names the class and the supported families.

    Example:
        >>> import timm
        >>> vit = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2, num_classes=3)
        >>> adapter = find_adapter(vit)
        >>> adapter.family, adapter.grid_size, adapter.num_prefix_tokens, adapter.patch_size
        ('vision_transformer', (4, 4), 1, (8, 8))
    """
    if not isinstance(model, nn.Module):
        raise UnsupportedModel(
            f"Cannot explain a {type(model).__name__}: not a torch.nn.Module. Supported: {supported()}."
        )
    types = {t: adapter for adapter in ADAPTERS.values() for t in adapter.backbone_types}
    found = [m for m in model.modules() if type(m) in types]
    inner = {id(sub) for m in found for sub in m.modules() if sub is not m}
    found = [m for m in found if id(m) not in inner]
    if len(found) != 1:
        what = "no" if not found else f"{len(found)}"
        raise UnsupportedModel(
            f"Cannot explain {type(model).__name__}: it contains {what} supported backbone(s) (exactly one is "
            f"needed). Supported: {supported()}."
        )
    try:
        return types[type(found[0])](found[0])
    except UnsupportedModel as error:
        raise UnsupportedModel(f"{error} Supported families: {supported()}.") from None
