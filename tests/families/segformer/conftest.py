"""A tiny random-initialised SegFormer (4 stages, 64 px, 3 classes; no download)."""

import pytest
import torch
from transformers import SegformerConfig, SegformerForSemanticSegmentation

from benchmarks.cost import TINY_SEGFORMER


def tiny_segformer(seed: int = 0) -> SegformerForSemanticSegmentation:
    """4 stages (grids 16/8/4/2 on 64 px), reductions 4/2/1/1, widths 8-16, depths 1/2/1/1."""
    torch.manual_seed(seed)
    return SegformerForSemanticSegmentation(SegformerConfig(**TINY_SEGFORMER)).eval()  # the cost benchmark's too


@pytest.fixture
def segformer() -> SegformerForSemanticSegmentation:
    return tiny_segformer()


@pytest.fixture
def images() -> torch.Tensor:
    return torch.randn(3, 3, 64, 64, generator=torch.Generator().manual_seed(1))
