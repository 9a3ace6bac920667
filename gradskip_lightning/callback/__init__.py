"""The Lightning callback that explains a fixed probe set at epoch ends and logs the results.

Modules: :mod:`.core` (the callback: argument checks, when, failure isolation, state),
:mod:`.probes` (the probe set: drawing, checks, its life over fits), :mod:`.record` (the typed
per-probe values and where each goes), :mod:`.compute` (explain and score in chunks),
:mod:`.distributed` (sharding and gathering), :mod:`.drift` (drift state), :mod:`.report` (what is
logged), :mod:`.sinks` (W&B, other loggers, image and maps files), :mod:`.files` (the maps npz
format).
"""

from .core import GradSkipCallback

__all__ = ["GradSkipCallback"]
