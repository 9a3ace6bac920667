"""Where one logged epoch goes: W&B, TensorBoard, MLflow, any other scalar logger, image files, the maps files.

The sinks write through small logger interfaces (:class:`MetricsLogger`, :class:`WandbRunLogger`,
:class:`WriterLogger`, :class:`MlflowRunLogger`) that Lightning's loggers have as they are
(:mod:`gradskip_lightning.callbacks.sinks`); a ``transformers.Trainer``'s outputs get them from
:mod:`gradskip_lightning.hf_trainer.loggers`.
:func:`ordered_sinks` puts the sinks in their order for either front door.

All sinks are called on rank zero only, each on its own (:func:`log_to_sinks` warns about a
failing one and calls the next; :func:`finish_sinks` likewise at the end of fit, where a failed
upload of the maps folder names the store and the local folder that keeps the files). Each
receives the same :class:`~.report.EpochReport`, built once by :func:`~.report.epoch_report`:
uint8 images (made in :mod:`gradskip_lightning.render`), plain floats. The sinks that send
scalars run last and take them from :meth:`~.report.EpochReport.timed_scalars`, so the callback's
``time_s`` covers the files and images written before.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from gradskip_lightning.engine.keys import key
from gradskip_lightning.engine.output.files import write_epoch, write_png, write_probes
from gradskip_lightning.engine.output.report import EpochReport, ProbeSheet
from gradskip_lightning.engine.output.summary import SummarySink
from gradskip_lightning.render import annotate, histogram_image, titled

if TYPE_CHECKING:
    import wandb
    from torch.utils.tensorboard import SummaryWriter

__all__ = [
    "MetricsLogger",
    "WandbRunLogger",
    "WriterLogger",
    "MlflowRunLogger",
    "Sink",
    "WandbSink",
    "ScalarSink",
    "ImageFileSink",
    "TensorBoardSink",
    "MLflowSink",
    "MapsFileSink",
    "UploadError",
    "finish_sinks",
    "image_title",
    "log_to_sinks",
    "ordered_sinks",
]


class MetricsLogger(Protocol):
    """Takes a row of scalars at a step (Lightning's ``Logger`` has this interface)."""

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...

    def save(self) -> None: ...


class WandbRunLogger(Protocol):
    """Logs a row at a step into a W&B run, its ``experiment`` (Lightning's ``WandbLogger``)."""

    @property
    def experiment(self) -> Any: ...  # a wandb.Run

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None: ...


class WriterLogger(Protocol):
    """Holds a TensorBoard ``SummaryWriter``, its ``experiment`` (Lightning's ``TensorBoardLogger``)."""

    @property
    def experiment(self) -> SummaryWriter: ...


class MlflowRunLogger(Protocol):
    """Holds an MLflow client, its ``experiment``, and the ``run_id`` it logs to (Lightning's ``MLFlowLogger``)."""

    @property
    def experiment(self) -> Any: ...  # an mlflow.MlflowClient

    @property
    def run_id(self) -> str | None: ...


class Sink(Protocol):
    """Receives each logged epoch (rank zero) and is finished at the end of fit."""

    def log(self, report: EpochReport, sheet: ProbeSheet) -> None: ...

    def finish(self) -> None: ...


class UploadError(RuntimeError):
    """The maps folder could not be uploaded to a store at the end of fit; its files stay in the local folder."""

    def __init__(self, folder: Path, store: str, cause: BaseException) -> None:
        super().__init__(
            f"the maps folder was not uploaded to {store} ({type(cause).__name__}: {cause}); its files are kept in "
            f"{folder}"
        )


def histogram_bins(values: np.ndarray) -> int:
    """Bins of a logged histogram of ``values``: 64, fewer for fewer values (W&B allows at most 512)."""
    return min(64, max(1, values.size))


class WandbSink:
    """Logs a report as one W&B history row at Lightning's step (``trainer/global_step``).

    The probe images are logged once, in a ``probes/<prefix>probes`` table (probe_id, image, label)
    on the first logged epoch. The per-epoch ``probes/<prefix>table`` is an INCREMENTAL table keyed by
    ``probe_id``: each epoch uploads only its new rows (the overlay and the scores), never the
    probe images again. (W&B's evaluation callbacks reference a data table by downloading its
    artifact, which offline runs cannot do; every other way of putting the image in each row
    re-stages it per epoch.)
    """

    def __init__(self, logger: WandbRunLogger, prefix: str, maps_dir: Path) -> None:
        self.logger = logger
        self.prefix = prefix
        self.maps_dir = maps_dir
        self._table: wandb.Table | None = None
        self._probes_logged = False

    def log(self, report: EpochReport, sheet: ProbeSheet) -> None:
        import wandb

        row: dict[str, Any] = {}
        if not self._probes_logged:
            probes = wandb.Table(columns=["probe_id", "image", "label"])
            for probe_id, image, label in zip(sheet.probe_ids, sheet.images, sheet.labels, strict=True):
                probes.add_data(probe_id, wandb.Image(image), label)
            row[key("probes", self.prefix, "probes")] = probes
            self._probes_logged = True
        for name, (image, text) in report.overlays.items():
            row[name] = wandb.Image(image, caption=text)
        for name, image in report.images.items():
            row[name] = wandb.Image(image)
        for name, values in report.histograms.items():
            row[name] = wandb.Histogram(values.tolist(), num_bins=histogram_bins(values))
        if report.rows:
            if self._table is None:
                self._table = wandb.Table(columns=list(report.rows[0]), log_mode="INCREMENTAL")
            for cells in report.rows:
                self._table.add_data(
                    *[wandb.Image(cells[c]) if c == "overlay" else cells.get(str(c)) for c in self._table.columns]
                )
            row[key("probes", self.prefix, "table")] = self._table
        row.update(report.timed_scalars())  # last: the time covers the images staged above
        self.logger.log_metrics(row, step=report.step)

    def finish(self) -> None:
        """Log every epoch's maps (the maps folder) as one artifact of type ``gradskip-maps``."""
        import wandb

        if not any(self.maps_dir.glob("epoch_*.npz")):
            return
        run = self.logger.experiment
        name = f"gradskip-maps-{run.id}"
        try:
            artifact = wandb.Artifact(name, type="gradskip-maps")
            artifact.add_dir(str(self.maps_dir))
            run.log_artifact(artifact)
        except Exception as err:
            raise UploadError(self.maps_dir, f"the W&B run {run.id} (artifact {name})", err) from err


class ScalarSink:
    """Sends the report's scalars to a non-W&B logger (Lightning's CSV, TensorBoard, ...)."""

    def __init__(self, logger: MetricsLogger) -> None:
        self.logger = logger

    def log(self, report: EpochReport, sheet: ProbeSheet) -> None:
        self.logger.log_metrics(report.timed_scalars(), step=report.step)
        self.logger.save()

    def finish(self) -> None:
        pass


class TensorBoardSink:
    """Sends the report's images (overlays captioned in a strip below) and histograms to TensorBoard.

    The scalars go through the logger's ``log_metrics`` (a :class:`ScalarSink`); TensorBoard
    groups every tag by its text before the first "/", as W&B does.
    """

    def __init__(self, logger: WriterLogger) -> None:
        self.logger = logger

    def log(self, report: EpochReport, sheet: ProbeSheet) -> None:
        writer = self.logger.experiment
        for tag, (image, text) in report.overlays.items():
            writer.add_image(tag, annotate(image, text), report.step, dataformats="HWC")
        for tag, image in report.images.items():
            writer.add_image(tag, image, report.step, dataformats="HWC")
        for tag, values in report.histograms.items():
            writer.add_histogram(tag, values, report.step)
        writer.flush()

    def finish(self) -> None:
        pass


#: What the image of a key shows, for its title in MLflow (``{0}``...: the captured parts, ``{m}``: the
#: explained method).
IMAGE_TITLES = (
    (r"probes/.*overlays", "{m} relevance overlays of every probe"),
    (r"probes/.*overlays/([^/]+)", "{0} relevance overlays of every probe"),
    (r"probes/.*overlay/probe_(\d+)", "probe {0}: {m} relevance overlay"),
    (r"heads/.*/(omega|grad_flow|sparsity)", "{m} head {0} (rows: layers, columns: heads)"),
    (r"heads/.*/(omega|grad_flow|sparsity)/layer_(\d+)", "{m} head {0} of layer {1}: histogram over probes and heads"),
    (r"discovery/.*class_means", "discovery: each class's mean relevance map"),
    (r"discovery/.*strategy_maps/class_(\d+)", "discovery: strategy maps of class {0}"),
    (r"discovery/.*/([^/]+)/transfer/class_(\d+)", "discovery: class {1}'s {0} given to other classes' images"),
)


def image_title(name: str, epoch: int, method: str, caption: str = "") -> str:
    """The title drawn over an image in MLflow: what it shows, the epoch, its key (and ``caption``).

    >>> image_title("probes/gradskip/overlays", 3, "gradskip")
    'gradskip relevance overlays of every probe, epoch 3 (probes/gradskip/overlays)'
    >>> image_title("probes/gradskip/overlay/probe_7", 0, "gradskip", "label=a pred=b p=0.50")
    'probe 7: gradskip relevance overlay, epoch 0 (probes/gradskip/overlay/probe_7)\\nlabel=a pred=b p=0.50'
    """
    found = ((text, re.fullmatch(pattern, name)) for pattern, text in IMAGE_TITLES)
    what = next((text.format(*match.groups(), m=method) for text, match in found if match), None)
    title = f"{name}, epoch {epoch}" if what is None else f"{what}, epoch {epoch} ({name})"
    return f"{title}\n{caption}" if caption else title


class MLflowSink:
    """Sends the report's images and histograms to an MLflow run, and its maps folder at the end of fit.

    Every image is a step-wise MLflow image (``log_image(key=, step=)``) under the report's key, at the
    report's **epoch** as its step (the MLflow UI opens an image card at step 0: epoch 0's picture; the
    scalars stay at Lightning's step, beside its own, and ``<log_prefix>epoch`` is among them). The UI
    draws one image chart per key, with a step slider, in the section of the scalars that share its
    path (``probes/gradskip``, ``heads/gradskip/omega``, ...). Each image says what it is in a strip
    above it (:func:`image_title`: what it shows, the epoch, the key; an overlay's label, prediction and
    probability) and is enlarged to at least 384 pixels wide (:func:`~gradskip_lightning.render.titled`),
    as the UI shows no caption of ours. Each histogram is drawn as an image
    (:func:`~gradskip_lightning.render.histogram_image`): MLflow has no histogram chart. Images are
    written synchronously, so the callback's ``time_s`` covers them and none is lost when the process
    ends. The scalars go through the logger's ``log_metrics`` (a :class:`ScalarSink`); mlflow itself is
    only reached through the logger's client.
    """

    def __init__(self, logger: MlflowRunLogger, maps_dir: Path, artifact_path: str) -> None:
        self.logger = logger
        self.maps_dir = maps_dir
        self.artifact_path = artifact_path

    def _log_image(self, name: str, image: np.ndarray, report: EpochReport, caption: str = "") -> None:
        # MLflow refuses other characters in image keys; Lightning's MLFlowLogger drops the same ones
        # from metric keys, so an image keeps the section of its scalars.
        key = re.sub(r"[^a-zA-Z0-9_/. -]+", "", name)
        picture = titled(image, image_title(name, report.epoch, report.method, caption))
        self.logger.experiment.log_image(self.logger.run_id, picture, key=key, step=report.epoch, synchronous=True)

    def log(self, report: EpochReport, sheet: ProbeSheet) -> None:
        for name, (image, text) in report.overlays.items():
            self._log_image(name, image, report, text)
        for name, image in report.images.items():
            self._log_image(name, image, report)
        for name, values in report.histograms.items():
            self._log_image(name, histogram_image(values, histogram_bins(values)), report)

    def finish(self) -> None:
        """Upload the maps folder into the run's artifacts at ``artifact_path`` (``gradskip/maps``)."""
        if not any(self.maps_dir.glob("epoch_*.npz")):
            return
        client, run_id = self.logger.experiment, self.logger.run_id
        try:
            client.log_artifacts(run_id, str(self.maps_dir), self.artifact_path)
        except Exception as err:
            try:
                store = f"{client.get_run(run_id).info.artifact_uri}/{self.artifact_path}"
            except Exception:  # noqa: BLE001  # the tracking store is out too
                store = f"the artifacts {self.artifact_path} of MLflow run {run_id}"
            raise UploadError(self.maps_dir, store, err) from err


class ImageFileSink:
    """Writes the report's images as PNGs ``folder/epoch_<epoch>/<key, "/" -> "_">.png`` (runs without W&B, MLflow)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, epoch: int, name: str) -> Path:
        return self.folder / f"epoch_{epoch:04d}" / f"{name.replace('/', '_')}.png"

    def log(self, report: EpochReport, sheet: ProbeSheet) -> None:
        for name, (image, text) in report.overlays.items():
            write_png(self._path(report.epoch, name), annotate(image, text))
        for name, image in report.images.items():
            write_png(self._path(report.epoch, name), image)

    def finish(self) -> None:
        pass


class MapsFileSink:
    """Writes the maps files (see :mod:`.files`): ``probes.npz`` once, ``epoch_<e>.npz`` per saved epoch."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._probes_written = False

    def log(self, report: EpochReport, sheet: ProbeSheet) -> None:
        if report.arrays is None:
            return
        if not self._probes_written:
            write_probes(self.folder, np.asarray(sheet.probe_ids), sheet.label_ids, sheet.images, sheet.class_names)
            self._probes_written = True
        write_epoch(self.folder, report.epoch, report.step, report.method, report.arrays)

    def finish(self) -> None:
        """Name this run's maps folder in the log (``outputs/wandb/latest-run`` moves with the next run)."""
        if self._probes_written:
            rank_zero_info(
                f"GradSkip maps of this run: {self.folder} (draw them: "
                f"python -m gradskip_lightning.timeline {shlex.quote(str(self.folder))} -o timeline.png)"
            )


def ordered_sinks(
    out_dir: Path,
    prefix: str,
    wandb_logger: WandbRunLogger | None,
    image_sinks: Sequence[Sink],
    scalar_loggers: Sequence[MetricsLogger],
    images: bool,
) -> list[Sink]:
    """The sinks, those sending scalars last: the maps files under ``out_dir/maps``, PNGs under
    ``out_dir/images`` (with ``images``), the ``image_sinks`` (TensorBoard, MLflow), the W&B run's row
    (and maps artifact at the end), the ``scalar_loggers``' rows, then the end-of-fit summary
    (:class:`~.summary.SummarySink`)."""
    sinks: list[Sink] = [MapsFileSink(out_dir / "maps")]
    if images:
        sinks.append(ImageFileSink(out_dir / "images"))
    sinks.extend(image_sinks)
    if wandb_logger is not None:
        sinks.append(WandbSink(wandb_logger, prefix, out_dir / "maps"))
    sinks.extend(ScalarSink(logger) for logger in scalar_loggers)
    mlflow = next(
        (
            (s.logger.experiment, str(s.logger.run_id), f"{Path(s.artifact_path).parent}/summary.txt")
            for s in image_sinks
            if isinstance(s, MLflowSink)
        ),
        None,
    )
    wandb_run = None if wandb_logger is None else wandb_logger.experiment
    sinks.append(SummarySink(out_dir, prefix, wandb_run, mlflow))
    return sinks


def log_to_sinks(sinks: list[Sink], report: EpochReport, sheet: ProbeSheet) -> None:
    """Hand ``report`` to every sink; a failing sink warns, naming itself, and the others still write."""
    for sink in sinks:
        try:
            sink.log(report, sheet)
        except Exception as err:  # noqa: BLE001
            rank_zero_warn(
                f"GradSkipCallback: {type(sink).__name__} failed at epoch {report.epoch}, the other outputs are "
                f"written. {type(err).__name__}: {err}"
            )


def finish_sinks(sinks: Sequence[Sink]) -> None:
    """The end of fit: every sink's last words (the maps folder's uploads); a failing sink warns, naming itself (and
    an upload the store and the local folder that keeps the files), and the others still finish."""
    for sink in sinks:
        try:
            sink.finish()
        except Exception as err:  # noqa: BLE001
            rank_zero_warn(
                f"GradSkipCallback: {type(sink).__name__} failed at the end of fit, the other outputs are written. "
                f"{type(err).__name__}: {err}"
            )
