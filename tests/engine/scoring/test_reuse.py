"""No forward twice: the callback's scores, with the clean scores from the explain forward and the starts
shared by every method, equal a dense oracle that forwards every perturbed image (today's algorithm)."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from gradskip_lightning.engine import ScoreSettings
from gradskip_lightning.engine.probes import ProbeSet
from gradskip_lightning.engine.scoring.compute import EpochWork, explain_probes
from gradskip_lightning.engine.setup import explainers_for
from gradskip_lightning.metrics.insertion_deletion import insertion_start_images
from gradskip_lightning.metrics.perturbation import gaussian_blur, step_counts, target_scores
from tests.callbacks.helpers import tiny_module, tiny_segmentation_module

STEPS = 16


def dense_curves(model, images, targets, maps, patch, start, regions=None) -> tuple[Tensor, Tensor]:
    """Every one of the 2 x B x (K + 1) images built by hand and forwarded in one plain forward: (B, K + 1) each."""
    batch, _, height, width = images.shape
    grid_w = width // patch
    relevance = maps.double().reshape(batch, height // patch, patch, grid_w, patch).sum(dim=(2, 4)).flatten(1)
    order = torch.argsort(relevance, dim=1, descending=True, stable=True)
    counts = step_counts(relevance.shape[1], STEPS).tolist()
    inserted_from = insertion_start_images(images, start)
    deleted_to = torch.zeros_like(images)
    built, owners = [], []
    for b in range(batch):
        for base, fill in ((images[b], deleted_to[b]), (inserted_from[b], images[b])):
            for count in counts:
                image = base.clone()
                for index in order[b, :count].tolist():
                    row, col = divmod(index, grid_w)
                    rows, cols = slice(row * patch, (row + 1) * patch), slice(col * patch, (col + 1) * patch)
                    image[:, rows, cols] = fill[:, rows, cols]
                built.append(image)
                owners.append(b)
    owners_t = torch.tensor(owners)
    with torch.no_grad():
        logits = model(torch.stack(built))
    scores = target_scores(logits, targets[owners_t], "softmax", None if regions is None else regions[owners_t])
    curves = scores.double().reshape(batch, 2, STEPS + 1)
    return curves[:, 1], curves[:, 0]  # insertion, deletion


def dense_violation(model, images, targets, maps, patch, regions=None) -> Tensor:
    """The top-1 |relevance| patch zeroed, forwarded beside the clean image: (B,) bool."""
    batch, _, height, width = images.shape
    relevance = maps.double().reshape(batch, height // patch, patch, width // patch, patch).sum(dim=(2, 4)).flatten(1)
    top = relevance.abs().argmax(dim=1)
    removed = images.clone()
    for b in range(batch):
        row, col = divmod(int(top[b]), width // patch)
        removed[b, :, row * patch : (row + 1) * patch, col * patch : (col + 1) * patch] = 0
    with torch.no_grad():
        logits = model(torch.cat([images, removed]))
    scores = target_scores(logits, targets.repeat(2), "softmax", None if regions is None else regions.repeat(2, 1, 1))
    delta = scores[:batch].double() - scores[batch:].double()
    return relevance.gather(1, top[:, None])[:, 0] * delta < 0


def trapezoid(curves: Tensor) -> Tensor:
    return torch.trapezoid(curves, dx=1 / STEPS, dim=1)


class Counter:
    """Counts the images a module's forward sees."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.images = 0
        module.register_forward_pre_hook(self._count)

    def _count(self, module, args) -> None:
        self.images += args[0].shape[0]


