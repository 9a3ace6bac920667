"""The per-probe record: each field declares once where its value goes."""

from __future__ import annotations

import torch

from gradskip_lightning.callback.record import ProbeRecord, npz_fields, scalar_fields, table_fields
from gradskip_lightning.callback.sinks import TABLE_COLUMNS


def test_fields_declare_scope_scalars_table_and_files():
    assert scalar_fields() == {
        "insertion": "insertion",
        "deletion": "deletion",
        "ins_minus_del": "ins_minus_del",
        "fvt_violation": "fvt_violation",
        "pointing_hit": "pointing_game",
    }
    compared = ["insertion", "deletion", "ins_minus_del", "fvt_violation"]
    assert list(scalar_fields(compared_only=True).values()) == compared
    assert TABLE_COLUMNS[5:8] == list(table_fields().values()) == ["probability", "insertion", "deletion"]
    saved = {"targets", "predictions", "probabilities", "insertion", "deletion", "maps", "token_maps"}
    assert set(npz_fields()) == saved


def test_select_concat_and_scopes():
    record = ProbeRecord(insertion=torch.arange(4.0), maps=torch.zeros(4, 2, 2))
    assert list(record.values("shared")) == ["insertion"] and list(record.values("rank_zero")) == ["maps"]
    part = record.select(slice(1, 3))
    assert part.insertion.tolist() == [1.0, 2.0] and part.maps.shape == (2, 2, 2) and part.deletion is None
    joined = ProbeRecord.concat([record.select(slice(0, 1)), record.select(slice(1, 4))])
    assert torch.equal(joined.insertion, record.insertion)
