"""FEVER fact verification: readers, features, BERT-concat and KGAT."""
