"""The adapter interface: what GradSkip needs from a ViT-like backbone, and the registry of families.

An :class:`Adapter` finds nothing itself: :func:`find_adapter` picks, among the registered families,
the one whose backbone class is inside the model. The adapter then runs :meth:`Adapter.capture`
through the model's own forward (logits = model(images)), with hooks on the backbone only. Methods
and metrics see the returned :class:`Capture`, never the model.

Per block l = 1..L the capture holds (B images, H heads, N tokens, D channels):

- ``attn``        A^l, post-softmax attention probabilities, (B, H, N, N)
- ``attn_grad``   dy/dA^l, (B, H, N, N)
- ``value_norm``  ||v^l_{q,j}||, the L2 norm of each head's value vector, (B, H, N)
- ``block_input`` x^{l-1}, what reaches the residual sum beside the attention branch, (B, N, D)
- ``branch``      a^l, the attention-branch output as added to the residual stream, (B, N, D)
- ``branch_grad`` dy/du^l (= dy/da^l), u^l = x^{l-1} + a^l, (B, N, D)

plus the last block's output x^L and its gradient, ``input_grad`` dy/dx^0 (B, N, D) of a
conservative capture (see :mod:`gradskip_lightning.adapters.conservative`), the logits, the explained targets (y = sum_b
logit[b, target_b]) and ``readout``, the token distribution the pooling reads. Hooks exist only
during :meth:`Adapter.capture`; train/eval modes, fused-attention flags and gradient checkpointing
are restored, and no parameter ``.grad`` is written.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import init_weights_vit_timm
from torch import Tensor, nn

from gradskip_lightning.adapters.conservative import constant_hooks


@dataclass
class Capture:
    """Per-block activations and gradients of one batched explain pass (shapes in the module doc)."""

    attn: list[Tensor]
    attn_grad: list[Tensor] | None
    value_norm: list[Tensor]
    block_input: list[Tensor]
    branch: list[Tensor]
    branch_grad: list[Tensor] | None
    output: Tensor
    output_grad: Tensor | None
    logits: Tensor
    targets: Tensor
    readout: Tensor
    num_prefix_tokens: int
    grid_size: tuple[int, int]
    input_grad: Tensor | None = None

    @property
    def num_blocks(self) -> int:
        return len(self.attn)


class UnsupportedModel(TypeError):
    """A model (or one of its settings) no adapter can explain; the message says which and why."""


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
        self.backbone = backbone
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
    def blocks(self) -> list[nn.Module]:
        """The transformer blocks, bottom first."""
        return list(self.backbone.blocks)

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: CLS, distillation, register tokens."""
        return int(self.backbone.num_prefix_tokens)

    @property
    def grid_size(self) -> tuple[int, int]:
        """Patch grid (h, w)."""
        return tuple(self.backbone.patch_embed.grid_size)

    @property
    def img_size(self) -> tuple[int, int]:
        """Input size (H, W) in pixels."""
        return tuple(self.backbone.patch_embed.img_size)

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
        return tuple(s // g for s, g in zip(self.img_size, self.grid_size))

    @property
    def num_classes(self) -> int:
        """Classes of the backbone's own head; 0 when it has none (the head is outside)."""
        return int(getattr(self.backbone, "num_classes", 0))

    def cascade(self, model: nn.Module) -> list[tuple[str, list[nn.Module]]]:
        """Layers of the parameter-randomisation test, top first: ``"head"`` (the backbone's own
        head and every module of ``model`` outside the backbone that holds parameters), then
        ``"blocks.{L-1}"`` down to ``"blocks.0"``."""
        inside = {id(m) for m in self.backbone.modules()}
        outside = [
            m for m in model.modules() if id(m) not in inside and next(m.parameters(recurse=False), None) is not None
        ]
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
        modules = {id(m): m for m in (*model.modules(), *self.backbone.modules())}.values()
        modes = [(m, m.training) for m in modules]
        fused = [(b.attn, b.attn.fused_attn) for b in self.blocks]
        checkpointing = getattr(self.backbone, "grad_checkpointing", None)
        try:
            for module, _ in modes:
                module.training = False
            for attn, _ in fused:
                attn.fused_attn = False
            if checkpointing is not None:
                self.backbone.grad_checkpointing = False
            yield
        finally:
            for module, training in modes:
                module.training = training
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
        """Run ``model(images)`` once (and, if ``with_gradients``, one activation-only backward).

        Args:
            model: the module whose forward maps images to logits (B, num_classes); it holds
                :attr:`backbone`.
            images: (B, C, H, W), validated and normalised as the model expects.
            targets: (B,) class indices, or None for the predicted classes.
            with_gradients: False skips the backward (methods that only need attention).
            conservative: hold A^l and the norm denominators constant in the backward (CP-LRP,
                :func:`~gradskip_lightning.adapters.conservative.constant_hooks`) and take the only
                gradient ``input_grad`` = dy/dx^0; the per-block gradients are then None.

        Raises:
            ValueError: the forward does not return logits (B, C), or does not run the backbone once.

        Works inside ``torch.no_grad()`` and ``torch.inference_mode()``.
        """
        blocks = self.blocks
        record: dict[str, list[Tensor]] = {
            k: [] for k in ("attn", "block_input", "branch", "output", "pool_input")
        }

        def on_attn(_m: nn.Module, _i: tuple, out: Tensor) -> None:
            record["attn"].append(out)

        attn_inputs: dict[int, Tensor] = {}
        values: dict[int, Tensor] = {}

        def value_hooks(i: int, attn: nn.Module) -> list:
            def on_attn_input(_m: nn.Module, args: tuple, kwargs: dict) -> None:
                attn_inputs[i] = (args[0] if args else kwargs["x"]).detach()

            def on_values(_m: nn.Module, _i: tuple, out: Tensor) -> None:
                values[i] = values_from_projection(attn, out)

            return [
                attn.register_forward_pre_hook(on_attn_input, with_kwargs=True),
                value_projection(attn).register_forward_hook(on_values),
            ]

        def on_block_input(_m: nn.Module, args: tuple, kwargs: dict) -> None:
            record["block_input"].append(args[0] if args else kwargs["x"])

        def on_branch(_m: nn.Module, _i: tuple, out: Tensor) -> None:
            record["branch"].append(out)

        def on_output(_m: nn.Module, _i: tuple, out: Tensor) -> None:
            record["output"].append(out)

        def on_pool_input(_m: nn.Module, args: tuple) -> None:
            record["pool_input"].append(args[0].detach())

        handles = []
        with self.explain_mode(model), torch.inference_mode(False), torch.enable_grad():
            try:
                for i, block in enumerate(blocks):
                    handles += value_hooks(i, block.attn)
                    handles += [
                        block.attn.attn_drop.register_forward_hook(on_attn),
                        block.register_forward_pre_hook(on_block_input, with_kwargs=True),
                        block.drop_path1.register_forward_hook(on_branch),
                    ]
                handles.append(blocks[-1].register_forward_hook(on_output))
                if self.backbone.global_pool == "map":
                    handles.append(self.backbone.attn_pool.register_forward_pre_hook(on_pool_input))
                if conservative:  # after the recording hooks: they see A^l before it is detached
                    handles += constant_hooks([b.attn.attn_drop for b in blocks], self.norm_scope())
                # A fresh leaf that requires grad: the graph exists even for a frozen model, and the
                # clone is a normal tensor even when the caller's batch is an inference tensor.
                x = images.detach().clone().requires_grad_(True)
                logits = model(x)
            finally:
                for h in handles:
                    h.remove()
            check_logits(model, logits, images.shape[0])
            if len(record["attn"]) != len(blocks) or len(record["output"]) != 1:
                raise ValueError(
                    f"{type(model).__name__}.forward must run its {type(self.backbone).__name__} once, through all "
                    f"{len(blocks)} blocks; {len(record['attn'])} block attentions ran."
                )

            if targets is None:
                targets = logits.detach().argmax(dim=1)
            attn_grad = branch_grad = output_grad = input_grad = None
            if with_gradients:
                y = logits.gather(1, targets[:, None]).sum()
            if with_gradients and conservative:
                (input_grad,) = torch.autograd.grad(y, record["block_input"][0])
            elif with_gradients:
                grads = torch.autograd.grad(y, [*record["attn"], *record["branch"], record["output"][0]])
                n_blocks = len(blocks)
                attn_grad = list(grads[:n_blocks])
                branch_grad = list(grads[n_blocks : 2 * n_blocks])
                output_grad = grads[-1]
            pool_input = record["pool_input"][0] if record["pool_input"] else None
            with torch.no_grad():
                readout = self.readout(images.shape[0], pool_input, images.device, images.dtype)
                value_norm = [
                    value_norms(b.attn, values[i] if i in values else values_from_input(b.attn, attn_inputs[i]))
                    for i, b in enumerate(blocks)
                ]

        return Capture(
            attn=[a.detach() for a in record["attn"]],
            attn_grad=attn_grad,
            value_norm=value_norm,
            block_input=[t.detach() for t in record["block_input"]],
            branch=[t.detach() for t in record["branch"]],
            branch_grad=branch_grad,
            output=record["output"][0].detach(),
            output_grad=output_grad,
            logits=logits.detach(),
            targets=targets,
            readout=readout,
            num_prefix_tokens=self.num_prefix_tokens,
            grid_size=self.grid_size,
            input_grad=input_grad,
        )


def check_logits(model: nn.Module, logits: object, batch: int) -> None:
    """Raise ValueError unless ``logits`` is a float (batch, C) tensor, C >= 1."""
    if not isinstance(logits, Tensor) or logits.ndim != 2 or logits.shape[0] != batch or not logits.shape[1]:
        got = f"{type(logits).__name__} {tuple(getattr(logits, 'shape', ()))}"
        raise ValueError(
            f"{type(model).__name__}.forward must return logits of shape (B={batch}, num_classes); got {got}. "
            "Pass the module whose forward maps images to class logits."
        )


def value_projection(attn: nn.Module) -> nn.Module:
    """The module whose output holds the value vectors: ``v_proj``, or the fused ``qkv``."""
    v_proj = getattr(attn, "v_proj", None)
    return attn.qkv if v_proj is None else v_proj


def values_from_projection(attn: nn.Module, out: Tensor) -> Tensor:
    """The values (B, N, A) in the output of :func:`value_projection`, copied (some attentions add
    their bias in place afterwards); a bias-free ``qkv`` gets the attention's ``v_bias``."""
    if getattr(attn, "v_proj", None) is not None:
        return out.detach().clone()
    width = out.shape[-1] // 3
    v = out.detach()[..., 2 * width :].clone()
    v_bias = getattr(attn, "v_bias", None)
    return v + v_bias.detach() if attn.qkv.bias is None and v_bias is not None else v


def values_from_input(attn: nn.Module, x: Tensor) -> Tensor:
    """The values (B, N, A) recomputed from the attention's input x (B, N, D), for attentions that
    apply their ``qkv`` weight functionally (BEiT, EVA with a separate q/v bias)."""
    weight = attn.qkv.weight
    width = weight.shape[0] // 3
    bias = attn.qkv.bias[2 * width :] if attn.qkv.bias is not None else getattr(attn, "v_bias", None)
    return F.linear(x.detach(), weight[2 * width :].detach(), None if bias is None else bias.detach())


def value_norms(attn: nn.Module, v: Tensor) -> Tensor:
    """||v_{q,j}|| per head, (B, H, N), from values (B, N, A); grouped-query value heads are
    repeated to the query heads."""
    b, n, _ = v.shape
    value_heads = getattr(attn, "num_kv_heads", None) or attn.num_heads
    norms = v.reshape(b, n, value_heads, -1).norm(dim=-1).transpose(1, 2)
    return norms.repeat_interleave(attn.num_heads // value_heads, dim=1)


def latent_attention(pool: nn.Module, x: Tensor) -> Tensor:
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
