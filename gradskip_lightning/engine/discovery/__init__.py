"""The shortcut discovery stage: its settings, the per-class analysis over the discovery probes and
its scalars (:mod:`.stage`), its images and alerts (:mod:`.images`)."""

from gradskip_lightning.engine.discovery.stage import CLASS_VALUES, Discoverer, DiscoveryStage, discovery_scalars

__all__ = ["CLASS_VALUES", "Discoverer", "DiscoveryStage", "discovery_scalars"]
