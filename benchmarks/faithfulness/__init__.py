"""Faithfulness benchmark: every method scored over several training seeds, with intervals, paired
differences and GradSkip ablations.

Run as ``python -m benchmarks faithfulness [--seeds 0 1 2] [--data-root DIR]
[--markdown PATH] [--quick]``. Per dataset (planted shapes on a tiny and on a deeper ViT and on a
small Swin, and BloodMNIST with ``--data-root``) and per training seed, a model is trained with its
config's settings (or loaded with ``--checkpoints``); the same fixed test images are explained by
every method, with the true label as target, and scored per image (the columns of
:data:`~benchmarks.faithfulness.scores.SCORES`). Each score is reported as the
mean with a 95 % hierarchical bootstrap interval over seeds and images, and GradSkip is compared
with every other method by paired per-image differences (ahead / tied / behind). GradSkip's options
are then ablated one at a time on every seed, each setting compared with the default the same way.
"""

from .cli import add_arguments, run

__all__ = ["add_arguments", "run"]
