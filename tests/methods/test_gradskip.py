"""Known answers for the GradSkip functions on small hand-built tensors."""

from __future__ import annotations

import pytest
import torch

from gradskip_lightning import methods
from gradskip_lightning.methods import GradSkipOptions

# One CLS token and two patches; row i = query token i.
A = torch.tensor([[0.5, 0.25, 0.25], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
CLS = torch.tensor([[1.0, 0.0, 0.0]])


def heads(*matrices: torch.Tensor) -> torch.Tensor:
    """Stack (N, N) matrices into one block's attention, (B=1, H, N, N)."""
    return torch.stack(matrices)[None]


def test_gini_known_values():
    rows = torch.tensor([[0.0, 0.0, 1.0], [1.0, 1.0, 1.0], [1.0, 2.0, 3.0], [3.0, 1.0, 2.0], [0.0, 0.0, 0.0]])
    # (2k - n - 1) weights -2, 0, 2: [1, 2, 3] -> (-2 + 6) / (3 * 6) = 2/9; order does not matter.
    expected = torch.tensor([2 / 3, 0.0, 2 / 9, 2 / 9, 0.0])
    torch.testing.assert_close(methods.gini(rows), expected)


def test_head_weights_alpha_extremes_and_threshold():
    torch.manual_seed(0)
    attn = torch.rand(2, 4, 5, 5).softmax(-1)
    grad = torch.randn(2, 4, 5, 5)
    _, g_t, s_t = methods.head_weights(attn, grad, GradSkipOptions())
    torch.testing.assert_close(methods.head_weights(attn, grad, GradSkipOptions(alpha=1.0))[0], g_t)
    torch.testing.assert_close(methods.head_weights(attn, grad, GradSkipOptions(alpha=0.0))[0], s_t)
    torch.testing.assert_close(g_t.sum(-1), torch.ones(2))
    # A head far below tau * max gets exactly 0.
    grad[:, 2] *= 1e-4
    _, g_t, _ = methods.head_weights(attn, grad, GradSkipOptions(grad_threshold=0.05))
    assert torch.all(g_t[:, 2] == 0)


def test_head_top_fraction_keeps_the_best_heads_and_renormalises():
    torch.manual_seed(1)
    attn = torch.rand(1, 8, 5, 5).softmax(-1)
    grad = torch.randn(1, 8, 5, 5)
    full, _, _ = methods.head_weights(attn, grad, GradSkipOptions())
    top, _, _ = methods.head_weights(attn, grad, GradSkipOptions(head_top_fraction=0.25))
    kept = full.topk(2, dim=-1).indices
    assert set(top.nonzero()[:, 1].tolist()) == set(kept[0].tolist())
    torch.testing.assert_close(top.sum(-1), torch.ones(1))
    _, _, s_t = methods.head_weights(attn, grad, GradSkipOptions())
    for selection, expected in (("top_sparsity", s_t.topk(2).indices), ("bottom_sparsity", (-s_t).topk(2).indices)):
        kept, _, _ = methods.head_weights(attn, grad, GradSkipOptions(head_top_fraction=0.25, head_selection=selection))
        assert set(kept.nonzero()[:, 1].tolist()) == set(expected[0].tolist())


@pytest.mark.parametrize("weighting", ["abs_grad", "pos_grad", "none"])
def test_weighted_attention_is_row_stochastic_with_identity_for_empty_rows(weighting):
    torch.manual_seed(2)
    attn = torch.rand(1, 2, 4, 4).softmax(-1)
    grad = torch.randn(1, 2, 4, 4)
    grad[:, :, 3] = 0.0  # row 3 gets no gradient: empty for the gradient weightings
    omega = torch.tensor([[0.5, 0.5]])
    options = GradSkipOptions(attention_weighting=weighting)
    w = methods.rows_or_identity(methods.mixed_attention(attn, grad, torch.rand(1, 2, 4) + 0.1, omega, options))
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 4))
    if weighting != "none":
        torch.testing.assert_close(w[0, 3], torch.tensor([0.0, 0.0, 0.0, 1.0]))


