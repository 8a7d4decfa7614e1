"""The one training loop and what a run writes: arguments, optimization, checkpointing, outputs, lock, throughput, Hub."""
