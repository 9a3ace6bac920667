"""The ``corrected`` variant of the discovery benchmark: the stamped data trained with the callback's discovery
stage and a :class:`~gradskip_lightning.ShortcutCorrection` following it, compared with the stamped model.

Efficacy (:func:`~.report.correction_table`): the spurious score (the stamp pasted on other classes' test
images, share predicted as the stamped class) and the accuracy on the test split without any stamp, of the
stamped and the corrected model of each seed (the same data, initial weights and batch order until the
correction starts).
"""

from __future__ import annotations

import argparse

from lightning.pytorch import Callback

from gradskip_lightning import DiscoveryStage, GradSkipCallback, ProbeSettings, ScoreSettings, ShortcutCorrection
from gradskip_lightning.callbacks.correction_settings import Unlearning

#: Share of every class's training images that get the flagged class's hotspot (``--correction-p``).
CORRECTION_P = 0.25
#: Patches added around the flagged region (``--correction-margin``; the callback's default: the proved region).
CORRECTION_MARGIN = 0


def correction_callbacks(
    probes_per_class: int, p: float, margin: int, erase: bool = True, unlearn: Unlearning = "data"
) -> tuple[list[Callback], ShortcutCorrection]:
    """A GradSkipCallback with the discovery stage at its defaults (``probes_per_class`` discovery probes per
    class; its other scores as cheap as they go) and a ShortcutCorrection following it at ``p``, ``margin``,
    ``erase`` and ``unlearn``; and the latter."""
    correction = ShortcutCorrection(p=p, margin=margin, erase=erase, unlearn=unlearn)
    gradskip = GradSkipCallback(
        probes=ProbeSettings(num_probes=8),
        scores=ScoreSettings(insertion_steps=2, fvt_top_k=0),
        discovery=DiscoveryStage(probes_per_class=probes_per_class),
        progress=False,
    )
    return [gradskip, correction], correction


def add_correction_arguments(parser: argparse.ArgumentParser, when: str = "") -> None:
    """The ``--correction-p`` and ``--correction-paste-only`` options of the subcommands that train corrected
    models; ``when`` starts their help (e.g. ``"with --correction: "``). Paste-only: the correction only pastes
    (``ShortcutCorrection(erase=False)``), the class's own images keep the shortcut."""
    parser.add_argument(
        "--correction-p", type=float, default=CORRECTION_P,
        help=f"{when}share of every class's training images the correction pastes on (default {CORRECTION_P:g})",
    )  # fmt: skip
    parser.add_argument(
        "--correction-paste-only", action="store_true",
        help=f"{when}the correction only pastes (ShortcutCorrection(erase=False)): the class keeps the shortcut",
    )  # fmt: skip


def corrected(correction: ShortcutCorrection) -> str:
    """What ``correction`` corrected, for the records: "class 2 at (12, 12)-(20, 20) from epoch 1; ..." or "none"."""
    parts = [
        f"class {c.artifact.target} {c.artifact.describe().removeprefix('shortcut ')} from epoch {c.epoch}"
        + ("" if c.until is None else f" until epoch {c.until}")
        for c in correction.corrections
    ]
    return "; ".join(parts) or "none"
