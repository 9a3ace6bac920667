import pytest
import torch

from gradskip_lightning.families.segformer import (
    CONSERVING,
    SEGFORMER_METHODS,
    capture_segmentation,
    chefer_segmentation,
    decoder_starts,
    gradskip_segmentation,
    key_to_token,
    rollout_segmentation,
)
from gradskip_lightning.methods import GradSkipOptions
from gradskip_lightning.methods.baselines import rollout_step
from gradskip_lightning.methods.gradskip import propagate_block, propagate_through_keys, rows_or_identity
from gradskip_lightning.methods.grids import cell_spread, spread_to_cells

TARGETS = torch.tensor([0, 1, 2])
OPTIONS = GradSkipOptions()


def run_method(method, capture):
    spec = SEGFORMER_METHODS[method]
    return spec.step(capture, spec.options())


def test_cell_spread_is_uniform_over_each_cell():
    cells = cell_spread((2, 2), (4, 3), 2, torch.device("cpu"), torch.float64)
    torch.testing.assert_close(cells.sum(dim=-1), torch.ones(4, dtype=torch.float64))
    fine = torch.arange(12).reshape(4, 3)
    assert set(fine[cells[3].reshape(4, 3) > 0].tolist()) == {11, 8}  # coarse (1, 1) covers rows 2-3, column 2
    assert torch.equal(cell_spread((3, 3), (3, 3), 1, torch.device("cpu"), torch.float32), torch.eye(9))
    with pytest.raises(ValueError, match="no token"):
        cell_spread((3, 1), (4, 1), 2, torch.device("cpu"), torch.float32)


def test_key_to_token_covers_each_window(segformer, images):
    cap = capture_segmentation(segformer, images, TARGETS)
    spread = key_to_token(cap.stages[0])  # 16 x 16 tokens, sr 4: 16 keys of 16 tokens
    assert spread.shape == (16, 256)
    assert torch.equal((spread > 0).sum(dim=-1), torch.full((16,), 16))
    torch.testing.assert_close(spread.sum(dim=0), torch.full((256,), 1 / 16))


