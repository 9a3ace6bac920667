"""The per-probe record: each field declares once where its value goes."""

from __future__ import annotations

import pytest
import torch

from gradskip_lightning.engine.output.report import epoch_scalars, table_cells
from gradskip_lightning.engine.scoring.record import ProbeRecord, Scalar, npz_fields, scalar_fields, table_fields


def test_fields_declare_scope_scalars_table_and_files():
    assert scalar_fields() == {
        "insertion": Scalar("faithfulness", "insertion"),
        "deletion": Scalar("faithfulness", "deletion"),
        "ins_minus_del": Scalar("faithfulness", "ins_minus_del"),
        "insertion_start": Scalar("faithfulness", "insertion_start"),
        "fvt_violation": Scalar("faithfulness", "fvt_violation"),
        "pointing_hit": Scalar("regions", "pointing_game"),
        "region_mass": Scalar("regions", "mass", regions=True),
        "region_rank": Scalar("regions", "rank", regions=True),
        "pixel_accuracy": Scalar("regions", "pixel_accuracy"),
        "mean_iou": Scalar("regions", "mean_iou"),
        "average_precision": Scalar("regions", "average_precision"),
        "transplant_flip": Scalar("transplant", "flip_rate"),
        "transplant_mass": Scalar("transplant", "tag_mass"),
        "class_sensitivity": Scalar("faithfulness", "class_sensitivity"),
    }
    assert "transplant_flip" not in scalar_fields(compared_only=True)  # the model's, not a method's
    assert list(table_fields())[:3] == ["probabilities", "insertion", "deletion"]
    assert table_fields()["region_mass"] == ("mass", True)
    saved = {"targets", "predictions", "probabilities", "insertion", "deletion", "maps", "token_maps"}
    saved |= {"pointing_hit", "region_mass", "region_rank", "transplant_flip", "transplant_mass"}
    saved |= {"pixel_accuracy", "mean_iou", "average_precision", "insertion_start", "class_sensitivity"}
    assert set(npz_fields()) == saved


def test_per_region_fields_give_one_scalar_and_one_column_per_region_and_nan_is_left_out():
    nan = float("nan")
    main = ProbeRecord(
        insertion=torch.tensor([0.2, 0.4]),
        region_mass=torch.tensor([[0.5, nan], [0.7, 0.1]]),
        gates=torch.tensor([[0.2, 0.6], [0.4, 0.8]]),
    )
    other = ProbeRecord(insertion=torch.tensor([0.1, 0.1]), region_mass=torch.tensor([[nan, nan], [0.3, 0.9]]))
    records = {"gradskip": main, "rollout": other}
    scalars = epoch_scalars(records, "gradskip", {}, ["object", "tag"], epoch=3, prefix="gs/")
    expected = {
        "gs/epoch": 3.0,
        "faithfulness/gs/insertion": 0.3,
        "regions/gs/mass/object": 0.6,
        "regions/gs/mass/tag": 0.1,  # the NaN (empty region) is left out of the mean
        "gates/gs/layer_0": 0.3,
        "gates/gs/layer_1": 0.7,
        "faithfulness/gs/insertion/rollout": 0.1,
        "regions/gs/mass/object/rollout": 0.3,
        "regions/gs/mass/tag/rollout": 0.9,
    }
    assert scalars == pytest.approx(expected, abs=1e-6)
    cells = table_cells(main.values(), 0, ["object", "tag"])
    assert cells == {"insertion": pytest.approx(0.2), "mass/object": 0.5, "mass/tag": None}


def test_select_concat_and_scopes():
    record = ProbeRecord(insertion=torch.arange(4.0), maps=torch.zeros(4, 2, 2))
    assert list(record.values("shared")) == ["insertion"] and list(record.values("rank_zero")) == ["maps"]
    part = record.select(slice(1, 3))
    assert part.insertion.tolist() == [1.0, 2.0] and part.maps.shape == (2, 2, 2) and part.deletion is None
    joined = ProbeRecord.concat([record.select(slice(0, 1)), record.select(slice(1, 4))])
    assert torch.equal(joined.insertion, record.insertion)
