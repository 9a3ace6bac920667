"""Every ``>>>`` example of the localisation, drift and sensitivity metrics runs and gives what it shows."""
from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["drift", "pointing", "regions", "segmentation", "sensitivity"])
def test_examples(name):
    module = importlib.import_module(f"gradskip_lightning.metrics.{name}")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
