"""Probe selection: stratified, seeded, read by index, with masks when the dataset has them."""

from __future__ import annotations

import pytest
import torch

from gradskip_lightning.callback.probes import ProbeSet, dataset_labels, load_probes, stratified_indices
from gradskip_lightning.data.planted_shapes import PlantedShapesDataset


def test_stratified_indices_balance_classes_and_are_seeded():
    labels = torch.tensor([0] * 50 + [1] * 30 + [2] * 3)
    picked = stratified_indices(labels, 12, seed=0)
    assert len(picked) == 12 and len(set(picked.tolist())) == 12
    counts = torch.bincount(labels[picked], minlength=3).tolist()
    assert counts == [5, 4, 3]  # class 2 has only 3 images: its turns go to the others
    assert labels[picked].tolist() == sorted(labels[picked].tolist())
    assert torch.equal(picked, stratified_indices(labels, 12, seed=0))
    assert not torch.equal(picked, stratified_indices(labels, 12, seed=1))
    assert len(stratified_indices(labels, 500, seed=0)) == len(labels)
    with pytest.raises(ValueError, match="num_probes"):
        stratified_indices(labels, 0, seed=0)


def test_load_probes_reads_images_labels_and_masks_by_index():
    dataset = PlantedShapesDataset(16, seed=0, num_classes=4, img_size=32)
    ids = stratified_indices(dataset_labels(dataset), 8, seed=0)
    probes = load_probes(dataset, ids)
    assert probes.images.shape == (8, 3, 32, 32) and probes.masks.shape == (8, 32, 32)
    assert torch.equal(probes.labels, dataset.labels[ids])
    image, label, mask = dataset[int(ids[3])]
    assert torch.equal(probes.images[3], image) and torch.equal(probes.masks[3], mask)
    sub = probes.subset(torch.tensor([3, 1]))
    assert sub.ids.tolist() == [int(ids[3]), int(ids[1])]


def test_probe_set_checks_shapes():
    with pytest.raises(ValueError, match=r"\(P, C, H, W\)"):
        ProbeSet(torch.zeros(3, 32, 32), torch.zeros(3), torch.arange(3))
    with pytest.raises(ValueError, match=r"labels and ids must be \(3,\)"):
        ProbeSet(torch.zeros(3, 3, 8, 8), torch.zeros(2), torch.arange(3))
    with pytest.raises(ValueError, match=r"masks must be \(3, 8, 8\)"):
        ProbeSet(torch.zeros(3, 3, 8, 8), torch.zeros(3), torch.arange(3), torch.zeros(3, 4, 4))
