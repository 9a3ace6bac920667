"""Known answers for the baselines on small hand-built tensors (the dense oracles the streamed
steps are checked against elsewhere, and the package's per-block steps)."""

from __future__ import annotations

import torch

from gradskip_lightning import methods
from tests.methods import oracles
from tests.methods.test_gradskip import CLS, A, heads


def test_raw_attention_reads_the_cls_row_head_mean():
    other = torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    out = methods.raw_attention(heads(A, other), CLS)
    torch.testing.assert_close(out, torch.tensor([[0.25, 0.625, 0.125]]))


def test_rollout_two_blocks_known_answer():
    # M = (A + I) / 2 = [[.75, .125, .125], [0, 1, 0], [0, 0, 1]]; e0^T M M by hand.
    out = oracles.rollout([heads(A), heads(A)], CLS)
    torch.testing.assert_close(out, torch.tensor([[0.5625, 0.21875, 0.21875]]))


def test_chefer_one_block_known_answer():
    grad = torch.tensor([[1.0, -1.0, 2.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    # (grad * A)^+ row 0 = [0.5, 0, 0.5]; e0^T (I + that) = [1.5, 0, 0.5]
    out = oracles.chefer([heads(A)], [heads(grad)], CLS)
    torch.testing.assert_close(out, torch.tensor([[1.5, 0.0, 0.5]]))


def test_chefer_two_blocks_is_the_product_in_order():
    g1 = torch.ones(3, 3)
    g2 = torch.tensor([[0.0, 4.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    # block 2 (top): M2 = I + [[0, 1, 0], 0, 0]; block 1: M1 = I + A. e0^T M2 M1:
    # e0^T M2 = [1, 1, 0]; [1, 1, 0] (I + A) = [1, 1, 0] + [0.5, 1.25, 0.25] = [1.5, 2.25, 0.25]
    out = oracles.chefer([heads(A), heads(A)], [heads(g1), heads(g2)], CLS)
    torch.testing.assert_close(out, torch.tensor([[1.5, 2.25, 0.25]]))


def test_random_relevance_is_seeded():
    a = methods.random_relevance(2, 16, seed=3, device=torch.device("cpu"))
    b = methods.random_relevance(2, 16, seed=3, device=torch.device("cpu"))
    assert torch.equal(a, b) and a.shape == (2, 16)
    assert not torch.equal(a, methods.random_relevance(2, 16, seed=4, device=torch.device("cpu")))


def test_streamed_rollout_and_chefer_equal_the_dense_oracles():
    from gradskip_lightning.families.timm_vit import TimmViTExplainer
    from tests.conftest import make_tiny_vit
    from tests.core.helpers import capture

    model = make_tiny_vit(depth=3, seed=4)
    images, targets = torch.randn(3, 3, 32, 32), torch.tensor([0, 1, 3])
    cap = capture(model, images, targets)
    expected = {
        "rollout": oracles.rollout(cap.attn, cap.readout),
        "chefer": oracles.chefer(cap.attn, cap.attn_grad, cap.readout),
    }
    for method, dense in expected.items():
        streamed = TimmViTExplainer(model, method).explain(images, targets).token_maps.flatten(1)
        patches = dense[:, 1:]  # the CLS token's own relevance is not on the grid
        torch.testing.assert_close(streamed / streamed.sum(1, keepdim=True), patches / patches.sum(1, keepdim=True))
