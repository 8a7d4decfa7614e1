"""End-to-end coreference (Lee et al. 2017): word encoders, span ranking, the model, the task, resolve."""
