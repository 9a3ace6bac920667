"""Shards: every rank explains the same number of probes (sharded strategies need equal forwards)."""

from __future__ import annotations

import pytest
import torch

from gradskip_lightning.engine.scoring import distributed
from gradskip_lightning.engine.scoring.record import ProbeRecord


@pytest.mark.parametrize("num_probes, world", [(9, 2), (5, 4), (2, 3), (8, 2)])
def test_shards_are_padded_to_equal_counts_and_cover_every_probe_once(monkeypatch, num_probes, world):
    shards = []
    for rank in range(world):
        monkeypatch.setattr(distributed, "_world", lambda rank=rank: (rank, world))
        shards.append(distributed.shard_positions(num_probes))
    assert len({len(s.positions) for s in shards}) == 1  # equal forward passes on every rank
    own = sorted(p for s in shards for p in s.positions[: s.count].tolist())
    assert own == list(range(num_probes))


def test_padding_is_dropped_when_gathering():
    shard = distributed.Shard(torch.tensor([0, 1, 2, 2]), 3)
    record = ProbeRecord(insertion=torch.tensor([0.1, 0.2, 0.3, 9.0]), maps=torch.zeros(4, 2, 2))
    merged, error = distributed.gather_records({"gradskip": record}, shard, 3, None)
    assert error is None and merged["gradskip"].insertion.tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert merged["gradskip"].maps.shape == (3, 2, 2)
