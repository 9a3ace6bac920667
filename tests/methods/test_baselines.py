"""Known answers for the baselines on small hand-built tensors."""
from __future__ import annotations

import torch

from gradskip_lightning import methods
from tests.methods.test_gradskip import CLS, A, heads


def test_raw_attention_reads_the_cls_row_head_mean():
    other = torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    out = methods.raw_attention(heads(A, other), CLS)
    torch.testing.assert_close(out, torch.tensor([[0.25, 0.625, 0.125]]))


def test_rollout_two_blocks_known_answer():
    # M = (A + I) / 2 = [[.75, .125, .125], [0, 1, 0], [0, 0, 1]]; e0^T M M by hand.
    out = methods.rollout([heads(A), heads(A)], CLS)
    torch.testing.assert_close(out, torch.tensor([[0.5625, 0.21875, 0.21875]]))


def test_chefer_one_block_known_answer():
    grad = torch.tensor([[1.0, -1.0, 2.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    # (grad * A)^+ row 0 = [0.5, 0, 0.5]; e0^T (I + that) = [1.5, 0, 0.5]
    out = methods.chefer([heads(A)], [heads(grad)], CLS)
    torch.testing.assert_close(out, torch.tensor([[1.5, 0.0, 0.5]]))


def test_chefer_two_blocks_is_the_product_in_order():
    g1 = torch.ones(3, 3)
    g2 = torch.tensor([[0.0, 4.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    # block 2 (top): M2 = I + [[0, 1, 0], 0, 0]; block 1: M1 = I + A. e0^T M2 M1:
    # e0^T M2 = [1, 1, 0]; [1, 1, 0] (I + A) = [1, 1, 0] + [0.5, 1.25, 0.25] = [1.5, 2.25, 0.25]
    out = methods.chefer([heads(A), heads(A)], [heads(g1), heads(g2)], CLS)
    torch.testing.assert_close(out, torch.tensor([[1.5, 2.25, 0.25]]))


def test_random_relevance_is_seeded():
    a = methods.random_relevance(2, 16, seed=3, device=torch.device("cpu"))
    b = methods.random_relevance(2, 16, seed=3, device=torch.device("cpu"))
    assert torch.equal(a, b) and a.shape == (2, 16)
    assert not torch.equal(a, methods.random_relevance(2, 16, seed=4, device=torch.device("cpu")))
