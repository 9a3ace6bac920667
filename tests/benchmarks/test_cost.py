"""The ``cost`` benchmark: FLOP ratios that mean something, and the JSON the CLI writes."""
from __future__ import annotations

import json

from gradskip_lightning.benchmarks.__main__ import main


def test_cost_records_and_flop_ratios(tmp_path, capsys):
    out = tmp_path / "cost.json"
    main(["cost", "--models", "vit_tiny_patch16_224", "--methods", "gradskip", "rollout",
          "--batch-size", "2", "--repeats", "1", "--json", str(out)])
    records = {r["method"]: r for r in json.loads(out.read_text())}
    keys = {"model", "method", "forward_flops", "flops_per_map", "ratio_to_forward", "ms_per_map"}
    assert all(keys <= set(r) for r in records.values())
    # One forward of ViT-Ti/16 at 224 px: 1.26 GMAC = 2.5 GFLOPs (2 per multiply-add).
    assert 2.4e9 < records["rollout"]["forward_flops"] < 2.6e9
    # Rollout needs the forward only; GradSkip adds one activation-only backward (no weight grads).
    assert abs(records["rollout"]["ratio_to_forward"] - 1.0) < 0.01
    assert 1.9 < records["gradskip"]["ratio_to_forward"] <= 2.2
    assert "GFLOPs/map" in capsys.readouterr().out
