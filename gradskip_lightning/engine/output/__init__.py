"""Where an epoch goes: the one report of the epoch (:mod:`.report`), the sinks that consume it
(:mod:`.sinks`: W&B, TensorBoard, MLflow, other loggers, image and maps files), the maps files' format
(:mod:`.files`) and the table of logged keys of docs/logged-keys.md (:mod:`.key_table`)."""
