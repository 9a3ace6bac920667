"""Detection scores of the shortcut benchmark, from tag masses (relevance mass on the tag, in [0, 1]).

- :func:`detection_auroc`: how well one probe's tag mass tells the spurious model from the clean one;
- :func:`first_flag_epoch`: the first epoch whose mean tag mass exceeds the clean model's
  :data:`FLAG_QUANTILE` quantile (over its probes and epochs);
- :func:`spurious_epoch`: the first epoch whose spurious score reaches
  :data:`~gradskip_lightning.shortcuts.tags.SPURIOUS_THRESHOLD`.

Masses and scores are taken at trace points, (T,) times in epochs of training (1.0 = after the first
epoch; 0.25 = a quarter into it); by default one per epoch, 1, 2, ..., T. None means never.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from gradskip_lightning.shortcuts.tags import SPURIOUS_THRESHOLD

#: The clean model's quantile of tag mass (over probes and epochs) above which a mean mass flags the tag.
FLAG_QUANTILE = 0.95


def detection_auroc(spurious: Tensor, clean: Tensor) -> float:
    """AUROC of telling the spurious model from the clean one by one probe's tag mass.

    The probability that a probe's mass under the spurious model exceeds one under the clean model
    (ties count one half), over all pairs: 1 separates perfectly, 0.5 is chance. NaN masses (a map
    with no positive relevance) are left out.

    Args:
        spurious: (n,) tag masses of the probes under the spurious model.
        clean: (m,) tag masses of the probes under the clean model.

    Returns:
        The AUROC in [0, 1], NaN when either side has no finite mass.

    Example:
        >>> detection_auroc(torch.tensor([0.3, 0.5, 0.1]), torch.tensor([0.1, 0.2]))
        0.75
    """
    spurious, clean = _finite(spurious, "spurious"), _finite(clean, "clean")
    if len(spurious) == 0 or len(clean) == 0:
        return math.nan
    difference = spurious[:, None] - clean[None, :]
    return ((difference > 0).double() + 0.5 * (difference == 0).double()).mean().item()


def flag_threshold(clean: Tensor) -> float:
    """The clean model's :data:`FLAG_QUANTILE` quantile of tag mass over all its probes and epochs.

    Args:
        clean: (E, n) tag masses of the clean model, epochs by probes; NaNs are left out.
    """
    return torch.nanquantile(clean.double().flatten(), FLAG_QUANTILE).item()


def first_flag_epoch(spurious: Tensor, clean: Tensor, times: Tensor | None = None) -> float | None:
    """The first time (in epochs) at which the spurious model's mean tag mass over the probes exceeds
    :func:`flag_threshold` of the clean model; None when no trace point does.

    Args:
        spurious: (T, n) tag masses of the spurious model, trace points by probes.
        clean: (T', n') tag masses of the clean model (any number of trace points and probes).
        times: (T,) the trace points in epochs; None: 1, 2, ..., T.

    Example:
        >>> clean = torch.tensor([[0.10, 0.20], [0.15, 0.05]])  # 95th percentile 0.1925
        >>> first_flag_epoch(torch.tensor([[0.1, 0.2], [0.2, 0.3], [0.4, 0.4]]), clean)
        2.0
    """
    if spurious.ndim != 2 or clean.ndim != 2:
        raise ValueError(
            "masses must be (trace points, probes), "
            f"got spurious {tuple(spurious.shape)} and clean {tuple(clean.shape)}"
        )
    flagged = spurious.double().nanmean(dim=1) > flag_threshold(clean)
    return _first(flagged, times)


def spurious_epoch(scores: Tensor, times: Tensor | None = None) -> float | None:
    """The first time (in epochs) whose spurious score (T,) reaches the threshold (0.85); None if none.

    >>> spurious_epoch(torch.tensor([0.2, 0.9, 0.8])), spurious_epoch(torch.tensor([0.5]))
    (2.0, None)
    >>> spurious_epoch(torch.tensor([0.2, 0.9]), times=torch.tensor([0.5, 1.0]))
    1.0
    """
    return _first(scores >= SPURIOUS_THRESHOLD, times)


def _first(hits: Tensor, times: Tensor | None) -> float | None:
    """The time of the first True in ``hits`` (T,) bool, times 1..T by default; None when none."""
    times = torch.arange(1, len(hits) + 1, dtype=torch.double) if times is None else times.double()
    if times.shape != hits.shape:
        raise ValueError(f"times must be (T,) for {len(hits)} trace points, got shape {tuple(times.shape)}")
    found = hits.nonzero()
    return None if len(found) == 0 else times[found[0, 0]].item()


def _finite(values: Tensor, name: str) -> Tensor:
    if values.ndim != 1:
        raise ValueError(f"{name} must be (probes,) tag masses, got shape {tuple(values.shape)}")
    return values.double()[~values.isnan()]
