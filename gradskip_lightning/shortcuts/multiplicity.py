"""Family-wise error control of the discovery stage's tests: Holm's step-down, and the two-stage gate of the
hotspot tests (flips first, then pixels).

Every test of one run (one epoch's classes x groups x regions, or its (class, test) transfers) has a p-value;
an alarm needs its adjusted p-value at most ``alpha``, the family-wise error rate: the chance, when no class
has a shortcut, that any test fires.

- :func:`holm`: Holm's (1979) step-down adjustment. The i-th smallest of m p-values is multiplied by
  m - i + 1, not m (Bonferroni): valid under any dependence between the tests, never larger than
  Bonferroni's, and smaller for every test after the first.
- :func:`gated_holm`: a hotspot test is a shortcut only if both its flips (the region's pixels flip other
  classes' probes beyond the controls) and its pixels (the region's pixels agree across the class beyond
  chance) say so. Testing the larger of the two p-values against every test of the run (an intersection-union
  test, Bonferroni over all) made the pixels' test, which has only the class's few probes, fail for a region
  whose flips were overwhelming. The gate tests the flips first, Holm over every test at ``alpha / 2``, then
  the pixels at ``alpha / 2``, Holm over only the tests whose flips passed. A false alarm is either a test
  whose flips are chance passing the first stage (at most ``alpha / 2`` over the run) or a test whose flips
  are real but whose pixels are chance passing the second (at most ``alpha / 2``, the pixels' agreement being
  independent of which tests the flips let through): ``alpha`` in all. Measured by simulation with the real
  tests on random images (``tests/shortcuts/test_multiplicity.py``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["gated_holm", "holm"]


def holm(p_values: Tensor) -> Tensor:
    """Holm-adjusted p-values (N,) float64 of ``p_values`` (N,): over the m finite ones in ascending order, the
    i-th (from 1) times ``m - i + 1``, made non-decreasing in that order and capped at 1; NaN stays NaN (not
    counted in m). A test is rejected at family-wise level ``alpha`` when its adjusted p-value is at most ``alpha``.

    Example:
        >>> [round(p, 6) for p in holm(torch.tensor([0.01, 0.04, math.nan, 0.02, 0.5], dtype=torch.float64)).tolist()]
        [0.04, 0.08, nan, 0.06, 0.5]
    """
    values = p_values.double().flatten()
    finite = ~values.isnan()
    present = values[finite]
    order = present.argsort(stable=True)
    factors = torch.arange(len(present), 0, -1, dtype=torch.float64, device=values.device)
    stepped = (present[order] * factors).cummax(dim=0).values.clamp(max=1.0)
    adjusted = torch.empty_like(present)
    adjusted[order] = stepped
    result = torch.full_like(values, math.nan)
    result[finite] = adjusted
    return result.reshape(p_values.shape)


def gated_holm(flip_p_values: Tensor, pixel_p_values: Tensor, alpha: float) -> Tensor:
    """Adjusted p-values (N,) float64 of N hotspot tests, each with the p-values of its flips and of its pixels
    (N,) (module docstring): ``2 x holm(flips)``, capped at 1; for the tests whose value is at most ``alpha``,
    the larger of it and ``2 x holm(pixels)`` over those tests only. A test whose flips fail keeps its flips'
    value (above ``alpha``). NaN where either p-value is (such a test is not counted).

    Example:
        >>> flips = torch.tensor([1e-9, 0.5, 0.8, 0.3], dtype=torch.float64)  # test 0's flips are overwhelming
        >>> pixels = torch.tensor([0.02, 0.02, 0.9, 0.01], dtype=torch.float64)
        >>> gated_holm(flips, pixels, 0.05).tolist()  # Bonferroni of the larger p: 4 x 0.02 = 0.08 for test 0
        [0.04, 1.0, 1.0, 1.0]
    """
    flips, pixels = flip_p_values.double(), pixel_p_values.double()
    defined = ~(flips.isnan() | pixels.isnan())
    flips = torch.where(defined, flips, math.nan)
    stage_one = (2 * holm(flips)).clamp(max=1.0)
    gated = stage_one <= alpha  # False where NaN
    stage_two = (2 * holm(torch.where(gated, pixels, math.nan))).clamp(max=1.0)
    return torch.where(gated, torch.maximum(stage_one, stage_two), stage_one)
