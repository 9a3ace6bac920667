"""Segmentation benchmark: GradSkip against the baselines and pytorch-grad-cam's Grad-CAM on a
SegFormer trained on planted-shapes segmentation, over several training seeds.

Run as ``python -m benchmarks segmentation [--seeds 0 1 2] [--markdown PATH]
[--figure PATH] [--quick]``. Per training seed a :class:`~gradskip_lightning.training.segmentation.SegmentationModule`
is trained with the settings of ``configs/planted_segformer.yaml`` (or loaded with ``--checkpoints``);
every image of a fixed test subset is explained for the class of its square, over the positions
predicted as that class, and scored per image: the localisation scores of the paper's protocol
(pixel accuracy, mIoU and AP of the map against the square) and region-logit insertion/deletion.
Means come with 95 % hierarchical bootstrap intervals over seeds and images, and GradSkip is
compared with every other method by paired per-image differences (ahead / tied / behind), with the
faithfulness benchmark's bootstrap and records.
"""

from .cli import add_arguments, run

__all__ = ["add_arguments", "run"]
