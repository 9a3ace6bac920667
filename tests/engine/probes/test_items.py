"""Probes from mapping dataset items (MONAI, HF datasets) whose keys are named in ProbeSettings:
image_key, label_key, mask_keys; every other field is never read."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

from gradskip_lightning import ProbeSettings
from gradskip_lightning.data.planted_shapes import PlantedShapesDataset
from gradskip_lightning.engine.probes import ProbeSource, dataset_labels, load_probes

SHAPES = PlantedShapesDataset(24, seed=0, num_classes=4, img_size=32)


class Records(Dataset):
    """Planted shapes as dict records with custom keys, metadata and an extra (H, W) 0/1 tensor
    that is not a region; no ``labels`` attribute, so labels are read item by item."""

    def __init__(self, drop: str | None = None) -> None:
        self.drop = drop

    def __len__(self) -> int:
        return len(SHAPES)

    def __getitem__(self, index: int) -> dict[str, Any]:
        image, label, mask = SHAPES[index]
        item = {
            "img": image,
            "target": label,
            "seg": mask,
            "mask": ~mask,  # a common name, named in none of the keys below
            "brain": torch.ones(32, 32, dtype=torch.bool),
            "patient_id": 3,
            "path": "a.png",
        }
        item.pop(self.drop, None)
        return item


def _draw(num_probes: int = 8, **keys: Any):
    return ProbeSource(None, num_probes, seed=0, keys=ProbeSettings(**keys).item_keys).draw(Records())


def test_named_keys_read_the_image_label_and_masks_and_nothing_else():
    probes = _draw(image_key="img", label_key="target", mask_keys=["seg"])
    ids = probes.ids.tolist()
    assert len(ids) == 8 and torch.bincount(probes.labels, minlength=4).tolist() == [2, 2, 2, 2]
    assert torch.equal(probes.labels, SHAPES.labels[ids])  # read item by item through label_key
    assert torch.equal(probes.images, torch.stack([SHAPES[i][0] for i in ids]))
    assert list(probes.regions) == ["seg"]  # not "mask", "brain", the id or the path
    assert torch.equal(probes.regions["seg"], torch.stack([SHAPES[i][2] for i in ids]))
    assert probes.masks is None  # no "object" region: no Pointing Game


def test_a_mask_key_renamed_to_object_feeds_the_pointing_game():
    probes = _draw(image_key="img", label_key="target", mask_keys={"seg": "object", "brain": "brain"})
    assert sorted(probes.regions) == ["brain", "object"]
    assert torch.equal(probes.masks, torch.stack([SHAPES[i][2] for i in probes.ids.tolist()]))
    assert bool(probes.regions["brain"].all())


def test_default_keys_read_common_names_only_and_no_mask_keys_read_no_region():
    items = [{"image": SHAPES[i][0], "label": SHAPES[i][1], "mask": SHAPES[i][2], "seg": ~SHAPES[i][2]} for i in (0, 1)]
    default = load_probes(items, [0, 1])
    assert list(default.regions) == ["object"]  # "mask" is a common name: the object region
    assert torch.equal(default.masks, torch.stack([SHAPES[0][2], SHAPES[1][2]]))
    assert load_probes(items, [0, 1], keys=ProbeSettings(mask_keys=[]).item_keys).regions is None
    named = load_probes(items, [0, 1], keys=ProbeSettings(mask_keys=["seg"]).item_keys)
    assert list(named.regions) == ["seg"]  # a named mask key replaces the common names
    extra = [{"image": SHAPES[0][0], "label": 1, "weights": torch.ones(32, 32), "id": 7}]
    assert load_probes(extra, [0]).regions is None  # a 0/1 tensor under another name is not a region
    records = _draw()  # "img", "target" and "mask" are common names: "seg" and "brain" are not read
    assert list(records.regions) == ["object"]
    assert torch.equal(records.masks, torch.stack([~SHAPES[i][2] for i in records.ids.tolist()]))


def test_a_named_key_the_items_lack_is_refused_naming_it_the_item_keys_and_the_option():
    with pytest.raises(ValueError, match=r"dataset item \d+ has no key 'seg' \(probes.mask_keys\); its keys are "):
        ProbeSource(None, 4, seed=0, keys=ProbeSettings(mask_keys=["seg"]).item_keys).draw(Records(drop="seg"))
    with pytest.raises(ValueError, match=r"no key 'x' \(probes.image_key\).*'brain', 'img', 'mask'.*image_key=\.\.\."):
        _draw(image_key="x", label_key="target")
    with pytest.raises(ValueError, match=r"no key 'y' \(probes.label_key\)"):
        dataset_labels(Records(), ProbeSettings(image_key="img", label_key="y").item_keys)
    with pytest.raises(TypeError, match=r"label from one of .*the item has \['finding', 'scan'\].*label_key=\.\.\."):
        load_probes([{"scan": SHAPES[0][0], "finding": 1}], [0])  # no common name: name the keys
    with pytest.raises(TypeError, match=r"name the fields of mapping items, but dataset item 0 is a tuple"):
        load_probes(SHAPES, [0], keys=ProbeSettings(image_key="img").item_keys)


@pytest.mark.parametrize(
    "keys, error, match",
    [
        (dict(image_key=""), ValueError, "image_key must be a non-empty key"),
        (dict(label_key=3), TypeError, "label_key must name a key .* as a string; got 3"),
        (dict(mask_keys="seg"), TypeError, r"mask_keys must be a list of keys .* mask_keys=\[key\]"),
        (dict(mask_keys=["seg", "seg"]), ValueError, r"mask_keys names a key twice: \['seg', 'seg'\]"),
        (dict(mask_keys=["a/b"]), ValueError, "region name 'a/b' cannot be part of a logged key"),
        (dict(mask_keys={"seg": "object", "roi": "object"}), ValueError, "two keys the same region name"),
        (dict(mask_keys=[None]), TypeError, "mask_keys must name a key"),
    ],
)
def test_probe_settings_refuse_bad_keys(keys, error, match):
    with pytest.raises(error, match=match):
        ProbeSettings(**keys)


def test_yaml_spells_the_keys_and_the_backbone_as_lightningcli_parses_them():
    from jsonargparse import ArgumentParser

    from gradskip_lightning import GradSkipCallback

    parser = ArgumentParser()
    parser.add_class_arguments(GradSkipCallback, "callback")
    yaml = "callback: {backbone: student, probes: {image_key: img, label_key: target, mask_keys: {seg: object}}}"
    callback = parser.instantiate(parser.parse_string(yaml)).callback
    assert callback.backbone == "student"
    assert callback.probes.item_keys.regions == {"seg": "object"} and callback.monitor.source.keys.image == "img"
    listed = parser.instantiate(parser.parse_string("callback: {probes: {mask_keys: [seg, roi]}}")).callback
    assert listed.probes.item_keys.regions == {"seg": "seg", "roi": "roi"}


class Raw(Records):
    """Records as a loader would leave them: one field overridden (a path for the image, a class name, None)."""

    def __init__(self, **fields: Any) -> None:
        super().__init__()
        self.fields = fields

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {**super().__getitem__(index), **self.fields}


@pytest.mark.parametrize(
    "fields, keys, match",
    [
        (
            dict(target="monocyte"),
            dict(label_key="target"),
            r"item 0's label \(probes.label_key='target'\) is the string 'monocyte': labels must be class .*label2id",
        ),
        (
            dict(img="scans/0.png"),
            dict(image_key="img", label_key="target"),
            r"item 0's image \(probes.image_key='img'\) is the path 'scans/0.png'.*Load it in the dataset's transform",
        ),
        (
            dict(target=None),
            dict(image_key="img", label_key="target"),
            r"item 0's label \(probes.label_key='target'\) is None: every probe needs a class",
        ),
        (dict(image=[[0.0]], label=1), {}, r"item 0's image \(key 'image'\) is a list: probes need a float tensor"),
    ],
    ids=["string label", "image path", "None label under a named key", "a list for an image"],
)
def test_a_field_that_cannot_be_a_probes_names_the_item_the_key_and_the_fix(fields, keys, match):
    data = Raw(**fields)
    with pytest.raises(TypeError, match=match) as refused:
        ProbeSource(None, 4, seed=0, keys=ProbeSettings(**keys).item_keys).draw(data)
    assert "new(): invalid data type" not in str(refused.value)
    if keys:  # the user named the keys already: no hint to name them
        assert "Name its keys" not in str(refused.value)


def test_tuple_items_are_checked_by_position():
    class Paths(Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, index: int) -> tuple:
            return ("scan.png", index % 2)

    with pytest.raises(TypeError, match=r"item 0's image \(its first element\) is the path 'scan.png'"):
        ProbeSource(None, 2, seed=0).draw(Paths())
