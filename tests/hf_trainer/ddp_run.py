"""Run by test_ddp.py: fine-tune the tiny HF ViT for 2 epochs with GradSkipTrainerCallback, then one
evaluation outside training, in 1 process or under ``torch.distributed.run`` (gloo, CPU).

The global batch is 8 whatever the process count (8 / W per process), so the training is the same up
to float rounding. Writes ``devices_<W>/gradskip/maps`` (rank zero) and, per rank,
``devices_<W>/scalars_rank<r>.json``: the callback's rows of ``trainer.state.log_history`` and the
evaluation's metrics.

Usage: python -m torch.distributed.run --nproc_per_node 2 tests/hf_trainer/ddp_run.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gradskip_lightning import DiscoveryStage, MethodSettings, ProbeSettings, ScoreSettings  # noqa: E402
from gradskip_lightning.hf_trainer import GradSkipTrainerCallback  # noqa: E402
from tests.hf_trainer.helpers import tiny_trainer  # noqa: E402

#: An odd probe count and a small explain batch: uneven shards and several chunks per rank.
CALLBACK = dict(
    probes=ProbeSettings(num_probes=9, explain_batch_size=2),
    scores=ScoreSettings(insertion_steps=4),
    methods=MethodSettings(compare=["rollout"]),
    discovery=DiscoveryStage(probes_per_class=3),
    progress=False,
)


def main(out: Path) -> None:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    folder = out / f"devices_{world}"
    options = dict(per_device_train_batch_size=8 // world, ddp_backend="gloo" if world > 1 else None)
    trainer = tiny_trainer(folder, [GradSkipTrainerCallback(**CALLBACK)], **options)
    trainer.train()
    evaluated = trainer.evaluate()
    rows = [row for row in trainer.state.log_history if "eval_gradskip/epoch" in row]
    ours = {key: value for key, value in evaluated.items() if "gradskip/" in key}
    scalars = {"rows": rows, "evaluated": ours, "world": trainer.args.world_size}
    (folder / f"scalars_rank{trainer.args.process_index}.json").write_text(json.dumps(scalars, sort_keys=True))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
