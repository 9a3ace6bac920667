"""The weights of a timm pre-norm class-token ViT in torchvision's and HF's ViT classes: the same
function, so their maps must be the timm family's (and its properties carry over)."""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def timm_to_torchvision(vit: nn.Module) -> nn.Module:
    """A torchvision ``VisionTransformer`` computing what the timm ``vit`` (class token, pre-norm,
    qkv bias, token pooling, eps 1e-6) computes, in eval mode."""
    from torchvision.models import VisionTransformer

    embed = vit.patch_embed.proj
    out = VisionTransformer(
        image_size=vit.patch_embed.img_size[0],
        patch_size=embed.kernel_size[0],
        num_layers=len(vit.blocks),
        num_heads=vit.blocks[0].attn.num_heads,
        hidden_dim=embed.out_channels,
        mlp_dim=vit.blocks[0].mlp.fc1.out_features,
        num_classes=vit.num_classes,
    )
    out.conv_proj.load_state_dict(embed.state_dict())
    out.class_token.copy_(vit.cls_token)
    out.encoder.pos_embedding.copy_(vit.pos_embed)
    for theirs, ours in zip(vit.blocks, out.encoder.layers):
        ours.ln_1.load_state_dict(theirs.norm1.state_dict())
        ours.ln_2.load_state_dict(theirs.norm2.state_dict())
        ours.self_attention.in_proj_weight.copy_(theirs.attn.qkv.weight)
        ours.self_attention.in_proj_bias.copy_(theirs.attn.qkv.bias)
        ours.self_attention.out_proj.load_state_dict(theirs.attn.proj.state_dict())
        ours.mlp[0].load_state_dict(theirs.mlp.fc1.state_dict())
        ours.mlp[3].load_state_dict(theirs.mlp.fc2.state_dict())
    out.encoder.ln.load_state_dict(vit.norm.state_dict())
    out.heads.head.load_state_dict(vit.head.state_dict())
    return out.eval()


@torch.no_grad()
def timm_to_hf(vit: nn.Module) -> nn.Module:
    """An HF ``ViTForImageClassification`` (a distilled timm DeiT: ``DeiTForImageClassificationWithTeacher``)
    computing what the timm ``vit`` computes, in eval mode."""
    from transformers import DeiTConfig, DeiTForImageClassificationWithTeacher, ViTConfig, ViTForImageClassification

    distilled = getattr(vit, "dist_token", None) is not None
    embed = vit.patch_embed.proj
    config = (DeiTConfig if distilled else ViTConfig)(
        hidden_size=embed.out_channels,
        num_hidden_layers=len(vit.blocks),
        num_attention_heads=vit.blocks[0].attn.num_heads,
        intermediate_size=vit.blocks[0].mlp.fc1.out_features,
        image_size=vit.patch_embed.img_size[0],
        patch_size=embed.kernel_size[0],
        layer_norm_eps=1e-6,
        num_labels=vit.num_classes,
    )
    out = (DeiTForImageClassificationWithTeacher if distilled else ViTForImageClassification)(config)
    body = out.deit if distilled else out.vit
    body.embeddings.patch_embeddings.projection.load_state_dict(embed.state_dict())
    body.embeddings.cls_token.copy_(vit.cls_token)
    if distilled:
        body.embeddings.distillation_token.copy_(vit.dist_token)
    body.embeddings.position_embeddings.copy_(vit.pos_embed)
    for theirs, ours in zip(vit.blocks, body.layers):
        ours.layernorm_before.load_state_dict(theirs.norm1.state_dict())
        ours.layernorm_after.load_state_dict(theirs.norm2.state_dict())
        for part, weight, bias in zip(
            (ours.attention.q_proj, ours.attention.k_proj, ours.attention.v_proj),
            theirs.attn.qkv.weight.chunk(3),
            theirs.attn.qkv.bias.chunk(3),
        ):
            part.weight.copy_(weight)
            part.bias.copy_(bias)
        ours.attention.o_proj.load_state_dict(theirs.attn.proj.state_dict())
        ours.mlp.fc1.load_state_dict(theirs.mlp.fc1.state_dict())
        ours.mlp.fc2.load_state_dict(theirs.mlp.fc2.state_dict())
    body.layernorm.load_state_dict(vit.norm.state_dict())
    if distilled:
        out.cls_classifier.load_state_dict(vit.head.state_dict())
        out.distillation_classifier.load_state_dict(vit.head_dist.state_dict())
    else:
        out.classifier.load_state_dict(vit.head.state_dict())
    return out.eval()