def test_skip_gates_first_order_split():
    x = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]])
    a = torch.tensor([[[0.0, 0.0], [1.0, 0.0]]])
    g = torch.tensor([[[1.0, 1.0], [3.0, 1.0]]])
    # token 0: c_main 0, c_skip 1 -> 0; token 1: c_main 3, c_skip 4 -> 3/7
    torch.testing.assert_close(methods.skip_gates(x, a, g, "token"), torch.tensor([[0.0, 3 / 7]]))
    torch.testing.assert_close(methods.skip_gates(x, a, g, "layer"), torch.tensor([[3 / 8, 3 / 8]]))
    assert torch.all(methods.skip_gates(x, a, g, "off") == 1)


def test_layer_normalisation_keeps_the_total_and_the_rows_relative_mass():
    w = torch.tensor([[[1.0, 1.0, 0.0], [0.0, 4.0, 4.0], [0.0, 0.0, 0.0]]])  # row 2 has no mass
    kept = torch.tensor([[1.0, 1.0, 2.0]])
    weights, empty = methods.attention_weights(w, kept, "layer")
    # k = (1 + 1) / (1 * 2 + 1 * 8) = 0.2 over the rows with mass; row 2 keeps its 2.
    torch.testing.assert_close(weights[0], 0.2 * w[0])
    assert empty.tolist() == [[False, False, True]]
    below = methods.attention_step(kept, w, "layer")
    torch.testing.assert_close(below, torch.tensor([[0.2, 1.0, 2.8]]))
    torch.testing.assert_close(below.sum(), kept.sum())
    rows = methods.attention_step(kept, w, "rows")  # each row sums to 1: [0.5, 0.5, 0], [0, 0.5, 0.5]
    torch.testing.assert_close(rows, torch.tensor([[0.5, 1.0, 2.5]]))


def test_reweight_keeps_the_total_and_falls_back_where_nothing_is_positive():
    relevance = torch.tensor([[1.0, 1.0, 2.0], [1.0, 1.0, 0.0]])
    weights = torch.tensor([[1.0, -1.0, 3.0], [-1.0, 0.0, 2.0]])
    # row 0: [1, 0, 6] scaled to the total 4; row 1: the product is 0 everywhere -> unchanged.
    torch.testing.assert_close(
        methods.reweight(relevance, weights), torch.tensor([[4 / 7, 0.0, 24 / 7], [1.0, 1.0, 0.0]])
    )


def test_signed_grad_keeps_the_sign_and_rows_have_unit_absolute_mass():
    attn = torch.tensor([[[[0.5, 0.5], [0.5, 0.5]]]])
    grad = torch.tensor([[[[2.0, -2.0], [1.0, 3.0]]]])
    w = methods.mixed_attention(
        attn, grad, None, torch.ones(1, 1), GradSkipOptions(attention_weighting="signed_grad", value_norm=False)
    )
    torch.testing.assert_close(w, torch.tensor([[[1.0, -1.0], [0.5, 1.5]]]))
    weights, _ = methods.attention_weights(w, torch.ones(1, 2), "rows")
    torch.testing.assert_close(weights.abs().sum(-1), torch.ones(1, 2))
    assert not GradSkipOptions(attention_weighting="signed_grad").conserves and GradSkipOptions().conserves


def test_class_specific_preset():
    preset = GradSkipOptions.class_specific()
    assert preset == GradSkipOptions(**GradSkipOptions.class_specific_overrides())
    assert preset != GradSkipOptions() and preset.conserves
    assert GradSkipOptions.class_specific(alpha=0.25).alpha == 0.25


def test_options_are_validated():
    bad_options = (
        {"normalisation": "columns"},
        {"token_weighting": "grad"},
        {"readout": "cls"},
        {"alpha": 1.5},
        {"gate": "sometimes"},
        {"head_top_fraction": 0.0},
        {"cls_mode": "cls"},
        {"head_selection": "all"},
    )
    for bad in bad_options:
        with pytest.raises(ValueError, match=next(iter(bad))):
            GradSkipOptions(**bad)