@pytest.mark.parametrize("method", sorted(set(SEGFORMER_METHODS) - {"random"}))  # random: row b is the b-th draw
def test_batch_equals_singles(segformer, images, method):
    run = lambda x, t: run_method(method, capture_segmentation(segformer, x, t)).token_map  # noqa: E731
    batch = run(images, TARGETS)
    singles = torch.cat([run(images[b : b + 1], TARGETS[b : b + 1]) for b in range(3)])
    torch.testing.assert_close(batch, singles, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("method", CONSERVING)
def test_conservation_per_block_and_stage(segformer, images, method):
    cap = capture_segmentation(segformer.double(), images.double(), TARGETS)
    starts = decoder_starts(cap)
    torch.testing.assert_close(sum(s.sum(dim=-1) for s in starts), torch.ones(3, dtype=torch.float64))
    result = run_method(method, cap)
    assert len(result.blocks) == 5 and [s.stage for s in result.stages] == [3, 2, 1, 0]
    for block in result.blocks:
        torch.testing.assert_close(block.below.sum(dim=-1), block.above.sum(dim=-1))
        assert (block.below >= 0).all()
    for stage in result.stages:
        if stage.passed_down is not None:
            torch.testing.assert_close(stage.passed_down.sum(dim=-1), stage.bottom.sum(dim=-1))
            below = next(s for s in result.stages if s.stage == stage.stage - 1)
            torch.testing.assert_close(below.top, stage.passed_down + below.start)
    torch.testing.assert_close(result.token_map.sum(dim=(1, 2)), torch.ones(3, dtype=torch.float64))
    assert result.token_map.shape == (3, 16, 16)


def test_identity_block_passes_relevance_unchanged(segformer, images):
    attention = segformer.segformer.stages[1].blocks[1].attention
    with torch.no_grad():
        attention.o_proj.weight.zero_()
        attention.o_proj.bias.zero_()
    result = gradskip_segmentation(capture_segmentation(segformer, images, TARGETS), OPTIONS)
    step = next(s for s in result.steps if s.layer == 2)
    assert torch.equal(step.gates, torch.zeros_like(step.gates))
    torch.testing.assert_close(step.relevance_below, step.relevance_above, rtol=0, atol=0)
    other = next(s for s in result.steps if s.layer == 1)
    assert not torch.allclose(other.relevance_below, other.relevance_above)


def test_gradskip_internals_have_the_heads_of_each_stage(segformer, images):
    result = gradskip_segmentation(capture_segmentation(segformer, images, TARGETS), OPTIONS)
    assert [s.layer for s in result.steps] == [4, 3, 2, 1, 0]
    assert [s.omega.shape for s in result.steps] == [(3, 4), (3, 2), (3, 2), (3, 2), (3, 1)]
    for step in result.steps:
        torch.testing.assert_close(step.omega.sum(dim=-1), torch.ones(3))
    with pytest.raises(ValueError, match="completeness"):
        gradskip_segmentation(capture_segmentation(segformer, images, TARGETS), GradSkipOptions(completeness=True))


def test_rollout_step_of_uniform_attention_over_reduced_keys():
    spread = cell_spread((2, 2), (4, 4), 2, torch.device("cpu"), torch.float64)  # 4 keys, 16 tokens
    attn = torch.full((1, 2, 16, 4), 0.25, dtype=torch.float64)
    matrix = (torch.full((16, 16), 1 / 16, dtype=torch.float64) + torch.eye(16, dtype=torch.float64)) / 2
    relevance = torch.rand(1, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(rollout_step(relevance, attn, spread), relevance @ matrix)


def test_steps_over_keys_equal_the_dense_n_by_n_matrices():
    """The key-space steps (no (N, N) matrix) against rownorm(W S) and R @ cell_spread, formed densely."""
    generator = torch.Generator().manual_seed(0)
    spread = cell_spread((2, 3), (5, 6), 2, torch.device("cpu"), torch.float64)  # 6 keys, 30 tokens (rows clipped)
    w = torch.rand(2, 30, 6, dtype=torch.float64, generator=generator)
    w[0, 3] = 0.0  # a query with no attention passes its relevance on (identity row)
    relevance, beta = torch.rand(2, 2, 30, dtype=torch.float64, generator=generator)
    dense = rows_or_identity(w @ spread)
    expected = propagate_block(relevance, dense, beta)
    torch.testing.assert_close(propagate_through_keys(relevance, w, spread, beta), expected)
    coarse = torch.rand(2, 6, dtype=torch.float64, generator=generator)
    fine = cell_spread((2, 3), (3, 5), 2, torch.device("cpu"), torch.float64)
    torch.testing.assert_close(spread_to_cells(coarse, (2, 3), (3, 5), 2), coarse @ fine)


def test_rollout_shapes(segformer, images):
    result = rollout_segmentation(capture_segmentation(segformer, images, TARGETS))
    assert result.token_map.shape == (3, 16, 16) and result.steps is None
    assert [b.above.shape[-1] for b in result.blocks] == [4, 16, 64, 64, 256]
    assert [s.passed_down.shape[-1] for s in result.stages[:-1]] == [16, 64, 256]


def test_chefer_adds_relevance_down_the_blocks(segformer, images):
    cap = capture_segmentation(segformer, images, TARGETS)
    result = chefer_segmentation(cap)
    for block in result.blocks:  # R + (...)^T R with a non-negative matrix: every entry grows or stays
        assert (block.below >= block.above).all()
    assert result.blocks[0].below.sum() > result.blocks[0].above.sum()
    torch.testing.assert_close(result.token_map.sum(dim=(1, 2)), torch.ones(3))
    assert not torch.allclose(result.token_map, rollout_segmentation(cap).token_map)
