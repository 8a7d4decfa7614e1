"""The paper's method: the MRP + WWM collator, the copy-head model, data, the run, its report."""
