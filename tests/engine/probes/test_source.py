"""Probe selection: stratified, seeded, read by index, with masks when the dataset has them."""

from __future__ import annotations

import pytest
import torch

from gradskip_lightning.data.planted_shapes import PlantedShapesDataset
from gradskip_lightning.engine.probes import ProbeSet, dataset_labels, load_probes, stratified_indices


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


class _CountingReads(torch.utils.data.Dataset):
    """A torchvision-style dataset: ``targets`` list, no ``labels``; counts item reads."""

    def __init__(self, size: int = 200) -> None:
        self.inner = PlantedShapesDataset(size, seed=0, num_classes=4, img_size=32)
        self.targets = self.inner.labels.tolist()
        self.reads = 0

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index):
        self.reads += 1
        return self.inner[index][:2]


def test_drawing_reads_targets_and_subset_indices_not_the_images():
    from gradskip_lightning.engine.probes import ProbeSource

    dataset = _CountingReads()
    subset = torch.utils.data.Subset(dataset, list(range(50, 150)))
    assert torch.equal(dataset_labels(subset), dataset.inner.labels[50:150])
    probes = ProbeSource(None, 4, seed=0).draw(subset)
    assert dataset.reads == 4  # only the probes themselves
    assert torch.equal(probes.labels, dataset.inner.labels[50:150][probes.ids])


def test_items_must_be_tuples_of_float_images():
    dataset = PlantedShapesDataset(4, seed=0, num_classes=4, img_size=32)

    class Uint8(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, index):
            return (dataset[index][0] * 50 + 100).to(torch.uint8), dataset[index][1]

    with pytest.raises(TypeError, match=r"dataset item 0 has a torch.uint8 image: probes must be float"):
        load_probes(Uint8(), [0])
    with pytest.raises(TypeError, match=r"label from one of \('label'.*the item has \['image', 'path'\]"):
        load_probes([{"image": dataset[0][0], "path": "a.dcm"}], [0])
    with pytest.raises(TypeError, match="got a str"):
        load_probes(["patient_003.dcm"], [0])
    probes = load_probes([{"pixel_values": dataset[0][0], "labels": dataset[0][1], "id": 7}], [0])
    assert probes.regions is None and probes.labels.tolist() == [int(dataset[0][1])]


def test_named_regions_are_carried_and_object_feeds_the_pointing_game():
    dataset = PlantedShapesDataset(6, seed=0, num_classes=4, img_size=32)
    items = [(image, label, {"object": mask, "tag": ~mask}) for image, label, mask in (dataset[i] for i in range(6))]
    probes = load_probes(items, [4, 1, 2])
    assert sorted(probes.regions) == ["object", "tag"]
    assert torch.equal(probes.masks, torch.stack([items[i][2]["object"] for i in (4, 1, 2)]))
    sub = probes.subset(torch.tensor([2]))
    assert torch.equal(sub.regions["tag"][0], items[2][2]["tag"]) and sub.ids.tolist() == [2]
    bare = load_probes(dataset, [0])  # a mask alone is the object region
    assert list(bare.regions) == ["object"]


def test_multi_hot_labels_explain_their_rarest_positive_label_and_stratify_by_it():
    from gradskip_lightning.engine.probes import ProbeSource, explained_labels

    multi_hot = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 0, 1], [0, 0, 0], [1, 1, 0], [1, 0, 0]], dtype=torch.float)
    frequency = multi_hot.sum(dim=0)  # [5, 2, 1]
    assert explained_labels(multi_hot, frequency).tolist() == [1, 0, 2, -1, 1, 0]
    picked = stratified_indices(multi_hot, 3, seed=0)
    assert sorted(explained_labels(multi_hot, frequency)[picked].tolist()) == [0, 1, 2]  # one per class
    assert 3 not in picked.tolist()  # nothing to explain

    class MultiLabel(torch.utils.data.Dataset):
        labels = multi_hot

        def __len__(self):
            return len(multi_hot)

        def __getitem__(self, index):
            return torch.zeros(3, 8, 8), multi_hot[index]

    probes = ProbeSource(None, 3, seed=0).draw(MultiLabel())
    assert probes.multi_hot.shape == (3, 3) and sorted(probes.labels.tolist()) == [0, 1, 2]
    assert torch.equal(probes.multi_hot, multi_hot[probes.ids])


class _LabelMaps(torch.utils.data.Dataset):
    """Three 8 px images: classes {1, 2}, {2} and background only (class 0 everywhere)."""

    def __init__(self, with_labels: bool = True):
        self.maps = torch.zeros(3, 8, 8, dtype=torch.long)
        self.maps[0, :4] = 1
        self.maps[0, 6:, 6:] = 2
        self.maps[1, 2:5, 2:5] = 2
        if with_labels:  # the classes to explain, without the background
            self.labels = torch.tensor([[0, 1, 1], [0, 0, 1], [0, 0, 0]])

    def __len__(self):
        return 3

    def __getitem__(self, index):
        return torch.full((3, 8, 8), float(index)), self.maps[index]


def test_segmentation_items_give_one_probe_per_image_and_class_present():
    from gradskip_lightning.engine.probes import ProbeSource

    dataset = _LabelMaps()
    probes = ProbeSource(None, num_probes=10, seed=0).draw(dataset)
    assert probes.ids.tolist() == [1, 2, 5]  # index * 3 + class: (0, 1), (0, 2), (1, 2), by class
    assert probes.labels.tolist() == [1, 2, 2] and probes.images[:, 0, 0, 0].tolist() == [0.0, 0.0, 1.0]
    assert torch.equal(probes.masks, torch.stack([dataset.maps[0] == 1, dataset.maps[0] == 2, dataset.maps[1] == 2]))
    restored = ProbeSource(None, num_probes=10, seed=0)
    restored.restore(torch.tensor([5, 1]))  # a checkpoint's ids read back the same (image, class) pairs
    again = restored.draw(dataset)
    assert again.labels.tolist() == [2, 1] and torch.equal(again.masks[0], dataset.maps[1] == 2)
    one_per_class = ProbeSource(None, num_probes=2, seed=0).draw(dataset)
    assert sorted(one_per_class.labels.tolist()) == [1, 2]  # stratified by class


def test_segmentation_items_without_labels_explain_every_class_in_their_maps():
    from gradskip_lightning.engine.probes import ProbeSource

    probes = ProbeSource(None, num_probes=10, seed=0).draw(_LabelMaps(with_labels=False))
    assert probes.ids.tolist() == [0, 3, 6, 1, 2, 5]  # the background (class 0) of every image too
    assert probes.labels.tolist() == [0, 0, 0, 1, 2, 2]
