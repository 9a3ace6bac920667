"""Under DDP every rank computes rank zero's plan: the budget measures each process's own seconds, and ranks
that planned apart would enter different collectives (a real 2-process gloo group on CPU)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

from gradskip_lightning.engine.scoring.budget import TimeBudget
from gradskip_lightning.engine.scoring.distributed import from_rank_zero


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        budget = TimeBudget(0.02, "gradskip", ["rollout"])
        budget._train = [100.0]  # a 2 s allowance on both ranks
        first = budget.plan(fitting=True)
        # rank 1's rollout took 10 times as long: on its own it would thin the compared methods 10 times as much
        compared = 0.2 if rank == 0 else 2.0
        for _ in range(2):  # the strides are planned from the second epoch end
            budget.record(first, total=1.0 + compared, seconds={"gradskip/scores": 0.5, "rollout/scores": compared})
        own = budget.plan(fitting=True).methods
        agreed = from_rank_zero(budget.plan(fitting=True))
        Path(out, f"rank{rank}.json").write_text(json.dumps({"own": own, "agreed": agreed.methods}))
    finally:
        dist.destroy_process_group()


def test_every_rank_gets_rank_zeros_plan(tmp_path):
    mp.spawn(_rank, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["own"] != ranks[1]["own"]  # the ranks' own plans differ
    assert ranks[0]["agreed"] == ranks[1]["agreed"] == ranks[0]["own"]  # both take rank zero's
