"""The Lightning callback that explains a fixed probe set at epoch ends and logs the results.

Modules: :mod:`.core` (the callback: hooks, state), :mod:`.settings` (its validated settings
groups and argument checks), :mod:`.setup` (checks against the model and datamodule),
:mod:`.schedule` (which epochs), :mod:`.epoch` (one isolated epoch, monitoring), :mod:`.scores`
(the table of scores),
:mod:`.probes` (the probe set: drawing, checks, its life over fits), :mod:`.record` (the typed
per-probe values and where each goes), :mod:`.compute` (explain and score in chunks),
:mod:`.distributed` (sharding and gathering), :mod:`.drift` (drift state), :mod:`.report` (what is
logged), :mod:`.sinks` (W&B, other loggers, image and maps files), :mod:`.files` (the maps npz
format), :mod:`.discovery` and :mod:`.discovery_report` (the shortcut discovery stage).
"""

from gradskip_lightning.callback.core import GradSkipCallback
from gradskip_lightning.callback.discovery.stage import DiscoveryStage
from gradskip_lightning.callback.settings import ProbeSettings, RenderSettings, ScoreSettings

__all__ = ["DiscoveryStage", "GradSkipCallback", "ProbeSettings", "RenderSettings", "ScoreSettings"]
