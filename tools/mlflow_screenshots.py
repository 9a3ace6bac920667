"""Screenshots of the MLflow UI for the MLflow guide (docs/guides/mlflow.md): where a run's GradSkip
images are and how their card reads.

    python tools/mlflow_screenshots.py --out docs

Trains a tiny run (the tests' 2-block ViT on 32 px planted shapes, 2 epochs, 4 probes) into a
temporary SQLite store, serves the store with ``mlflow server`` on a free local port, opens the run's
**Model metrics** tab in headless Chromium (driven by playwright) and writes two PNGs:

- ``mlflow_model_metrics.png`` (the window, 1400 x 1000): the tab, the ``probes/gradskip`` section and
  its overlay-grid card, with the places to click outlined in red;
- ``mlflow_image_card.png`` (the card alone, made taller): the card at step 1, the second epoch.

Needs ``mlflow``, ``playwright`` (``pip install playwright``; its own browser download,
``playwright install``, is not needed) and a Chromium or Chrome binary: ``--chromium PATH``, the
``CHROMIUM`` environment variable, or the first of :data:`BROWSERS` on the ``PATH``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: Browser names looked up on the PATH, in this order.
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: The window the screenshots are taken in, CSS pixels.
WINDOW = {"width": 1400, "height": 1000}
#: The section and the card the screenshots show (``<section>/<log_prefix><name>``).
SECTION, CARD = "probes/gradskip", "probes/gradskip/overlays"
#: The MLflow UI's local settings for a first visit: the assistant panel closed (it would take a third
#: of the window) and the "Model training" workflow (its sidebar: Runs, Models), not "GenAI".
UI_SETTINGS = {
    "mlflow.assistant.panelOpen_v1": "false",
    "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": "true",
    "mlflow.workflowType_v1": '"machine_learning"',
}
#: How the places to click are marked: a frame drawn inside the element (an outline would be clipped).
MARK = "inset 0 0 0 3px #e5484d"


class MissingBrowser(RuntimeError):
    """playwright or a Chromium binary is not installed."""


@dataclass(frozen=True)
class Screenshots:
    """What :func:`take_screenshots` wrote and what the page showed.

    Attributes:
        window: the window's screenshot (``mlflow_model_metrics.png``).
        card: the card's screenshot (``mlflow_image_card.png``).
        card_title: the card's title as the page's DOM held it (the image's key).
        images: the artifact path of the image each screenshot shows (MLflow's name:
            ``images/<key with ~ for />+step+<step>+timestamp+...``), window first.
    """

    window: Path
    card: Path
    card_title: str
    images: tuple[str, str]


def find_chromium(given: str | None = None) -> str:
    """The Chromium binary to drive: ``given``, ``$CHROMIUM``, or the first of :data:`BROWSERS` found."""
    for candidate in (given, os.environ.get("CHROMIUM")):
        if candidate:
            if not Path(candidate).is_file():
                raise MissingBrowser(f"no Chromium binary at {candidate}")
            return candidate
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    raise MissingBrowser(
        f"no Chromium on the PATH (looked for {', '.join(BROWSERS)}): install one (Debian: apt install chromium) "
        "or pass --chromium PATH"
    )


def require_playwright() -> None:
    """Fail with the install command when playwright is missing."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as error:
        raise MissingBrowser("playwright is not installed: pip install playwright (no 'playwright install')") from error


def train_tiny_run(store: str, folder: Path) -> tuple[str, str]:
    """Train the tests' tiny classifier for 2 epochs in ``folder`` with the callback and an ``MLFlowLogger``
    writing to ``store`` (artifacts in ``folder/artifacts``); the experiment and run ids."""
    if str(ROOT) not in sys.path:  # tests.callbacks.helpers: the tests' tiny model, data and Trainer
        sys.path.insert(0, str(ROOT))
    from lightning.pytorch import seed_everything
    from lightning.pytorch.loggers import MLFlowLogger

    from gradskip_lightning import GradSkipCallback, ProbeSettings, ScoreSettings
    from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer

    seed_everything(0, verbose=False)
    logger = MLFlowLogger(experiment_name="gradskip", tracking_uri=store, artifact_location=str(folder / "artifacts"))
    callback = GradSkipCallback(
        probes=ProbeSettings(num_probes=4), scores=ScoreSettings(insertion_steps=4), progress=False
    )
    tiny_trainer(folder, logger=logger, callbacks=[callback], max_epochs=2).fit(tiny_module(), datamodule=tiny_data())
    return str(logger.experiment_id), str(logger.run_id)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class MlflowServer:
    """``mlflow server`` (one worker, no telemetry) for ``store`` on a free local port, started on
    entering the block and stopped on leaving it; its output goes to ``log``."""

    def __init__(self, store: str, artifacts: Path, log: Path) -> None:
        self.address = f"http://127.0.0.1:{free_port()}"
        port = self.address.rsplit(":", 1)[1]
        self.command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store,
                        "--default-artifact-root", str(artifacts), "--host", "127.0.0.1", "--port", port,
                        "--workers", "1"]  # fmt: skip
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> MlflowServer:
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
        with self.log.open("w") as output:
            self.process = subprocess.Popen(self.command, stdout=output, stderr=subprocess.STDOUT, env=env)
        return self

    def wait(self, timeout_s: float = 180.0) -> str:
        """The server's address, once its ``/health`` answers; fails with the server's output when it
        exits or stays silent for ``timeout_s`` seconds."""
        assert self.process is not None, "start the server with `with`"
        deadline = time.monotonic() + timeout_s
        while not answers(f"{self.address}/health"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                state = "is not answering" if self.process.poll() is None else f"exited with {self.process.returncode}"
                raise RuntimeError(f"mlflow server {state} ({' '.join(self.command)}):\n{self.log.read_text()[-2000:]}")
            time.sleep(0.5)
        return self.address

    def __exit__(self, *exc: object) -> None:
        if self.process is None:
            return
        self.process.terminate()  # uvicorn stops its worker on SIGTERM
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


#: Opens local addresses directly: a proxy from the environment (or one cached by ``urlopen``'s global opener when it
#: was first used) would not reach a server on 127.0.0.1.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def answers(url: str) -> bool:
    """Whether ``url`` answers 200 (asked directly, without a proxy)."""
    try:
        with DIRECT.open(url, timeout=10) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def shoot(address: str, experiment_id: str, run_id: str, out: Path, chromium: str) -> Screenshots:
    """Open the run's Model metrics tab at ``address`` and write the two screenshots into ``out``."""
    from playwright.sync_api import sync_playwright

    settings = "".join(f"localStorage.setItem({key!r}, {value!r});" for key, value in UI_SETTINGS.items())
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport=WINDOW)  # type: ignore[arg-type]
            context.set_default_timeout(60_000)
            context.add_init_script(settings)
            page = context.new_page()
            page.goto(f"{address}/#/experiments/{experiment_id}/runs/{run_id}/model-metrics")
            tab = page.get_by_role("tab", name="Model metrics")
            tab.wait_for()
            close_assistant(page)
            section = page.get_by_text(SECTION, exact=True)
            section.evaluate("e => e.scrollIntoView()")  # the cards below the window are drawn once scrolled to
            card = page.get_by_test_id("experiment-view-compare-runs-card").filter(
                has=page.get_by_text(CARD, exact=True)
            )
            card_title = card.locator("h4").inner_text()
            first = show_image(page, card, section)
            slider = card.get_by_role("slider")
            marks = [tab, section, card.locator("[data-component-id='fullscreen_button_chartcard']"),
                     card.locator("input[type=number]").locator("..")]  # fmt: skip
            for mark in marks:
                mark.evaluate(f"e => e.style.setProperty('box-shadow', '{MARK}', 'important')")
            window = out / "mlflow_model_metrics.png"
            page.screenshot(path=window)
            for mark in marks:
                mark.evaluate("e => e.style.removeProperty('box-shadow')")

            slider.press("ArrowRight")  # the next step: epoch 1
            page.wait_for_function(
                "card => decodeURIComponent(card.querySelector('img').src).includes('+step+1+')",
                arg=card.element_handle(),
            )
            taller(page, card, by=100)
            second = show_image(page, card, section)
            card_shot = out / "mlflow_image_card.png"
            card.screenshot(path=card_shot)
        finally:
            browser.close()
    return Screenshots(window, card_shot, card_title, (first, second))