@pytest.mark.parametrize("start", ["rise", "blur"])
def test_shared_starts_and_explain_probabilities_give_todays_aucs_with_fewer_forwards(start):
    module = tiny_module(seed=3).eval()
    explainers = explainers_for(module, ["gradskip", "rollout"], {})
    generator = torch.Generator().manual_seed(0)
    probes = ProbeSet(torch.randn(6, 3, 32, 32, generator=generator), torch.tensor([0, 1, 2, 3, 0, 1]), torch.arange(6))
    settings = ScoreSettings(insertion_steps=STEPS, insertion_start=start, metrics_batch_size=40)
    model = explainers["gradskip"].model
    counter = Counter(model)
    work = EpochWork()
    records = {
        name: explain_probes(explainer, probes, settings, batch_size=4, heads=False, work=work)
        for name, explainer in explainers.items()
    }
    used = counter.images
    for name, record in records.items():
        maps, targets = record.maps, record.targets
        insertion, deletion = dense_curves(model, probes.images, targets, maps, 8, start)
        torch.testing.assert_close(record.insertion.double(), trapezoid(insertion), atol=1e-6, rtol=0)
        torch.testing.assert_close(record.deletion.double(), trapezoid(deletion), atol=1e-6, rtol=0)
        torch.testing.assert_close(record.insertion_start.double(), insertion[:, 0], atol=1e-6, rtol=0)
        assert torch.equal(record.fvt_violation.bool(), dense_violation(model, probes.images, targets, maps, 8)), name
    # per method: one explain forward of the 6 probes, 2 x 6 x 15 inner steps and 6 violation images; per
    # chunk (2 chunks) its starts: 4 + 2 blurred images, one zeros image each, once for both methods
    explain, inner, starts = 2 * 6, 2 * (2 * 6 * (STEPS - 1) + 6), 6 + 2
    assert set(work.starts) == {0, 4}
    assert used == explain + inner + starts
    dense = 2 * (2 * 6 * (STEPS + 1) + 2 * 6)  # what the old path forwarded besides the explain forwards
    assert inner + starts < 0.88 * dense


def test_segformer_clean_scores_from_the_explain_forward_equal_a_plain_forward():
    module = tiny_segmentation_module(seed=1).eval()
    explainers = explainers_for(module, ["gradskip"], {})
    explainer = explainers["gradskip"]
    generator = torch.Generator().manual_seed(1)
    images = torch.randn(3, 3, 64, 64, generator=generator)
    probes = ProbeSet(images, torch.tensor([1, 2, 3]), torch.arange(3))
    settings = ScoreSettings(insertion_steps=STEPS, insertion_start="rise")
    record = explain_probes(explainer, probes, settings, batch_size=3, heads=False)
    exp = explainer.explain(images, torch.tensor([1, 2, 3]))
    patch = explainer.patch_size[0]
    insertion, deletion = dense_curves(explainer.model, images, exp.targets, exp.maps, patch, "rise", exp.region)
    torch.testing.assert_close(record.insertion.double(), trapezoid(insertion), atol=1e-5, rtol=0)
    torch.testing.assert_close(record.deletion.double(), trapezoid(deletion), atol=1e-5, rtol=0)


def test_rise_start_is_todays_blur():
    images = torch.randn(2, 3, 28, 28)
    assert torch.equal(insertion_start_images(images, "rise"), gaussian_blur(images))


def test_a_long_explanation_shows_a_progress_bar_on_a_terminal(monkeypatch):
    """One chunk of probes (the default batch holds every probe) still shows its bar once the delay has
    passed, counting probes; in a file or a pipe there is none."""
    import io

    from gradskip_lightning.engine.scoring import compute

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    module = tiny_module(seed=3).eval()
    explainer = explainers_for(module, ["gradskip"], {})["gradskip"]
    probes = ProbeSet(torch.randn(3, 3, 32, 32), torch.tensor([0, 1, 2]), torch.arange(3))
    settings = ScoreSettings(insertion_steps=4)
    monkeypatch.setattr(compute, "PROGRESS_DELAY_S", 0.0)
    for stream, shown in ((Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr("sys.stderr", stream)
        explain_probes(explainer, probes, settings, batch_size=32, heads=False, progress=True)
        said = stream.getvalue()
        assert ("GradSkip: explaining and scoring (gradskip)" in said and "/3 [" in said) == shown, said
