"""The ``cost`` benchmark: FLOP ratios and memory that mean something, and the JSON the CLI writes."""

from __future__ import annotations

import json

import pytest

from benchmarks.__main__ import main
from benchmarks.cost import peak_mib
from gradskip_lightning.families.segformer import SEGFORMER_METHODS


@pytest.mark.slow  # four fresh subprocesses
def test_cost_records_flop_ratios_and_memory_against_the_floor(tmp_path, capsys):
    out = tmp_path / "cost.json"
    main(
        [
            "cost",
            "--models",
            "vit_tiny_patch16_224",
            "--methods",
            "gradskip",
            "rollout",
            "floor",
            "--batch-size",
            "2",
            "--repeats",
            "1",
            "--json",
            str(out),
        ]
    )
    records = {r["method"]: r for r in json.loads(out.read_text())}
    keys = {
        "model",
        "method",
        "forward_flops",
        "flops_per_map",
        "ratio_to_forward",
        "ms_per_map",
        "peak_mib_per_image",
        "peak_to_floor",
    }
    assert all(keys <= set(r) for r in records.values())
    # One forward of ViT-Ti/16 at 224 px: 1.26 GMAC = 2.5 GFLOPs (2 per multiply-add).
    assert 2.4e9 < records["rollout"]["forward_flops"] < 2.6e9
    # Rollout needs the forward only; GradSkip and the floor add one activation-only backward.
    assert abs(records["rollout"]["ratio_to_forward"] - 1.0) < 0.01
    assert 1.9 < records["gradskip"]["ratio_to_forward"] <= 2.2
    assert 1.9 < records["floor"]["ratio_to_forward"] <= 2.2
    # Without a graph, rollout stays far below the floor; GradSkip streams close to it.
    assert records["floor"]["peak_mib_per_image"] > 5 and records["floor"]["peak_to_floor"] == 1.0
    assert records["rollout"]["peak_to_floor"] < 0.5
    assert records["gradskip"]["peak_to_floor"] < 1.3
    assert "MiB/image" in capsys.readouterr().out


def test_peak_mib_sees_a_transient_allocation():
    def allocate_and_free():
        import mmap

        block = mmap.mmap(-1, 64 * 1024 * 1024)  # 64 MiB of fresh pages (malloc may reuse resident ones), touched
        for page in range(0, len(block), mmap.PAGESIZE):
            block[page] = 1
        block.close()

    assert 60 < peak_mib(allocate_and_free) < 80


def test_segformer_record_counts_the_forward_and_a_ratio_per_method():
    pytest.importorskip("transformers")
    from benchmarks.cost import measure, methods_of

    assert methods_of("segformer_tiny_64", None) == [*SEGFORMER_METHODS, "floor"]
    assert methods_of("segformer_tiny_64", ["lrp", "gradskip"]) == ["gradskip"]  # lrp is ViT-only
    records = {m: measure("segformer_tiny_64", m, 1) for m in ("rollout", "floor")}
    # The tiny SegFormer's forward at 64 px: 1.07 M multiply-adds (convolutions, projections, decoder).
    assert records["rollout"]["forward_flops"] == records["floor"]["forward_flops"] == 2_146_560
    # The floor adds one activation-only backward, which stops at the tokens entering stage 0.
    assert 1.5 < records["floor"]["ratio_to_forward"] <= 2.2
    # Every segmentation method runs the capture's activation-only backward (rollout included).
    assert records["rollout"]["ratio_to_forward"] > 1.5


def test_segformer_gradskip_map_costs_at_most_2_2_forwards():
    pytest.importorskip("transformers")
    from benchmarks.cost import measure

    assert measure("segformer_tiny_64", "gradskip", 1)["ratio_to_forward"] <= 2.2  # measured 1.73
