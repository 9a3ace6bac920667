"""The Lightning callback that explains a fixed probe set at epoch ends and logs the results.

Modules: :mod:`.core` (the callback: front door, hooks, state), :mod:`.settings` (its validated
settings groups), :mod:`.setup` (checks against the model, datamodule and Trainer), :mod:`.epoch`
(one epoch end), :mod:`.host` (what an epoch end needs from the training loop: Lightning's here,
a ``transformers.Trainer``'s in :mod:`gradskip_lightning.hf_trainer`), :mod:`.averaging` (the
weights the user keeps), :mod:`.keys` (the logged keys); the subpackages :mod:`.probes` (items,
drawing, the probe set, resume), :mod:`.scoring` (what is due, the time budget, the scores and
records), :mod:`.discovery` (the shortcut discovery stage), :mod:`.output` (the epoch report, the
sinks, the maps files) and :mod:`.correction` (the companion callback that unlearns a found
shortcut).
"""

from gradskip_lightning.callback.core import GradSkipCallback
from gradskip_lightning.callback.correction import ShortcutCorrection
from gradskip_lightning.callback.discovery.stage import DiscoveryStage
from gradskip_lightning.callback.probes import ProbeImages
from gradskip_lightning.callback.settings import MethodSettings, ProbeSettings, RenderSettings, ScoreSettings

__all__ = [
    "DiscoveryStage",
    "GradSkipCallback",
    "MethodSettings",
    "ProbeImages",
    "ProbeSettings",
    "RenderSettings",
    "ScoreSettings",
    "ShortcutCorrection",
]
