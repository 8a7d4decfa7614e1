"""Pronoun coreference: readers, MLM and copy-head candidate scoring, the task, the zero-shot resolver."""
