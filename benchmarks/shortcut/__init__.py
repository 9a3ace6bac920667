"""Shortcut detection benchmark: do the maps catch a model learning a spurious tag, and before its
predictions show it?

For each dataset (planted shapes; BloodMNIST with ``--data-root``) and training seed it trains three
models with the same seed and images: "spurious" (the config's tag, mostly on one class), "clean"
(no image tagged) and a negative control (the tag on half the images of every class). After every
training epoch each method (the TimmViTExplainer's methods and the Captum / pytorch-grad-cam peers) explains
fixed tagged validation probes for the tag's class, and the relevance mass on the tag is recorded
with the spurious score on the transplanted test set. Scores per (dataset, seed, method): the tag
mass of the spurious and the clean model, the AUROC of telling them apart by one probe's mass, the
first epoch the mean mass exceeds the clean model's 95th percentile, beside the first epoch the
spurious score reaches 0.85. See :mod:`.detection` for the exact definitions.
"""

from .cli import add_arguments, run

__all__ = ["add_arguments", "run"]
