"""Discovery benchmark: does the per-class summary and hotspot transplant find a shortcut nobody named?

For each dataset (planted shapes; BloodMNIST with ``--data-root``) and training seed it trains, from
the dataset's config: a "stamped" model (a checkerboard stamp at a position no config uses, on one
class; position, size and strength cycle over the seeds, :data:`~.variants.DATASETS`), a "clean" model
(the same images, no stamp), a negative control (the stamp on every class alike), and the global
shortcuts (shortcuts with no location, :data:`~.variants.GLOBAL`): colour casts of three strengths, a
darkening and a blur on one class, and their property controls (the same change on half of every
class's images); on request (``--variants``), the acquisition families of
:data:`~benchmarks.shortcuts.ACQUISITION` (white balance, stain, gain, gamma, saturation, JPEG, resolution,
defocus, sensor noise, channels out of register, banding, a radial chromatic aberration, interlacing, column
fixed-pattern noise, uneven illumination, a hue rotation, a Bayer filter's green imbalance), and the
held-out ones of :data:`~benchmarks.shortcuts.HELD_OUT` (which chose no default), each with its ``_control``.
After training (and, for the stamped models, after
every epoch) each method's maps of fixed discovery probes (``--probes-per-class`` validation images per
class, explained for their own class) are summarised per class and every class's hotspot is transplanted
(:func:`gradskip_lightning.shortcuts.discover`), for each hotspot share of ``--shares``; the global variants
but ``cast`` skip this. The report (:mod:`.scoring`, :mod:`.report`) scores each suspicion formula: the
AUROC of the stamped class of stamped models against every class of the clean models, the hotspot's
overlap with the true stamp, the false-alarm rate over every class of the clean and control models, and
the first epoch it fires beside the first epoch the spurious score reaches 0.85.

At every epoch end of every model the discovery stage's property transplants (its defaults) are recorded too,
and :mod:`.property_report` reports, per global variant, whether its class is flagged for the right property on
every seed, when first, and its spurious score; and per property the false alarms of the clean and control
models against the bar of 5 % of their classes.

The ``corrected`` variant (:mod:`.correction`) trains the stamped data again with the callback's discovery
stage and a :class:`~gradskip_lightning.ShortcutCorrection` following it, and reports the spurious score and
the accuracy on the stamp-free test split of the stamped and the corrected model (``--variants stamped
corrected`` runs only those).
"""

from .cli import add_arguments, run

__all__ = ["add_arguments", "run"]
