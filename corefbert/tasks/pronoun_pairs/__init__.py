"""Pronoun-replacement entailment pairs: the builder, the classifiers, the task."""
