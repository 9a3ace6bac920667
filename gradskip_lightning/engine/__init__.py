"""The framework-neutral epoch work that both doors (:mod:`gradskip_lightning.callbacks` for Lightning,
:mod:`gradskip_lightning.hf_trainer` for ``transformers.Trainer``) hold.

Modules: :mod:`.settings` (the validated settings groups), :mod:`.setup` (checks against the model and
the data), :mod:`.epoch` (one epoch end), :mod:`.host` (what an epoch end needs from the training
loop), :mod:`.keys` (the logged keys); the subpackages :mod:`.probes` (items, drawing, the probe set,
resume), :mod:`.scoring` (what is due, the time budget, the scores and records), :mod:`.discovery`
(the shortcut discovery stage) and :mod:`.output` (the epoch report, the sinks, the maps files).
Nothing here imports Lightning's ``Trainer``, callbacks or loggers.
"""

from gradskip_lightning.engine.discovery.stage import DiscoveryStage
from gradskip_lightning.engine.probes import ProbeImages
from gradskip_lightning.engine.settings import MethodSettings, ProbeSettings, RenderSettings, ScoreSettings

__all__ = ["DiscoveryStage", "MethodSettings", "ProbeImages", "ProbeSettings", "RenderSettings", "ScoreSettings"]
