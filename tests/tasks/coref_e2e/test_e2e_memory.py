"""End-to-end coreference memory: span and pair intermediates computed in bounded chunks and
BERT windows in groups (exactly what one pass computes, gradients included), training and ``resolve`` at the
default pruning under a memory cap, and running out of memory as one line naming the flag to lower."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch
from helpers import FIXTURES, run_under_memory_cap
from test_e2e_coref import write_unbroken_conll

from corefbert.tasks.coref_e2e.span_ranking import SpanRanker, SpanRankingConfig
from corefbert.training import memory

FIXTURE = FIXTURES / "coref_e2e" / "two_docs.conll"
# Small word vectors; the pruning (λ = 0.4, K = 250) and span width (10) stay the defaults, since they size
# the pair intermediates: kept spans × K × span size.
SMALL = ["--embedding_dim", "32", "--lstm_size", "32", "--ffnn_size", "32", "--char_filters", "8", "--disable_tqdm"]


def _ranker_and_document(dropout: float, seed: int = 0):
    torch.manual_seed(seed)
    config = SpanRankingConfig(context_dim=6, head_dim=5, max_span_width=4, ffnn_size=8, max_antecedents=7,
                               num_genres=2, top_span_ratio=0.8, dropout=dropout)
    ranker = SpanRanker(config).train()
    words = 40
    document = dict(context=torch.randn(words, 6, requires_grad=True),
                    head_inputs=torch.randn(words, 5, requires_grad=True),
                    sentence_of_word=torch.arange(words) // 13, speaker_ids=torch.arange(words) // 20,
                    genre=torch.tensor(1), gold_starts=torch.tensor([0, 3, 14, 22, 30, 35]),
                    gold_ends=torch.tensor([1, 3, 15, 22, 31, 36]), gold_cluster_ids=torch.tensor([1, 2, 1, 2, 1, 2]))
    return ranker, document


def _loss_and_gradients(ranker: SpanRanker, document: dict, chunk_elements: int, seed: int = 1):
    ranker.chunk_elements = chunk_elements
    ranker.zero_grad()
    for name in ("context", "head_inputs"):
        document[name].grad = None
    torch.manual_seed(seed)
    out = ranker(**document)
    out["loss"].backward()
    gradients = {name: p.grad.clone() for name, p in ranker.named_parameters() if p.grad is not None}
    gradients.update(context=document["context"].grad.clone(), head_inputs=document["head_inputs"].grad.clone())
    return out, gradients


def test_chunked_span_and_pair_scoring_equals_one_pass_in_scores_loss_and_gradients():
    ranker, document = _ranker_and_document(dropout=0.0)
    whole, whole_grads = _loss_and_gradients(ranker, document, chunk_elements=10**9)
    # 60 floats: a few spans and one or two kept spans per chunk, so both passes run in many checkpointed chunks.
    chunked, chunked_grads = _loss_and_gradients(ranker, document, chunk_elements=60)
    assert whole["scores"].shape[0] > 20
    for key in ("top_starts", "top_ends", "antecedents"):
        assert torch.equal(whole[key], chunked[key])
    torch.testing.assert_close(chunked["scores"], whole["scores"])
    torch.testing.assert_close(chunked["loss"], whole["loss"])
    assert whole_grads.keys() == chunked_grads.keys() and len(whole_grads) > 10
    for name, gradient in whole_grads.items():
        torch.testing.assert_close(chunked_grads[name], gradient, msg=name)


def test_a_recomputed_chunk_draws_the_dropout_masks_of_its_forward_pass(monkeypatch):
    # Checkpointed chunks are recomputed in the backward pass: the gradients must be those of the masks the
    # forward pass drew, i.e. those of the same chunks run without recomputation.
    ranker, document = _ranker_and_document(dropout=0.5)
    recomputed, recomputed_grads = _loss_and_gradients(ranker, document, chunk_elements=60)
    monkeypatch.setattr(memory, "checkpoint", lambda function, *args, use_reentrant: function(*args))
    kept, kept_grads = _loss_and_gradients(ranker, document, chunk_elements=60)
    torch.testing.assert_close(recomputed["loss"], kept["loss"])
    for name, gradient in kept_grads.items():
        torch.testing.assert_close(recomputed_grads[name], gradient, msg=name)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_20k_word_sentence_trains_at_the_default_pruning_under_a_memory_cap_and_more_words_are_one_line(tmp_path):
    # At the paper's λ = 0.4 and K = 250, a 3,000-word crop keeps 1,200 spans: 300,000 pairs, each holding a
    # span-sized product and gather in one pass (+1.24 GB peak RSS here, 7.5 GB at the paper's sizes, where the
    # issue saw an allocation traceback under an 8 GB cap). In chunks: +0.21 GB here, 1.7 GB at the paper's sizes.
    long_doc = tmp_path / "unbroken.conll"
    write_unbroken_conll(long_doc, 20_000)
    argv = lambda train, out, *extra: [  # noqa: E731
        "--encoder", "bilstm", *SMALL, "--train_file", str(train), "--validation_file", str(train), "--do_train",
        "--do_eval", "--max_steps", "1", "--output_dir", str(out), *extra]
    setup = f"""
        import json
        from accelerate.state import AcceleratorState, GradientState
        from helpers import load_cli
        cli = load_cli("finetune/run_coref_e2e.py")
        def reset():
            AcceleratorState._reset_state(True)
            GradientState._reset_state()
        cli.main({argv(FIXTURE, tmp_path / "warm")!r})  # the same path on two small documents: imports done
        reset()
    """
    work = f"""
        results = cli.main({argv(long_doc, tmp_path / "default")!r})
        print("RESULTS", json.dumps(results))
        reset()
        try:  # the whole 20,000 words in one step: more than the cap allows
            cli.main({argv(long_doc, tmp_path / "whole", "--max_training_sentences", "100",
                           "--max_training_words", "20000")!r})
        except SystemExit as stop:
            print("EXIT", stop.code)
    """
    done = run_under_memory_cap(textwrap.dedent(setup) + "cap_memory()\n" + textwrap.dedent(work), headroom_mb=500,
                                timeout=800)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    results = json.loads(next(line for line in lines if line.startswith("RESULTS"))[len("RESULTS "):])
    assert results["train_steps"] == 1 and "eval_avg_f1" in results
    assert lines[-1] == "EXIT 2", done.stdout[-2000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "out of memory in training step 1" in errors[0], done.stderr[-2000:]
    assert "lower --max_training_words" in errors[0], errors[0]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_resolve_with_a_model_that_keeps_three_spans_per_word_stays_under_a_memory_cap(tmp_path):
    # --top_span_ratio 3 keeps up to 15,000 spans of a 5,000-word window: 3.75 M pairs, whose span-sized
    # products took +4.2 GB of peak RSS here (the issue: 3 GB asked for the first window). In chunks: +0.14 GB.
    model = tmp_path / "m"
    train = ["--encoder", "lsl", *SMALL, "--train_file", str(FIXTURE), "--do_train", "--max_steps", "1",
             "--top_span_ratio", "3", "--output_dir", str(model)]
    story = tmp_path / "story.txt"
    story.write_text("Anna met Tom at the station. She gave him a letter.\n" * 500, encoding="utf-8")  # 6,500 words
    saga = tmp_path / "saga.txt"
    saga.write_text("Anna met Tom at the station. She gave him a letter.\n" * 5000, encoding="utf-8")
    resolve = lambda *extra: ["--model", str(model / "last"), "--spacy_model", "blank", *extra]  # noqa: E731
    setup = f"""
        from helpers import load_cli
        from corefbert.tasks.coref_e2e.resolve import main
        load_cli("finetune/run_coref_e2e.py").main({train!r})
        main({resolve("--text", "Anna met Tom. She gave him a letter.")!r})
    """
    work = f"""
        result = main({resolve("--input_file", str(story), "--output_dir", str(tmp_path / "view"))!r})
        print("CLUSTERS", len(result["clusters"]))
        try:  # 65,000 words as one window: more than the cap allows
            main({resolve("--input_file", str(saga), "--max_segment_words", "100000")!r})
        except SystemExit as stop:
            print("EXIT", stop.code)
    """
    done = run_under_memory_cap(textwrap.dedent(setup) + "cap_memory()\n" + textwrap.dedent(work), headroom_mb=400,
                                timeout=800)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert any(line.startswith("CLUSTERS") for line in lines), done.stdout[-2000:]
    saved = json.loads((tmp_path / "view" / "story.json").read_text(encoding="utf-8"))
    assert all(saved["text"][m["start"]:m["end"]] == m["text"] for cluster in saved["clusters"] for m in cluster)
    assert lines[-1] == "EXIT 2", done.stdout[-2000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "out of memory resolving a window" in errors[0], done.stderr[-2000:]
    assert "lower --max_segment_words" in errors[0], errors[0]


def test_the_static_asl_attends_in_chunks_with_the_values_and_gradients_of_one_pass(monkeypatch):
    from corefbert.tasks.coref_e2e import encoders

    torch.manual_seed(3)
    module = encoders.StaticAttentionalSentenceLinking(6, 5, 7).eval()
    lengths = torch.tensor([3, 9, 1, 4, 2, 8, 5])  # one long sentence pads the others in one call
    words = torch.randn(len(lengths), int(lengths.max()), 6) * (torch.arange(9)[None, :, None] < lengths[:, None, None])

    def run(budget: int):
        monkeypatch.setattr(encoders, "CHUNK_ELEMENTS", budget)
        module.zero_grad()
        given = words.clone().requires_grad_(True)
        out = module(given, lengths)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        return out, {"words": given.grad, **{n: p.grad.clone() for n, p in module.named_parameters()}}

    whole, whole_grads = run(10**9)
    chunked, chunked_grads = run(9 * 9 * 7)  # one sentence a chunk, each cut to its own and its previous length
    torch.testing.assert_close(chunked, whole)
    for name, gradient in whole_grads.items():
        torch.testing.assert_close(chunked_grads[name], gradient, msg=name)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_resolve_with_the_static_asl_stays_under_a_memory_cap(tmp_path):
    """The static ASL's attention held sentences × longest sentence² × 150 floats at once, about
    0.9 MB per word of a window (1.9 GB for one 1,925-word chapter); the other encoders stay within a few
    hundred MB on the same text."""
    model = tmp_path / "m"
    train = ["--encoder", "asl", "--asl_variant", "static", *SMALL, "--train_file", str(FIXTURE), "--do_train",
             "--max_steps", "1", "--output_dir", str(model)]
    # 5,000 words in sentences of 5 to 64 words, every 40th of 160 (LitBank's longest): one window.
    base = "Anna met Tom at the station and she gave him the letter from her mother".split()
    sentences, total = [], 0
    while total < 5000:
        n = 160 if len(sentences) % 40 == 39 else 5 + (len(sentences) * 7) % 60
        sentences.append(" ".join(base[k % len(base)] for k in range(len(sentences), len(sentences) + n)) + ".")
        total += n
    story = tmp_path / "story.txt"
    story.write_text(" ".join(sentences), encoding="utf-8")
    resolve = lambda *extra: ["--model", str(model / "last"), "--spacy_model", "blank", *extra]  # noqa: E731
    setup = f"""
        from helpers import load_cli
        from corefbert.tasks.coref_e2e.resolve import main
        load_cli("finetune/run_coref_e2e.py").main({train!r})
        main({resolve("--text", "Anna met Tom. She gave him a letter.")!r})
    """
    work = f"""
        result = main({resolve("--input_file", str(story), "--output_dir", str(tmp_path / "view"))!r})
        print("CLUSTERS", len(result["clusters"]))
    """
    done = run_under_memory_cap(textwrap.dedent(setup) + "cap_memory()\n" + textwrap.dedent(work), headroom_mb=400,
                                timeout=800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1].startswith("CLUSTERS"), done.stdout[-2000:]


def test_windows_in_groups_give_the_states_and_gradients_of_one_encoder_call(tiny_bert_dir):
    from transformers import BertModel

    from corefbert.tasks.coref_e2e.encoders import window_word_states

    torch.manual_seed(0)
    encoder = BertModel.from_pretrained(str(tiny_bert_dir)).eval()  # no dropout: one call and groups compare
    input_ids = torch.randint(5, 500, (7, 16))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[-1, 9:] = 0  # the last window is shorter
    positions = torch.tensor([1, 3, 17, 40, 60, 81, 99, 100])

    def run(window_batch_size):
        encoder.zero_grad()
        states = window_word_states(encoder, input_ids, attention_mask, positions, window_batch_size)  # [8, H]
        states.square().sum().backward()
        return states.detach(), {n: p.grad.clone() for n, p in encoder.named_parameters() if p.grad is not None}

    whole, whole_grads = run(100)
    grouped, grouped_grads = run(2)  # 4 groups, each recomputed in the backward pass
    torch.testing.assert_close(grouped, whole)
    assert grouped_grads.keys() == whole_grads.keys() and len(whole_grads) > 10
    for name, gradient in whole_grads.items():
        torch.testing.assert_close(grouped_grads[name], gradient, msg=name)


@pytest.mark.timeout(600)
def test_a_bert_crop_of_many_windows_trains_under_a_memory_cap_and_one_encoder_call_is_one_line(tmp_path,
                                                                                                bert_tokenizer):
    # A 3,000-word crop is 19 windows of 512 tokens. Through the encoder at once, a BERT-base-sized model held
    # every window's activations until the backward pass: 18.7 GB peak RSS for one step; in groups of 4
    # (--window_batch_size), each recomputed in the backward pass, 6.0 GB. A 2-layer, 64-wide BERT shows the
    # same here: +630 MB at once, +100 MB in groups.
    from transformers import BertConfig, BertModel

    encoder = tmp_path / "bert"
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(bert_tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=128, max_position_embeddings=512,
                         pad_token_id=bert_tokenizer.pad_token_id)).save_pretrained(str(encoder))
    bert_tokenizer.save_pretrained(str(encoder))
    long_doc = tmp_path / "unbroken.conll"
    write_unbroken_conll(long_doc, 20_000)
    argv = lambda train, out, *extra: [  # noqa: E731
        "--encoder", "bert", "--model_name_or_path", str(encoder), "--ffnn_size", "32", "--max_antecedents", "50",
        "--max_span_width", "3", "--disable_tqdm", "--train_file", str(train), "--do_train", "--max_steps", "1",
        "--output_dir", str(out), *extra]
    setup = f"""
        import json
        from accelerate.state import AcceleratorState, GradientState
        from helpers import load_cli
        cli = load_cli("finetune/run_coref_e2e.py")
        def reset():
            AcceleratorState._reset_state(True)
            GradientState._reset_state()
        cli.main({argv(FIXTURE, tmp_path / "warm")!r})
        reset()
    """
    work = f"""
        print("RESULTS", json.dumps(cli.main({argv(long_doc, tmp_path / "grouped")!r})))
        reset()
        try:  # all 19 windows in one encoder call
            cli.main({argv(long_doc, tmp_path / "at_once", "--window_batch_size", "100")!r})
        except SystemExit as stop:
            print("EXIT", stop.code)
    """
    done = run_under_memory_cap(textwrap.dedent(setup) + "cap_memory()\n" + textwrap.dedent(work), headroom_mb=400,
                                timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    results = json.loads(next(line for line in lines if line.startswith("RESULTS"))[len("RESULTS "):])
    assert results["train_steps"] == 1
    assert lines[-1] == "EXIT 2", done.stdout[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "out of memory in training step 1" in errors[0], done.stderr[-2000:]
    assert "--window_batch_size, now 100" in errors[0] and "Traceback" not in done.stderr, errors[0]
