"""Shared by corpus, tasks and the seed systems: CoNLL, JSON readers, vocabularies, model positions."""
