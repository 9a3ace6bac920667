"""The Lightning doors: thin ``Callback`` classes around the framework-neutral :mod:`gradskip_lightning.engine`.

Modules: :mod:`.gradskip` (:class:`GradSkipCallback`: front door, hooks, state), :mod:`.host` (the
Trainer's side of the engine's host seam), :mod:`.trainer_setup` (what the Trainer is checked for),
:mod:`.sinks` (the Trainer's loggers as sinks), :mod:`.averaging` (the weights the user keeps), and
:mod:`.shortcut_correction` (:class:`ShortcutCorrection`, which unlearns a found shortcut, its options checked
in :mod:`.correction_settings`, reading training batches through :mod:`.training_batches`).
"""

from gradskip_lightning.callbacks.gradskip import GradSkipCallback
from gradskip_lightning.callbacks.shortcut_correction import ShortcutCorrection

__all__ = ["GradSkipCallback", "ShortcutCorrection"]
