"""Extractive QA (QUOREF, MRQA/SQuAD): examples, windows, models, the task."""
