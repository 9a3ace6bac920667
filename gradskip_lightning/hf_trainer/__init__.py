"""The callback for ``transformers.Trainer``: :class:`GradSkipTrainerCallback` runs the Lightning
callback's epoch ends (probes, maps, scores, drift, discovery, the time budget) on a HF ViT, DeiT,
DINOv2 or BEiT classifier fine-tuned with the Trainer, and logs as its ``report_to`` says.

Modules: :mod:`.callback` (the front door and the Trainer's hooks), :mod:`.host` (the Trainer's side
of the epoch-end seam), :mod:`.loggers` (W&B, TensorBoard, files). Needs ``transformers`` 5.x and
``accelerate`` (``pip install gradskip-lightning[hf-trainer]``).
"""

from gradskip_lightning.hf_trainer.callback import GradSkipTrainerCallback

__all__ = ["GradSkipTrainerCallback"]
