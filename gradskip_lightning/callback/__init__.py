"""The Lightning callback that explains a fixed probe set at epoch ends and logs the results.

Modules: :mod:`.core` (the callback: when, state, ranks), :mod:`.probes` (probe selection),
:mod:`.compute` (explain and score in chunks), :mod:`.distributed` (sharding and gathering),
:mod:`.drift` (drift state), :mod:`.report` (what is logged), :mod:`.sinks` (W&B, other loggers,
files), :mod:`.files` (the maps npz format).
"""

from .core import GradSkipCallback

__all__ = ["GradSkipCallback"]
