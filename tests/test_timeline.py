"""The timeline command: probe x epoch PNG from the maps folder the callback writes."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from gradskip_lightning import render
from gradskip_lightning.engine.output.files import read_maps, write_epoch, write_probes
from gradskip_lightning.timeline import CHART_INCHES, HEADER_INCHES, ROW_INCHES, find_maps_dir, main, timeline_figure

LONG_NAME = "immature granulocytes(myelocytes, metamyelocytes and promyelocytes)"  # BloodMNIST's class 3


def _write_run(folder, probes=3, epochs=(0, 2, 4), names=("cat", "dog"), side=64):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (probes, side, side, 3), dtype=np.uint8)
    write_probes(folder, np.arange(probes) * 7, np.arange(probes) % 2, images, list(names))
    for epoch in epochs:
        arrays = {
            "probe_ids": np.arange(probes) * 7,
            "labels": np.arange(probes) % 2,
            "maps": rng.random((probes, side // 2, side // 2), dtype=np.float32),
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
    assert (width, height) == (
        int(1.5 * 4 * 100),
        int((HEADER_INCHES + ROW_INCHES * 3) * 100),
    )  # 1 + 3 epochs, 3 probes
    two = main([str(maps), "-o", str(tmp_path / "two.png"), "--max-epochs", "2"])
    assert Image.open(two).size[0] == int(1.5 * 3 * 100)  # first and last epoch only


def _drawn_texts(figure):
    """Every non-empty text the figure draws: titles, axis labels, tick labels, texts, of every axes
    and inset (the colour bar)."""

    def of(axes):
        yield from (axes.title, axes._left_title, axes._right_title, *axes.texts)
        if axes.axison:  # axis labels and tick labels (of the ticks in view) are drawn only then
            yield from (axes.xaxis.label, axes.yaxis.label)
            for axis, (low, high) in ((axes.xaxis, axes.get_xlim()), (axes.yaxis, axes.get_ylim())):
                yield from (t.label1 for t in axis.get_major_ticks() if min(low, high) <= t.get_loc() <= max(low, high))
        for child in axes.child_axes:
            yield from of(child)

    every = [t for axes in figure.axes for t in of(axes)] + list(figure.texts)
    return [t for t in dict.fromkeys(every) if t.get_visible() and t.get_text().strip()]


def test_a_long_class_name_stays_in_its_cell_and_the_header_names_the_method_and_the_colour_scale(tmp_path, capsys):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    maps = tmp_path / "maps"
    _write_run(maps, probes=8, names=(LONG_NAME, "basophil"))
    record = read_maps(maps)
    figure = timeline_figure(record, max_probes=3)
    FigureCanvasAgg(figure).draw()
    page = figure.bbox
    texts = {t: t.get_window_extent() for t in _drawn_texts(figure)}
    outside = [t.get_text() for t, box in texts.items() if box.x0 < page.x0 or box.x1 > page.x1 or box.y0 < page.y0]
    assert not outside and all(box.y1 <= page.y1 for box in texts.values()), f"outside the figure: {outside}"
    ids = [t for t in texts if t.get_text().startswith("#")]
    assert sorted(t.get_text() for t in ids) == ["#0", "#28", "#49"]  # probes 0, 4, 7 of 8, every row labelled
    long_titles = [t for t in texts if t.get_text().startswith("immature")]
    assert len(long_titles) == 2  # probes #0 and #28 are class 0, #49 class 1
    for title in long_titles:
        assert title.get_text() != LONG_NAME and "granulocytes" in title.get_text() and "\n" in title.get_text()
        cell = title.axes.get_window_extent()  # the image under it, after the layout
        assert cell.x0 - 0.5 <= texts[title].x0 and texts[title].x1 <= cell.x1 + 0.5, "wider than its image"
        overlapping = [t.get_text() for t in texts if t is not title and texts[title].overlaps(texts[t])]
        assert not overlapping, f"{title.get_text()!r} overlaps {overlapping}"  # the probe ids, the first epoch's title
    assert [t.get_text() for t in texts if t.get_text().startswith("method")] == ["method: gradskip"]
    (scale,) = [t for t in texts if t.get_text().startswith("relevance")]
    assert "each map scaled to its own range" in scale.get_text()
    (bar,) = [a.get_window_extent() for a in figure.axes if a.xaxis.label is scale]
    # the colour bar: inferno from 0 (left) to 1 (right)
    pixels = np.asarray(figure.canvas.buffer_rgba())[:, :, :3].astype(int)
    row = int(page.height - (bar.y0 + bar.y1) / 2)
    ends = pixels[row, [int(bar.x0) + 2, int(bar.x1) - 3]]
    expected = render.apply_colormap(np.array([0.0, 1.0]), "inferno").astype(int)
    assert np.abs(ends - expected).max() < 20, (ends, expected)
    main([str(maps), "-o", str(tmp_path / "six.png"), "--max-probes", "6"])
    assert "(6 of 8 probes, 3 of 3 epochs)" in capsys.readouterr().out
    assert Image.open(tmp_path / "six.png").size[1] > int((HEADER_INCHES + ROW_INCHES * 6) * 100)  # 3-line titles


def test_timeline_names_what_is_missing(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no GradSkip maps folders"):
        find_maps_dir(tmp_path / "empty")
    write_probes(tmp_path / "noepochs", np.arange(1), np.zeros(1), np.zeros((1, 4, 4, 3), np.uint8), ["a"])
    with pytest.raises(FileNotFoundError, match="no epoch_"):
        read_maps(tmp_path / "noepochs")


def test_region_curves_under_the_picture_follow_the_mass_on_each_region(tmp_path):
    from gradskip_lightning.timeline import region_curves

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
    assert Image.open(out).size == (int(1.5 * 4 * 100), int((HEADER_INCHES + ROW_INCHES * 2 + CHART_INCHES) * 100))


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


def test_an_epoch_file_of_the_wrong_shape_is_skipped_and_named_and_the_others_drawn(tmp_path, capsys):
    folder = _maps_folder(tmp_path / "maps")
    wrong = {"probe_ids": np.arange(2), "labels": np.zeros(2), "maps": np.random.rand(2, 5, 32).astype(np.float32)}
    write_epoch(folder, 1, 10, "gradskip", wrong)  # another run's maps copied in: not (2, 8 / f, 8 / f)
    few = {"probe_ids": np.arange(1), "labels": np.zeros(1), "maps": np.random.rand(1, 4, 4).astype(np.float32)}
    write_epoch(folder, 2, 20, "gradskip", few)  # another probe set's
    out = main([str(folder), "-o", str(tmp_path / "timeline.png")])
    captured = capsys.readouterr()
    assert out.exists() and f"wrote {out} (2 of 2 probes, 1 of 1 epochs)" in captured.out  # epoch 0 drawn
    err = captured.err
    assert (
        f"skipped {folder / 'epoch_0001.npz'}: wrong shape: maps (2, 5, 32) and 2 probe ids do not fit the probes' "
        "images (2, 8, 8) (maps (P, H / f, W / f) for an integer f)"
    ) in err
    assert f"skipped {folder / 'epoch_0002.npz'}: wrong shape: maps (1, 4, 4) and 1 probe ids" in err


@pytest.mark.parametrize("option, value", [("--max-epochs", "0"), ("--max-probes", "-1"), ("--max-epochs", "two")])
def test_counts_below_one_are_refused_by_argparse_naming_the_option(tmp_path, capsys, option, value):
    folder = _maps_folder(tmp_path / "maps")
    with pytest.raises(SystemExit) as exit_info:
        main([str(folder), "-o", str(tmp_path / "timeline.png"), option, value])
    assert exit_info.value.code == 2 and not (tmp_path / "timeline.png").exists()
    assert f"error: argument {option}: must be an integer >= 1, got " in capsys.readouterr().err


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


def test_epochs_the_budget_left_unscored_are_drawn_and_named(tmp_path, capsys):
    """A run whose time budget computed the scores at epochs 0 and 5 only: every epoch is a column,
    the scored ones show their scores, the others their epoch alone, and the command says which."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    maps = tmp_path / "maps"
    _write_run(maps, probes=2, epochs=range(8))
    for epoch in (1, 2, 3, 4, 6, 7):  # what the budget's files hold: no insertion or deletion
        with np.load(maps / f"epoch_{epoch:04d}.npz") as saved:
            arrays = {k: saved[k] for k in saved.files if k not in ("epoch", "step", "method", "insertion", "deletion")}
        write_epoch(maps, epoch, 10 * epoch, "gradskip", arrays)
    record = read_maps(maps)
    figure = timeline_figure(record)
    FigureCanvasAgg(figure).draw()
    titles = [t.get_text() for t in _drawn_texts(figure) if t.get_text().startswith("e")]
    assert sorted(titles) == sorted(
        [f"e{e}" for e in (1, 2, 3, 4, 6, 7) for _ in range(2)]
        + [f"e{e} ins {float(record.epochs[e]['insertion'][p]):.2f} del {float(record.epochs[e]['deletion'][p]):.2f}"
           for e in (0, 5) for p in range(2)]
    )  # fmt: skip
    (scale,) = [t.get_text() for t in _drawn_texts(figure) if t.get_text().startswith("relevance")]
    assert "no insertion/deletion scores at epoch 1-4, 6-7" in scale
    main([str(maps), "-o", str(tmp_path / "thinned.png")])
    said = capsys.readouterr().out
    assert (
        "epochs without insertion/deletion scores (not computed there, e.g. thinned by the time budget): 1-4, 6-7"
        in said
    )


