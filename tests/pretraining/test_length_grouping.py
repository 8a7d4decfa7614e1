"""Length-grouped pretraining batches: every row once per epoch, short rows batched together, an
order fixed by (seed, epoch) that a resumed epoch replays through accelerate's prepared loader."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from corefbert.pretraining.length_grouping import (
    MEGABATCH_BATCHES,
    LengthGroupedSampler,
    computed_slot_fill,
    grouped_order,
)
from corefbert.training.loop.setup import build_accelerator
from corefbert.training.training_args import TrainingArguments

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


def _lengths(n=1000, short=0.1, seed=0):
    """Rows as --packing documents makes them: most full, a share shortened to a uniform length."""
    rng = np.random.default_rng(seed)
    return np.where(rng.random(n) < short, rng.integers(2, 512, n), 512)


def test_each_epoch_is_a_seeded_permutation_sorted_within_mega_batches():
    lengths = _lengths()
    order = grouped_order(lengths, 8, seed=3, epoch=0)
    assert sorted(order.tolist()) == list(range(len(lengths)))
    assert np.array_equal(order, grouped_order(lengths, 8, seed=3, epoch=0))
    assert not np.array_equal(order, grouped_order(lengths, 8, seed=3, epoch=1))
    assert not np.array_equal(order, grouped_order(lengths, 8, seed=4, epoch=0))
    mega = MEGABATCH_BATCHES * 8
    for start in range(0, len(order), mega):  # each mega-batch: a sorted run cut into whole batches
        batches = order[start:start + mega].reshape(-1, 8) if len(order) - start >= mega else None
        if batches is not None:
            spans = [(lengths[b].min(), lengths[b].max()) for b in batches]
            ranked = sorted(spans, reverse=True)
            assert all(hi_next <= lo for (lo, _), (_, hi_next) in zip(ranked, ranked[1:]))


def test_grouping_wastes_less_padding_than_random_batches():
    lengths = _lengths()

    def fill(order):  # the literal count: text over padded slots, batch by batch
        batches = [order[i:i + 8] for i in range(0, len(order) // 8 * 8, 8)]
        return sum(lengths[b].sum() for b in batches) / sum(lengths[b].max() * 8 for b in batches)

    grouped_rows = grouped_order(lengths, 8, seed=0, epoch=0)
    random_rows = np.random.default_rng(0).permutation(len(lengths))
    grouped, uniform = fill(grouped_rows), fill(random_rows)
    assert grouped > 0.98 and uniform < 0.96
    assert computed_slot_fill(lengths, 8, grouped_rows, multiple=1) == pytest.approx(grouped)
    assert computed_slot_fill(lengths, 8, random_rows, multiple=1) == pytest.approx(uniform)


def test_a_resumed_epoch_replays_the_same_batches_through_accelerate(tmp_path):
    lengths = _lengths(200)
    data = [{"row": torch.tensor(i)} for i in range(len(lengths))]

    def loader():
        sampler = LengthGroupedSampler(lengths, 4, seed=5)
        accelerator = build_accelerator(TrainingArguments(output_dir=str(tmp_path), mixed_precision="no", seed=5))
        return accelerator, accelerator.prepare(torch.utils.data.DataLoader(data, batch_size=4, sampler=sampler,
                                                                            drop_last=True))

    accelerator, dl = loader()
    dl.set_epoch(1)
    whole = [b["row"].tolist() for b in dl]
    dl.set_epoch(2)
    assert [b["row"].tolist() for b in dl] != whole
    accelerator, dl = loader()
    dl.set_epoch(1)
    resumed = [b["row"].tolist() for b in accelerator.skip_first_batches(dl, 7)]
    assert resumed == whole[7:]
    assert sorted(i for b in whole for i in b) == sorted(grouped_order(lengths, 4, 5, 1)[:len(whole) * 4].tolist())


def test_the_slot_fill_command_reads_a_prepared_corpus_named_by_a_word_or_a_config(tmp_path, capsys):
    """``corefbert slot-fill DATASET_DIR`` (through parse_args, so ``--config`` gives it too)."""
    import datasets
    from helpers import save_corpus

    from corefbert.cli import main

    lengths = [128] * 6 + [16, 16]  # [rows]
    save_corpus(datasets.DatasetDict({"train": datasets.Dataset.from_dict({"input_ids": [[1] * n for n in lengths]})}),
                tmp_path / "corpus")
    main(["slot-fill", str(tmp_path / "corpus"), "--batch_size", "2"])
    by_word = capsys.readouterr().out
    assert "8 rows, batch 2: text in 100.0% of the computed slots with length-grouped batches" in by_word, by_word
    config = tmp_path / "fill.yaml"
    config.write_text(f"dataset_dir: {tmp_path / 'corpus'}\nbatch_size: 2\n", encoding="utf-8")
    main(["slot-fill", "--config", str(config)])
    assert capsys.readouterr().out == by_word
