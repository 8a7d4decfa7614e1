"""What a run writes for people: its log (:mod:`.runlog`), evaluation results, predictions and best/last models
(:mod:`.evaluation`), model cards (:mod:`.cards`), and the lock that keeps one run per output folder
(:mod:`.lock`)."""
