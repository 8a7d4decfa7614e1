"""The ablation study of the paper's table 7: arms x seeds, probes, report."""
