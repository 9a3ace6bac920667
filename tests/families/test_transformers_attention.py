"""``config._attn_implementation`` steers which attention function transformers dispatches to (the
HF families switch it for a call: families/transformers_attention.py); this fails if it stops."""

from __future__ import annotations

import pytest
import torch

from gradskip_lightning.families.transformers_attention import attention_implementation

transformers = pytest.importorskip("transformers")


def test_the_config_attribute_dispatches_and_is_restored():
    from transformers import AttentionInterface, ViTConfig, ViTForImageClassification
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    calls = []

    def recorded(module, query, key, value, attention_mask, **kwargs):
        calls.append(query.shape)
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("gradskip_recorded", recorded)
    config = ViTConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                       image_size=16, patch_size=8, num_labels=2)  # fmt: skip
    model = ViTForImageClassification(config).eval()
    before = model.config._attn_implementation
    with attention_implementation(model.config, "gradskip_recorded"), torch.no_grad():
        model(pixel_values=torch.randn(1, 3, 16, 16))
    assert len(calls) == 2 and model.config._attn_implementation == before  # one call per layer, then restored