@pytest.mark.parametrize(("probes", "epochs"), [(8, 1), (8, 2), (64, 1), (64, 30)])
def test_the_layout_reads_well_at_few_and_many_epochs_and_probes(tmp_path, probes, epochs):
    """Drawn without a layout warning, about as tall as wide (few epochs: the probes in bands side by
    side; 32 probes of 12 epochs: one band, taller than wide), every text inside the figure and clear of
    the others, the chart's axis on whole epochs."""
    import warnings

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    maps = tmp_path / "maps"
    _write_run(maps, probes=probes, epochs=range(epochs), names=("cat", LONG_NAME), side=16)
    with np.load(maps / "epoch_0000.npz") as saved:  # a region, for the chart under the picture
        arrays = {k: saved[k] for k in saved.files if k not in ("epoch", "step", "method")}
    arrays.update(region_names=np.array(["object"]), region_mass=np.full((probes, 1), 0.4, np.float32))
    write_epoch(maps, 0, 0, "gradskip", arrays)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # constrained_layout's "axes sizes collapsed" among them
        figure = timeline_figure(read_maps(maps))
        FigureCanvasAgg(figure).draw()
    width, height = figure.get_size_inches()
    assert 1 / 2 <= height / width <= 3.5 and width <= 30, (width, height)
    page = figure.bbox
    texts = {t: t.get_window_extent() for t in _drawn_texts(figure)}
    outside = [t.get_text() for t, b in texts.items() if b.x0 < 0 or b.x1 > page.x1 or b.y0 < 0 or b.y1 > page.y1]
    assert not outside, outside
    boxes = list(texts.items())
    overlapping = [(a.get_text(), b.get_text()) for i, (a, box) in enumerate(boxes) for b, other in boxes[i + 1 :]
                   if box.overlaps(other)]  # fmt: skip
    assert not overlapping, overlapping[:3]
    images = [a for a in figure.axes if a.images]
    assert len(images) == min(probes, 32) * (min(epochs, 12) + 1)
    assert min(a.get_window_extent().height for a in images) >= 100  # 1 in at 100 dpi: the cells keep their size
    (chart,) = [a for a in figure.axes if a.lines]
    low, high = chart.get_xlim()
    assert low == -0.5 and high == epochs - 0.5
    assert all(float(t).is_integer() for t in chart.get_xticks() if low <= t <= high)
