"""The fine-tuning protocol (base, heads) and one folder per task family that owns its models."""