def close_assistant(page: Any) -> None:
    """Close the "MLflow Assistant" panel if it is open (the UI settings keep it closed on a first visit):
    its header holds the "New Chat", "Settings" and "Close" buttons."""
    if page.get_by_role("button", name="New Chat", exact=True).is_visible():
        page.get_by_role("button", name="Close", exact=True).first.click()


def show_image(page: Any, card: Any, section: Any) -> str:
    """Wait until the card's image has loaded, scroll it into the card's view (the card keeps the
    full-size image's height and scrolls), put the section at the window's top again; the image's
    artifact path."""
    image = card.locator("img")
    image.wait_for()
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=image.element_handle())
    image.evaluate("e => e.scrollIntoView()")  # its top: the picture's title
    section.evaluate("e => e.scrollIntoView()")
    source = str(image.get_attribute("src"))
    path = source.split("path=", 1)[1].split("&", 1)[0] if "path=" in source else source
    return urllib.parse.unquote(path)


def taller(page: Any, card: Any, by: int) -> None:
    """Make ``card`` ``by`` pixels taller by dragging its corner, as a user would."""
    handle = card.locator("xpath=..").get_by_test_id("draggable-card-resize-handle")
    box = handle.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x, y + by, steps=10)
    page.mouse.up()


def take_screenshots(out: Path, chromium: str | None = None) -> Screenshots:
    """Train the tiny run, serve it and write both screenshots into ``out`` (created if missing).

    Raises:
        MissingBrowser: playwright or Chromium is not installed (checked before training).
    """
    require_playwright()
    browser = find_chromium(chromium)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mlflow-screenshots-") as scratch:
        folder = Path(scratch)
        store = f"sqlite:///{folder / 'mlflow.db'}"
        experiment_id, run_id = train_tiny_run(store, folder)  # first: beside a starting server it waits on the store
        with MlflowServer(store, folder / "artifacts", folder / "server.log") as server:
            return shoot(server.wait(), experiment_id, run_id, out, browser)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="folder for the PNGs (default: docs)")
    parser.add_argument("--chromium", help="the Chromium binary (default: $CHROMIUM or the PATH's)")
    args = parser.parse_args(argv)
    try:
        shots = take_screenshots(args.out, args.chromium)
    except MissingBrowser as error:
        parser.exit(2, f"error: {error}\n")
    print(f"wrote {shots.window} and {shots.card} (card {shots.card_title!r}: {', '.join(shots.images)})")


if __name__ == "__main__":
    main()
