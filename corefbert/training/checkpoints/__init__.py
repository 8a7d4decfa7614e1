"""Training checkpoints: the ``step_N`` folders, their files checked and loaded safely, stop signals."""
