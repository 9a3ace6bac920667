"""The default insertion start has no class evidence left: on planted shapes a colour-square detector's
insertion separates the object map from the random floor, where the paper's mild blur saturates."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from gradskip_lightning.data.planted_shapes import PALETTE, PlantedShapesDataset
from gradskip_lightning.metrics import insertion_deletion

CLASSES = 4


class SquareDetector(nn.Module):
    """Logits (n, 4): for each class colour, the best 8 x 8 window's mean closeness to that colour
    (images normalised with mean = std = 0.5): a filled square scores high, a ring or a blur less."""

    def __init__(self) -> None:
        super().__init__()
        colours = torch.tensor([rgb for _, rgb in PALETTE[:CLASSES]]) * 2 - 1  # normalised
        self.register_buffer("colours", colours)

    def forward(self, images: Tensor) -> Tensor:
        distance = ((images[:, None] - self.colours[None, :, :, None, None]) ** 2).sum(dim=2)  # (n, K, H, W)
        closeness = torch.exp(-10 * distance)
        windows = nn.functional.avg_pool2d(closeness, 8, stride=1)
        return 12 * windows.flatten(2).amax(dim=2)


def test_random_floor_insertion_is_clearly_below_the_object_map_and_the_start_is_near_chance():
    dataset = PlantedShapesDataset(64, seed=3, num_classes=CLASSES, img_size=32, object_size=8)
    images, labels, masks = (torch.stack([torch.as_tensor(item[i]) for item in dataset]) for i in range(3))
    labels = labels.long()
    model = SquareDetector().eval()
    with torch.no_grad():
        accuracy = (model(images).argmax(dim=1) == labels).float().mean()
    assert accuracy > 0.9
    good = masks.float() + 0.01 * torch.rand(masks.shape, generator=torch.Generator().manual_seed(0))
    floor = torch.rand(masks.shape, generator=torch.Generator().manual_seed(1))
    scores = {}
    for start in ("blur", "rise"):
        scores[start] = {
            name: insertion_deletion(model, images, labels, maps, patch_size=4, insertion_start=start)
            for name, maps in (("good", good), ("random", floor))
        }
    new, paper = scores["blur"], scores["rise"]
    assert float(new["good"]["insertion_start"].mean()) < 1.5 / CLASSES  # near chance: the evidence is gone
    gap = new["good"]["insertion"] - new["random"]["insertion"]
    assert float(gap.mean()) > 0.2 and float((gap > 0).float().mean()) > 0.8
    # the paper's mild blur at 32 px keeps the square: its start is almost the clean probability, every map
    # scores the same insertion
    assert float(paper["good"]["insertion_start"].mean()) > 2 * float(new["good"]["insertion_start"].mean())
    assert abs(float((paper["good"]["insertion"] - paper["random"]["insertion"]).mean())) < 0.05
