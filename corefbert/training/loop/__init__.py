"""The one training loop (:mod:`.core`), the job protocol it runs (:mod:`.job`), its setup (:mod:`.setup`), its
state between steps (:mod:`.state`), random state (:mod:`.rng`), optimizer and schedule (:mod:`.optimization`),
compilation (:mod:`.compiling`) and throughput figures (:mod:`.throughput`)."""
