"""The end-of-fit summary: one short block of what the callback saw over the fit.

:class:`SummarySink` receives every logged epoch like the other sinks and, at the end of fit, prints
(rank zero) the explained method's scores at the first and the last explained epoch that computed them (a
time budget can leave them out of the last; the epoch is then named), the maps' drift
from the first epoch, and the classes the discovery stage flagged, each with the path of its picture
(written under ``<folder>/flagged``). The same block goes into the W&B run's summary
(``<log_prefix>summary``) and into the MLflow run as an artifact (``gradskip/summary.txt``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_info

from gradskip_lightning.engine.keys import key
from gradskip_lightning.engine.output.files import write_png
from gradskip_lightning.engine.output.report import EpochReport, ProbeSheet

__all__ = ["SummarySink", "flagged_pictures"]


def flagged_pictures(report: EpochReport, prefix: str) -> dict[tuple[int, str], Any]:
    """(class, what) -> the picture of each class the report's discovery flagged: its strategy maps
    (``what`` "hotspot") or, for an image-wide property, the property given to other classes' images."""
    head = re.escape(key("discovery", prefix, ""))
    found: dict[tuple[int, str], Any] = {}
    for name, image in report.images.items():
        if match := re.fullmatch(rf"{head}(?:strategy_maps|(?P<what>[^/]+)/transfer)/class_(?P<label>\d+)", name):
            found[(int(match["label"]), match["what"] or "hotspot")] = image
    return found


@dataclass
class SummarySink:
    """Keeps the first and last explained epochs' scores and the flagged classes; says them at the end.

    Attributes:
        folder: the callback's output folder (the flagged pictures go to ``folder/flagged``).
        prefix: the callback's ``log_prefix``.
        wandb_run: the W&B run whose summary gets the block, or None.
        mlflow: (an ``MlflowClient``, run id, artifact path) of the MLflow run that gets the block as a
            text file, or None.
    """

    folder: Path
    prefix: str
    wandb_run: Any | None = None
    mlflow: tuple[Any, str, str] | None = None
    first: EpochReport | None = field(default=None, init=False)
    last: EpochReport | None = field(default=None, init=False)
    regions: list[str] = field(default_factory=list, init=False)
    class_names: list[str] = field(default_factory=list, init=False)
    flagged: dict[tuple[int, str], tuple[int, Path]] = field(default_factory=dict, init=False)
    latest: dict[str, tuple[int, float]] = field(default_factory=dict, init=False)
    discovered: int | None = field(default=None, init=False)  # the last epoch the discovery stage logged

    def log(self, report: EpochReport, sheet: ProbeSheet) -> None:
        if key(None, self.prefix, "epoch") not in report.scalars:  # validate()'s keys: <prefix>validate/...
            return
        self.first = self.first or report
        self.last = report
        for name, value in report.scalars.items():  # each value's last epoch: a budget thins the scores
            if value == value:  # not NaN
                self.latest[name] = (report.epoch, value)
        if any(name.startswith(key("discovery", self.prefix, "")) for name in report.scalars):
            self.discovered = report.epoch
        self.regions, self.class_names = list(sheet.regions), list(sheet.class_names)
        for (label, what), image in flagged_pictures(report, self.prefix).items():
            path = write_png(self.folder / "flagged" / f"class_{label}_{what}_epoch_{report.epoch:04d}.png", image)
            first_epoch = self.flagged.get((label, what), (report.epoch, path))[0]
            self.flagged[(label, what)] = (first_epoch, path)

    def text(self) -> str:
        """The block (empty before any explained epoch)."""
        if self.first is None or self.last is None:
            return ""
        first, last = self.first, self.last
        names = [("insertion", key("faithfulness", self.prefix, "insertion")),
                 ("deletion", key("faithfulness", self.prefix, "deletion"))]  # fmt: skip
        names += [(f"mass on {r}", key("regions", self.prefix, f"mass/{r}")) for r in self.regions]
        lines = [f"GradSkip summary ({last.method}), epoch {first.epoch} -> {last.epoch}:"]
        for title, name in names:
            if name in first.scalars or name in last.scalars:
                before = first.scalars.get(name, float("nan"))
                epoch, after = self.latest.get(name, (last.epoch, float("nan")))
                when = "" if epoch == last.epoch else f" (epoch {epoch}: not computed since)"
                lines.append(f"  {title:<12} {before:.3f} -> {after:.3f}{when}")
        drift = last.scalars.get(key("drift", self.prefix, "first/spearman"))
        if drift is not None and last is not first:
            lines.append(f"  drift        Spearman {drift:.3f} of the maps, epoch {first.epoch} against {last.epoch}")
        if self.flagged:
            lines.append("  flagged classes (discovery):")
            for (label, what), (epoch, path) in sorted(self.flagged.items()):
                called = self.class_names[label] if label < len(self.class_names) else str(label)
                lines.append(f"    class {label} ({called}), {what}, from epoch {epoch}: {path}")
        elif self.discovered is not None:
            since = "" if self.discovered == last.epoch else f" (the stage last ran after epoch {self.discovered})"
            lines.append(f"  flagged classes (discovery): none{since}")
        return "\n".join(lines)

    def finish(self) -> None:
        """Print the block; put it into the W&B run's summary and the MLflow run."""
        text = self.text()
        if not text:
            return
        rank_zero_info(text)
        if self.wandb_run is not None:
            self.wandb_run.summary[key(None, self.prefix, "summary")] = text
        if self.mlflow is not None:
            client, run_id, path = self.mlflow
            client.log_text(run_id, text + "\n", path)
