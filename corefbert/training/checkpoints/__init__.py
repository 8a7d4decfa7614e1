"""Training checkpoints: the ``checkpoints/step_N`` folders (:mod:`.folders`), their files checked and loaded
safely (:mod:`.files`), and the signals that make a run save and stop (:mod:`.signals`)."""
