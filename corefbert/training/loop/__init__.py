"""The one training loop (:mod:`.core`) and what it runs on: job protocol, setup, state, RNG, optimizer."""
