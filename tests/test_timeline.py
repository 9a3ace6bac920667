"""The timeline command: probe x epoch PNG from the maps folder the callback writes."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from gradskip_lightning.callback.files import read_maps, write_epoch, write_probes
from gradskip_lightning.timeline import find_maps_dir, main


def _write_run(folder, probes=3, epochs=(0, 2, 4)):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (probes, 64, 64, 3), dtype=np.uint8)
    write_probes(folder, np.arange(probes) * 7, np.arange(probes) % 2, images, ["cat", "dog"])
    for epoch in epochs:
        arrays = {
            "probe_ids": np.arange(probes) * 7,
            "labels": np.arange(probes) % 2,
            "maps": rng.random((probes, 32, 32), dtype=np.float32),
            "insertion": rng.random(probes, dtype=np.float32),
            "deletion": rng.random(probes, dtype=np.float32),
        }
        write_epoch(folder, epoch, 10 * epoch, "gradskip", arrays)


def test_timeline_png_has_a_row_per_probe_and_a_column_per_epoch(tmp_path):
    maps = tmp_path / "run" / "gradskip" / "maps"
    _write_run(maps)
    record = read_maps(maps)
    assert [int(e["epoch"]) for e in record.epochs] == [0, 2, 4] and record.class_names == ["cat", "dog"]
    assert find_maps_dir(tmp_path / "run") == maps  # a log dir above the maps folder works too
    out = main([str(tmp_path / "run"), "-o", str(tmp_path / "timeline.png")])
    width, height = Image.open(out).size
    assert (width, height) == (int(1.5 * 4 * 100), int(1.6 * 3 * 100))  # 1 image + 3 epochs, 3 probes
    two = main([str(maps), "-o", str(tmp_path / "two.png"), "--max-epochs", "2"])
    assert Image.open(two).size[0] == int(1.5 * 3 * 100)  # first and last epoch only


def test_timeline_names_what_is_missing(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no GradSkip maps folders"):
        find_maps_dir(tmp_path / "empty")
    write_probes(tmp_path / "noepochs", np.arange(1), np.zeros(1), np.zeros((1, 4, 4, 3), np.uint8), ["a"])
    with pytest.raises(FileNotFoundError, match="no epoch_"):
        read_maps(tmp_path / "noepochs")


def test_region_curves_under_the_picture_follow_the_mass_on_each_region(tmp_path):
    from gradskip_lightning.timeline import CHART_INCHES, ROW_INCHES, region_curves

    maps = tmp_path / "maps"
    _write_run(maps, probes=2, epochs=(0, 1, 2))
    for epoch, tag_share in ((0, 0.1), (1, 0.5), (2, 0.9)):  # relevance moving from the object to the tag
        with np.load(maps / f"epoch_{epoch:04d}.npz") as saved:
            arrays = {k: saved[k] for k in saved.files if k not in ("epoch", "step", "method")}
        arrays["region_names"] = np.array(["object", "tag"])
        arrays["region_mass"] = np.array([[1 - tag_share, tag_share], [1 - tag_share, np.nan]], np.float32)
        arrays["transplant_mass"] = np.array([np.nan, tag_share], np.float32)
        write_epoch(maps, epoch, 10 * epoch, "gradskip", arrays)
    epochs, curves = region_curves(read_maps(maps))
    assert epochs == [0, 1, 2] and list(curves) == ["object", "tag", "tag (transplanted)"]
    np.testing.assert_allclose(curves["object"], [0.9, 0.5, 0.1], atol=1e-6)
    np.testing.assert_allclose(curves["tag"], [0.1, 0.5, 0.9], atol=1e-6)  # the NaN probe left out
    np.testing.assert_allclose(curves["tag (transplanted)"], [0.1, 0.5, 0.9], atol=1e-6)
    out = main([str(maps), "-o", str(tmp_path / "timeline.png")])
    assert Image.open(out).size == (int(1.5 * 4 * 100), int((ROW_INCHES * 2 + CHART_INCHES) * 100))


def _maps_folder(folder, epochs=(0, 1, 2)):
    write_probes(folder, np.arange(2), np.zeros(2, np.int64), np.zeros((2, 8, 8, 3), np.uint8), ["a"])
    for epoch in epochs:
        arrays = {"probe_ids": np.arange(2), "labels": np.zeros(2), "maps": np.random.rand(2, 8, 8).astype(np.float32)}
        write_epoch(folder, epoch, 10 * epoch, "gradskip", arrays)
    return folder


def test_damaged_epoch_files_are_skipped_and_named(tmp_path):
    folder = _maps_folder(tmp_path / "maps")
    (folder / "epoch_0001.npz").write_bytes((folder / "epoch_0001.npz").read_bytes()[:808])  # killed mid-write
    np.savez_compressed(folder / "epoch_0002.npz", epoch=2, step=20, method="gradskip")  # disk full: no maps
    record = read_maps(folder)
    assert [int(a["epoch"]) for a in record.epochs] == [0]
    assert {path.name: why.split(" ")[0] for path, why in record.skipped} == {
        "epoch_0001.npz": "unreadable",
        "epoch_0002.npz": "incomplete:",
    }
    (folder / "epoch_0000.npz").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="no readable epoch"):
        read_maps(folder)


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path, monkeypatch):
    folder = _maps_folder(tmp_path / "maps", epochs=(0,))
    before = (folder / "epoch_0000.npz").read_bytes()

    def disk_full(file, **arrays):
        file.write(b"PK\x03\x04 partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez_compressed", disk_full)
    with pytest.raises(OSError, match="No space"):
        write_epoch(folder, 0, 0, "gradskip", {"maps": np.zeros((2, 8, 8), np.float32)})
    assert (folder / "epoch_0000.npz").read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["epoch_0000.npz", "probes.npz"]
