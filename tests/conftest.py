"""Shared fixtures: tiny timm ViTs, offline W&B in a temporary folder, fixed seeds."""

from __future__ import annotations

import os

# Tiny models gain nothing from intra-op threads, and oversubscribed threads (DDP workers, CLI
# subprocesses, a busy machine) slow them by an order of magnitude: one thread per process.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import timm  # noqa: E402
import torch  # noqa: E402

from tests.callbacks.wandb_files import use_offline_wandb  # noqa: E402

torch.set_num_threads(1)

#: The seed of the tests that train a model and then assert its quality (model init, data and batch
#: order): 0 unless GRADSKIP_TEST_SEED is set. Their thresholds come from the spread over several
#: seeds, with a margin (a fully seeded training still differs between machines and library builds),
#: so ``GRADSKIP_TEST_SEED=3 python -m pytest -m trained`` must pass too.
TRAIN_SEED = int(os.environ.get("GRADSKIP_TEST_SEED", "0"))


@pytest.fixture(autouse=True)
def _offline_wandb(tmp_path, monkeypatch):
    """Every test runs W&B offline, writing only under its own temporary folder."""
    use_offline_wandb(monkeypatch, tmp_path / "wandb_env")
    yield
    import wandb

    if wandb.run is not None:  # a run left open would be reused by the next test's WandbLogger
        wandb.finish()
    wandb.teardown()  # the process-wide settings keep the first WANDB_DIR: the next test reads its own


def make_tiny_vit(
    num_classes: int = 4,
    img_size: int = 32,
    patch_size: int = 8,
    depth: int = 2,
    num_heads: int = 3,
    embed_dim: int = 48,
    seed: int = 0,
    **kwargs,
) -> torch.nn.Module:
    """A randomly initialised timm ViT small enough for unit tests (16 patches of 8 px at 32 px)."""
    torch.manual_seed(seed)
    return timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=False,
        num_classes=num_classes,
        img_size=img_size,
        patch_size=patch_size,
        depth=depth,
        num_heads=num_heads,
        embed_dim=embed_dim,
        **kwargs,
    ).eval()


@pytest.fixture
def tiny_vit() -> torch.nn.Module:
    return make_tiny_vit()
