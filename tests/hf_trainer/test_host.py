"""The Trainer's side of the epoch-end seam: monitored values as evaluation metrics and log-history
rows, and what a transformers model and its image processor tell the callback."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import TrainerState, ViTImageProcessor

from gradskip_lightning.hf_trainer.host import TrainerHost, check_weights, model_data
from tests.hf_trainer.helpers import tiny_vit


def test_monitored_values_become_prefixed_metrics_and_one_history_row():
    state = TrainerState(epoch=2.0, global_step=6)
    host = TrainerHost(state, fitting=True, monitored={}, prefix="eval_val")
    host.monitor({"faithfulness/gs/insertion": 0.25, "regions/gs/mass/a": math.nan}, stale=set())
    host.monitor({"gs/skipped": 1.0}, stale={"faithfulness/gs/deletion"})
    metrics = host.metrics()
    assert metrics["eval_val_faithfulness/gs/insertion"] == 0.25
    assert "eval_val_regions/gs/mass/a" not in metrics  # undefined this epoch: left out, as in callback_metrics
    assert math.isnan(metrics["eval_val_faithfulness/gs/deletion"])  # a skipped score: NaN, ranked worst
    host.record(["faithfulness/gs/insertion", "regions/gs/mass/a"])
    (row,) = state.log_history
    assert row["eval_val_faithfulness/gs/insertion"] == 0.25 and math.isnan(row["eval_val_regions/gs/mass/a"])
    assert (row["epoch"], row["step"]) == (2.0, 6)
    assert host.step == 6 and host.rank_zero


def test_model_data_reads_the_config_and_the_image_processor():
    model = tiny_vit(id2label={0: "cat", 1: "dog", 2: "fox"}, label2id={"cat": 0, "dog": 1, "fox": 2})
    processor = ViTImageProcessor(image_mean=[0.4, 0.5, 0.6], image_std=[0.2, 0.2, 0.2])
    data = model_data(model, processor)
    assert data.class_names == ["cat", "dog", "fox"] and data.task is None
    assert list(data.mean) == [0.4, 0.5, 0.6] and list(data.std) == [0.2, 0.2, 0.2]
    multilabel = model_data(tiny_vit(problem_type="multi_label_classification"), None)
    assert multilabel.task == "multilabel" and multilabel.mean is None
    assert multilabel.class_names == ["LABEL_0", "LABEL_1", "LABEL_2"]  # transformers' default names


def test_half_precision_weights_are_refused_naming_the_fix():
    check_weights(tiny_vit())
    with pytest.raises(ValueError, match=r"torch.float16.*torch_dtype=torch.float32"):
        check_weights(tiny_vit().to(torch.float16))
