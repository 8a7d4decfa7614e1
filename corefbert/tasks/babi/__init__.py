"""bAbI with the Gated-Attention reader and Coref-GRU: reader, models, the task, copy-head clusters."""
