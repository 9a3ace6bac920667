"""The MLflow guide's screenshots (tools/mlflow_screenshots.py): the script trains a tiny run, serves it
with ``mlflow server`` and photographs, in headless Chromium, the run's overlay-grid card at epochs 0
and 1 once its picture has loaded. Skipped only where playwright or Chromium is not installed."""

from __future__ import annotations

import http.server
import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("mlflow")  # the run is logged with an MLFlowLogger

ROOT = Path(__file__).resolve().parents[1]
#: The red of the frames that mark the places to click (the script's MARK).
MARK_RGB = (229, 72, 77)


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mlflow_screenshots", ROOT / "tools" / "mlflow_screenshots.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def pixels(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB")).astype(int)


def marked(rgb: np.ndarray) -> np.ndarray:
    """Where ``rgb`` (H, W, 3) is the marks' red."""
    return (np.abs(rgb - np.array(MARK_RGB)) < 12).all(axis=-1)


def warm(rgb: np.ndarray) -> int:
    """How many pixels are warm colours other than the marks' red: the overlays' inferno orange, red and
    yellow (MLflow's page is white, grey and blue: a page whose picture has not loaded has a few hundred)."""
    red, blue = rgb[..., 0], rgb[..., 2]
    return int(((red > 150) & (red - blue > 60) & ~marked(rgb)).sum())


@pytest.mark.slow
def test_the_screenshots_show_the_overlay_card_at_epochs_0_and_1(tmp_path):
    script = load_script()
    try:
        script.require_playwright()
        chromium = script.find_chromium()
    except script.MissingBrowser as missing:
        pytest.skip(f"no headless browser: {missing}")

    shots = script.take_screenshots(tmp_path / "shots", chromium)

    assert shots.card_title == "probes/gradskip/overlays"  # the card's title in the page's DOM
    first, second = shots.images  # the step slider: step 0 then step 1, the epochs the images show
    assert first.startswith("images/probes~gradskip~overlays+step+0+"), first
    assert second.startswith("images/probes~gradskip~overlays+step+1+"), second
    window, card = pixels(shots.window), pixels(shots.card)
    assert window.shape == (1000, 1400, 3)
    assert 300 < card.shape[0] < 1000 and 300 < card.shape[1] < 1400  # one card, not the window
    for rgb in (window, card):
        assert rgb.std() > 20  # a page, not a blank or a spinner
        assert warm(rgb) > 8000  # the overlay picture itself, loaded
    assert marked(window).sum() > 1000  # the frames around the places to click
    assert marked(card).sum() == 0  # taken after the frames were removed


def test_a_missing_browser_is_named(monkeypatch, tmp_path, capsys):
    script = load_script()
    with pytest.raises(script.MissingBrowser, match="no Chromium binary at /nowhere/chromium"):
        script.find_chromium("/nowhere/chromium")
    monkeypatch.delenv("CHROMIUM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(script.MissingBrowser, match="no Chromium on the PATH .*--chromium PATH"):
        script.find_chromium()
    with pytest.raises(SystemExit) as exited:  # the command line: one line, before any training
        script.main(["--out", str(tmp_path / "shots"), "--chromium", "/nowhere/chromium"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert not (tmp_path / "shots").exists()


def test_the_local_server_is_asked_directly_whatever_proxy_the_environment_names(monkeypatch):
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for var in ("http_proxy", "HTTP_PROXY"):
            monkeypatch.setenv(var, "http://127.0.0.1:9")  # a closed port: through it nothing answers
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        assert load_script().answers(f"http://127.0.0.1:{server.server_port}/")
    finally:
        server.shutdown()
