"""What a run writes for people: its log, results, best/last models, model cards; its folder's lock."""
