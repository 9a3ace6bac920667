"""The discovery stage's global property transplants (:mod:`gradskip_lightning.shortcuts.discovery_properties`):
their scalars, their pictures and their alerts.

Keys, per property p of ``discovery.properties`` and class k: ``discovery/<prefix><p>/<value>/class_<k>`` for
each value of :data:`PROPERTY_VALUES` (``peak_suspicion`` in fit; ``flagged/class_<k>`` 1 or 0), and per property
``discovery/<prefix><p>/max_suspicion``, ``discovery/<prefix><p>/peak_suspicion`` (in fit) and
``discovery/<prefix><p>/flagged`` (how many classes are flagged: adjusted p-value at most ``alpha`` and suspicion
at least ``property_alert_threshold``): their own equivalents of the hotspot's ``max_suspicion``,
``peak_suspicion`` and ``flagged``, which keep meaning the hotspot test alone.
A flagged (class, property) is alerted once per fit and pictured as ``discovery/<prefix><p>/transfer/class_<k>``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from torch import Tensor

from gradskip_lightning import render
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.engine.keys import key
from gradskip_lightning.engine.probes import ProbeSet
from gradskip_lightning.engine.settings import RenderSettings
from gradskip_lightning.shortcuts.discovery_properties import PropertyDiscovery
from gradskip_lightning.shortcuts.image_properties import PROPERTIES, PropertyName

__all__ = ["PROPERTY_VALUES", "property_alert_text", "property_images", "property_scalars"]

#: Per-class value name -> what it is (the README's key table); logged as ``discovery/<prefix><p>/<name>/class_<k>``.
PROPERTY_VALUES: dict[str, str] = {
    "suspicion": "suspicion in [0, 1] that the class is predicted from the property: flip rate minus control flip "
    "rate (docs/discovery.md, *Global properties*); a test stopped on its first recipients' flip rate alone: that "
    "rate, the most it can be; NaN when not tested (a single property of a class whose signature stopped at its "
    "first look)",
    "flip_rate": "share of other classes' probes predicted as the class once given a class probe's statistics",
    "control_flip_rate": "control: the same with the statistics of a probe of a third class (NaN when the test "
    "stopped on its flip rate alone)",
    "peak_suspicion": "in fit: the class's highest suspicion for the property so far in this fit (kept in checkpoints)",
    "p_value": "sign test of the flips against the control's, Holm-adjusted over every (class, property) test "
    "of the epoch; flagged when at most `alpha` with the suspicion at least `property_alert_threshold`",
    "flagged": "1 when the class is flagged for the property (adjusted p-value at most `alpha`, suspicion at least "
    "`property_alert_threshold`), else 0: the class's alarm for it, to monitor or stop on",
    "separability": "AUROC of the property's statistic telling the class's probes from the others'",
}


def property_scalars(
    found: PropertyDiscovery, prefix: str, peaks: dict[PropertyName, Tensor] | None = None
) -> dict[str, float]:
    """The scalars of one epoch's property transplants (module docstring); ``peaks`` (per property (K,), in fit)
    adds the peak suspicions."""
    scalars = {}
    for name, transfers in found.transfers.items():
        for label, transfer in enumerate(transfers):
            values = {
                "suspicion": float(found.suspicion[name][label]),
                **({"peak_suspicion": float(peaks[name][label])} if peaks is not None else {}),
                "flip_rate": transfer.flip_rate,
                "control_flip_rate": transfer.control_flip_rate,
                "p_value": float(found.p_value[name][label]),
                "flagged": float(found.flagged[name][label]),
                "separability": transfer.separability,
            }
            for value, number in values.items():
                scalars[key("discovery", prefix, f"{name}/{value}/class_{label}")] = number
        totals = {"max_suspicion": found.suspicion[name]}
        if peaks is not None:
            totals["peak_suspicion"] = peaks[name]
        for total, per_class in totals.items():
            finite = per_class[~per_class.isnan()]
            scalars[key("discovery", prefix, f"{name}/{total}")] = float(finite.max()) if len(finite) else math.nan
        scalars[key("discovery", prefix, f"{name}/flagged")] = float(found.flagged[name].sum())
    return scalars


def property_images(
    found: PropertyDiscovery,
    probes: ProbeSet,
    class_names: Sequence[str],
    normalisation: Normalisation | None,
    settings: RenderSettings,
    prefix: str,
) -> dict[str, np.ndarray]:
    """``discovery/<prefix><p>/transfer/class_<k>`` for each flagged class and property: a few other classes'
    probes (left, captioned with their class and prediction) and the same after being given class k's
    statistics (right, with the prediction then)."""
    images = {}
    for name, flagged in found.flagged.items():
        for label in flagged.nonzero()[:, 0].tolist():
            examples = found.transfers[name][label].examples
            if examples is None or not len(examples.positions):
                continue
            positions = examples.positions.cpu()
            before = render.to_display(probes.images[positions], normalisation)
            after = render.to_display(examples.images.cpu(), normalisation)
            tiles = []
            for row, position in enumerate(positions.tolist()):
                truth = class_names[int(probes.labels[position])][:9]
                text = f"{truth} pred {class_names[int(examples.before[row])][:10]}"
                tiles.append(render.captioned_tile(before[row], text, settings.display_size))
                given = f"given: pred {class_names[int(examples.after[row])][:12]}"
                tiles.append(render.captioned_tile(after[row], given, settings.display_size))
            images[key("discovery", prefix, f"{name}/transfer/class_{label}")] = render.image_grid(
                np.stack(tiles), ncols=2
            )
    return images


def property_alert_text(
    found: PropertyDiscovery, name: PropertyName, label: int, class_names: Sequence[str], epoch: int
) -> tuple[str, str]:
    """(title, text) of the alert for class ``label`` flagged for property ``name``."""
    transfer, what = found.transfers[name][label], PROPERTIES[name].what
    title = f"GradSkip discovery: class {class_names[label]!r} may use a {name} shortcut"
    text = (
        f"Epoch {epoch}: class {label} ({class_names[label]}) may use a {name} shortcut: giving other classes' "
        f"probes its {what} flips {transfer.flip_rate:.0%} of them to it (control, a third class's "
        f"{what}: {transfer.control_flip_rate:.0%}); suspicion {found.suspicion[name][label].item():.2f} "
        f"(threshold {found.alert_threshold:g}), adjusted p-value {found.p_value[name][label].item():.2g} (alpha "
        f"{found.alpha:g}). The {name} statistic alone separates the class's probes from the "
        f"others' with AUROC {transfer.separability:.2f}: a class that really looks different (a stain, a scanner) "
        "has that too, so check whether its images were made differently from the other classes'."
    )
    carried = found.axis(label) if name == "signature" else None
    if carried is not None:
        axis, share = carried
        reading = "it alone carries the shortcut" if share >= 1 else "the rest needs several properties at once"
        text += (
            f" The axis that carries most of it: {axis} (its transfer alone gives {share:.0%} of the signature's "
            f"excess: {reading})."
        )
    return title, text
