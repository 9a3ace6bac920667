"""What the discovery stage shows (rank zero): the class-mean map grid, a flagged class's strategies, the alert."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from lightning.pytorch.utilities import rank_zero_warn

from gradskip_lightning import render
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.engine.keys import key
from gradskip_lightning.engine.probes import ProbeSet
from gradskip_lightning.engine.settings import RenderSettings
from gradskip_lightning.shortcuts import Discovery
from gradskip_lightning.shortcuts.discovery import ShortcutTest

__all__ = ["discovery_images", "alert_text", "send_alert"]

#: Colour of the hotspot's box in the images.
BOX_RGB = (0, 255, 255)


def _class_images(probes: ProbeSet, normalisation: Normalisation | None, count: int) -> np.ndarray:
    """(K, H, W, 3) uint8: each class's mean display image (black without probes)."""
    pictures = render.to_display(probes.images, normalisation).astype(np.float64)
    labels = probes.labels.numpy()
    means = np.zeros((count, *pictures.shape[1:]))
    for label in range(count):
        if (labels == label).any():
            means[label] = pictures[labels == label].mean(axis=0)
    return np.round(means).astype(np.uint8)


def _tile(
    image: np.ndarray, token_map: np.ndarray, box: Sequence[int] | None, settings: RenderSettings, text: str
) -> np.ndarray:
    """One captioned tile: ``token_map`` (h, w) over ``image`` (H, W, 3), the hotspot ``box`` (patches) outlined."""
    factor = image.shape[0] // token_map.shape[0]
    pixels = np.kron(token_map, np.ones((factor, factor)))
    tile = render.overlay(image[None], pixels[None], alpha=settings.overlay_alpha, cmap=settings.colormap)[0]
    if box is not None and box[2] > box[0]:
        top, left, bottom, right = (v * factor for v in box)
        tile[top:bottom, [left, right - 1]] = BOX_RGB
        tile[[top, bottom - 1], left:right] = BOX_RGB
    return render.captioned_tile(tile, text, settings.display_size)


def discovery_images(
    found: Discovery,
    probes: ProbeSet,
    class_names: Sequence[str],
    normalisation: Normalisation | None,
    settings: RenderSettings,
    prefix: str,
) -> dict[str, np.ndarray]:
    """``discovery/<prefix>class_means``: a grid of every class's mean map (of the method whose maps gave its
    reported test) over its mean image (that test's region outlined, captioned with the suspicion);
    ``discovery/<prefix>strategy_maps/class_<k>`` for each flagged class: its strategies' mean maps (captioned with
    their sizes)."""
    count = len(found.summary.counts)
    means = _class_images(probes, normalisation, count)
    tiles = [
        _tile(means[c], found.summary_of(test).mean_maps[c].numpy(), list(test.box), settings,
              f"{class_names[c][:16]} {found.suspicion[c].item():.2f}")
        for c, test in enumerate(found.reported)
    ]  # fmt: skip
    images = {key("discovery", prefix, "class_means"): render.image_grid(np.stack(tiles))}
    for label in found.flagged.nonzero()[:, 0].tolist():
        strategies = found.summary_of(found.reported[label]).strategies[label]
        tiles = [
            _tile(means[label], strategies.mean_maps[s].numpy(), None, settings, f"strategy {s}: {int(size)} maps")
            for s, size in enumerate(strategies.sizes.tolist())
        ]
        if tiles:
            images[key("discovery", prefix, f"strategy_maps/class_{label}")] = render.image_grid(np.stack(tiles))
    return images


def alert_text(
    found: Discovery, label: int, class_names: Sequence[str], patch_size: tuple[int, int], epoch: int
) -> tuple[str, str]:
    """(title, text) of the alert for flagged class ``label``: the class (and its group), the tested region's box in
    pixels, the suspicion and p-value, the flip rates."""
    test = found.reported[label]
    summary, transplant, group = found.summary_of(test), test.transplant, test.group
    settings = summary.settings
    top, left, bottom, right = test.box
    ph, pw = patch_size
    height, width = summary.mean_maps.shape[1] * ph, summary.mean_maps.shape[2] * pw
    who = f"class {label} ({class_names[label]})"
    if not group.whole:
        who += f", {group.describe()}"
    donors = "the class's" if group.whole else "those probes'"
    title = f"GradSkip discovery: class {class_names[label]!r} may use a shortcut"
    text = (
        f"Epoch {epoch}: {who} may use a shortcut at rows {top * ph}-{bottom * ph}, columns {left * pw}-{right * pw} "
        f"px (of {height} x {width}; {_origin(test)})"
        f": suspicion {found.suspicion[label].item():.2f} (floor {settings.alert_threshold:g}), p = "
        f"{found.p_values[label].item():.2g} (alpha {settings.alpha:g}, adjusted for {found.tests_run} tests). "
        f"Pasting it from {donors} images onto other "
        f"classes' images flips {transplant.flip_rate:.0%} of them to the class (random place "
        f"{transplant.random_flip_rate:.0%}, "
        f"same place from other classes {transplant.other_class_flip_rate:.0%}); its pixels' constancy is "
        f"{transplant.constancy:.2f} (1: the same in every image, like a stamp)."
    )
    return title, text


def send_alert(run: Any | None, title: str, text: str) -> None:
    """``wandb.alert`` through the W&B ``run`` (a ``wandb.Run``), or a console warning without one (rank zero).

    Offline, wandb 0.31 writes the alert into the run file (an ``alert`` record, sent by ``wandb sync``) and
    returns; the warning is printed too then, so that it is seen now.
    """
    offline = True
    if run is not None:
        offline = bool(getattr(run, "offline", True))  # wandb's public Run.offline
        try:
            run.alert(title=title, text=text)
        except Exception as err:  # noqa: BLE001 - an alert must not stop training
            text = f"{text} (W&B alert failed: {type(err).__name__}: {err})"
            offline = True
    if offline:
        rank_zero_warn(f"{title}. {text}")


def _origin(test: ShortcutTest) -> str:
    """Where the tested region came from, in words."""
    if test.group.copied:
        return "the patch whose pixels they share, found in the pixel sample"
    where = "the hotspot grown by its relevant neighbours" if test.grown else "its hotspot"
    return where if test.method is None else f"{where} in the {test.method} maps"
