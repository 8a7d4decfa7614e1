"""Raw text -> packed pretraining rows: readers per format, the cache, shards, spaCy mentions, packing."""
