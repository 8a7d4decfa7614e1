"""DocRED: the reader's checks, features, the model, the CLI end to end."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from helpers import FIXTURES, ROOT, TOKENIZER_KINDS, fixture_tokenizer, running_text_words, shared_data

from corefbert.errors import CorefBertError
from corefbert.tasks.docred import (
    DocredDataset,
    DocredModel,
    distance_bucket,
    docred_collate,
    document_features,
    load_relation_ids,
    read_docred,
)

DOCRED = FIXTURES / "docred"


def _load(name):
    return json.loads((DOCRED / name).read_text(encoding="utf-8"))


def test_distance_buckets_are_signed_log_buckets():
    assert distance_bucket(np.array([0, 1, 2, 3, 4, 255, 256, 1000])).tolist() == [10, 11, 12, 12, 13, 18, 19, 19]
    assert distance_bucket(np.array([-1, -3, -300])).tolist() == [9, 8, 1]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda doc: doc["labels"].append({"h": 0, "t": 7, "r": "P17", "evidence": []}), "t=7 is not an entity"),
        (lambda doc: doc["vertexSet"][1][0].update(pos=[4, 9]), "beyond sentence 0"),
        (lambda doc: doc["vertexSet"][1][0].update(sent_id=5), "sent_id 5"),
        (lambda doc: doc["labels"].append({"h": 0, "t": 1, "r": "P999", "evidence": []}), "unknown relation id"),
    ],
)
def test_reader_rejects_bad_documents_with_one_line(tmp_path, edit, message):
    docs = _load("train.json")
    bad = copy.deepcopy(docs)
    edit(bad[0])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(CorefBertError, match=message) as info:
        read_docred(str(path), load_relation_ids(str(DOCRED / "rel_info.json")))
    assert "bad.json" in str(info.value) and "document 0 ('Anna Berg')" in str(info.value)
    assert "\n" not in str(info.value)


def test_relation_ids_put_na_first():
    assert load_relation_ids(str(DOCRED / "rel_info.json")) == ["Na", "P17", "P27", "P131"]


def _features(tokenizer, doc, **kwargs):
    relations = load_relation_ids(str(DOCRED / "rel_info.json"))
    options = dict(max_seq_length=512, sliding_window=False, stride=4) | kwargs
    return document_features(doc, tokenizer, relation_index={r: i for i, r in enumerate(relations)}, **options)


def test_features_map_mentions_to_their_tokens(bert_tokenizer):
    doc = _load("train.json")[0]
    feature = _features(bert_tokenizer, doc)
    words = [w for sent in doc["sents"] for w in sent]
    tokens = [t for _, ids in feature["windows"] for t in ids]
    for entity, spans in zip(doc["vertexSet"], feature["mention_spans"]):
        for mention, (start, end) in zip(entity, spans):
            mention_words = doc["sents"][mention["sent_id"]][slice(*mention["pos"])]
            expected = bert_tokenizer(mention_words, is_split_into_words=True, add_special_tokens=False)["input_ids"]
            assert tokens[start:end] == expected
    assert feature["first_positions"] == [0, 4, 11]  # word offsets: sentences of 6 and 7 words
    assert feature["labels"] == {(1, 2): [1], (0, 2): [2]}
    assert len(words) == 20


@pytest.mark.parametrize("kind", TOKENIZER_KINDS)
def test_documents_are_read_as_running_text_for_every_kind(kind):
    """One word-to-subword rule for every task (corefbert.text.tokenizers.word_pieces), where DocRED had
    its own probe of whether a tokenizer is space-sensitive."""
    tokenizer = fixture_tokenizer(kind)
    words = "Marta met Zygmunt Ösz at the harbour , and ( Zygmunt ) waved .".split()
    doc = {"title": "t", "sents": [words[:8], words[8:]], "labels": [],
           "vertexSet": [[{"name": "Zygmunt", "sent_id": 0, "pos": [2, 4], "type": "PER"},
                          {"name": "Zygmunt", "sent_id": 1, "pos": [2, 3], "type": "PER"}]]}
    feature = _features(tokenizer, doc)
    ids, spans = running_text_words(tokenizer, words)
    assert feature["windows"] == [(0, ids)]
    assert feature["mention_spans"] == [[(spans[2][0], spans[3][1] + 1), (spans[10][0], spans[10][1] + 1)]]


def test_truncation_drops_late_mentions_and_sliding_window_keeps_them(bert_tokenizer):
    doc = _load("train.json")[0]
    # A window of exactly sentence 0's subwords (plus [CLS]/[SEP]): Norway is only mentioned later.
    first_sentence = len(bert_tokenizer(doc["sents"][0], is_split_into_words=True, add_special_tokens=False)["input_ids"])
    short = _features(bert_tokenizer, doc, max_seq_length=first_sentence + 2)
    assert short["num_tokens"] == first_sentence and short["truncated_entities"] == 1
    assert [len(s) for s in short["mention_spans"]] == [1, 1, 0]
    slid = _features(bert_tokenizer, doc, max_seq_length=first_sentence + 2, sliding_window=True, stride=4)
    assert slid["truncated_entities"] == 0 and [len(s) for s in slid["mention_spans"]] == [2, 2, 2]
    covered = set()
    for offset, ids in slid["windows"]:
        assert len(ids) <= first_sentence
        covered.update(range(offset, offset + len(ids)))
    assert covered == set(range(slid["num_tokens"]))


def test_model_pools_tokens_and_is_window_invariant_on_short_documents(bert_tokenizer, tiny_bert_dir):
    from transformers import AutoModel

    torch.manual_seed(0)
    model = DocredModel(AutoModel.from_pretrained(str(tiny_bert_dir), add_pooling_layer=False), num_relations=4,
                        entity_hidden_size=8, distance_embedding_size=4).eval()
    docs = _load("dev.json")
    whole = [_features(bert_tokenizer, d) for d in docs]
    slid = [_features(bert_tokenizer, d, sliding_window=True) for d in docs]
    batch = docred_collate([DocredDataset(whole)[i] for i in range(2)], bert_tokenizer, 4)
    assert batch["labels"].shape == (2, 6, 4) and batch["pair_mask"].sum() == 6 + 2
    assert torch.allclose(batch["entity_weights"].sum(-1)[0], torch.ones(3))  # means of means sum to 1
    with torch.no_grad():
        out = model(**batch)
        again = model(**docred_collate([DocredDataset(slid)[i] for i in range(2)], bert_tokenizer, 4))
    assert out.logits.shape == (2, 6, 4) and torch.isfinite(out.loss)
    assert torch.allclose(out.logits, again.logits, atol=1e-6)
    # Gold labels: pair (0, 1) of "Karl Dahl" is P17 (column 1); NA pairs have column 0.
    pairs = DocredDataset(whole)[0]["pairs"]
    assert batch["labels"][0, pairs.index((0, 1))].tolist() == [0, 1, 0, 0]
    assert batch["labels"][0, pairs.index((1, 0))].tolist() == [1, 0, 0, 0]
    model.train()
    model(**batch).loss.backward()  # every parameter is used: no DDP "unused parameter" error
    assert [n for n, p in model.named_parameters() if p.grad is None] == []


def test_na_pairs_are_sampled_per_document():
    feature = {"mention_spans": [[(0, 1)]] * 4, "labels": {(0, 1): [1]}}
    sampled = DocredDataset([feature], num_na_pairs=2, seed=0)[0]["pairs"]
    assert len(sampled) == 3 and (0, 1) in sampled
    assert len(DocredDataset([feature], num_na_pairs=-1, seed=0)[0]["pairs"]) == 12


def _run_docred(argv):
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_docred", ROOT / "finetune" / "run_docred.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


@pytest.mark.slow
def test_cli_end_to_end_on_fixtures(tiny_bert_dir, tmp_path):
    out = tmp_path / "out"
    results = _run_docred([
        "--model_name_or_path", str(tiny_bert_dir), "--rel_info_file", str(DOCRED / "rel_info.json"),
        "--train_file", str(DOCRED / "train.json"), "--validation_file", str(DOCRED / "dev.json"),
        "--test_file", str(DOCRED / "dev.json"), "--do_train", "--do_eval", "--do_predict",
        "--output_dir", str(out), "--max_steps", "3", "--per_device_train_batch_size", "2",
        "--learning_rate", "1e-3", "--num_na_pairs", "2", "--disable_tqdm", "true", "--max_seq_length", "256",
    ])
    for key in ("eval_f1", "eval_ign_f1", "eval_threshold", "predict_f1", "train_loss"):
        assert key in results
    assert results["predict_threshold"] == results["eval_threshold"]  # chosen on dev, reused on test
    predictions = json.loads((out / "result.json").read_text())
    assert isinstance(predictions, list)
    for p in predictions:
        assert set(p) == {"title", "h_idx", "t_idx", "r"} and p["r"] in {"P17", "P27", "P131"}
    head = json.loads((out / "best" / "docred_head.json").read_text())
    assert head["relations"][0] == "Na"
    # The fine-tuned model predicts alone: relation classes and the dev threshold come with it.
    again = _run_docred(["--model_name_or_path", str(out / "best"), "--test_file", str(DOCRED / "dev.json"),
                         "--do_predict", "--output_dir", str(tmp_path / "again"), "--disable_tqdm", "true",
                         "--max_seq_length", "256"])
    assert again["predict_threshold"] == pytest.approx(head["threshold"])
    assert json.loads((tmp_path / "again" / "result.json").read_text()) == json.loads(
        (out / "best" / "eval_result.json").read_text())


def test_cli_reports_bad_input_in_one_line(tiny_bert_dir, tmp_path, capsys):
    bad = _load("dev.json")
    bad[1]["labels"][0]["h"] = 5
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        _run_docred(["--model_name_or_path", str(tiny_bert_dir), "--rel_info_file", str(DOCRED / "rel_info.json"),
                     "--validation_file", str(path), "--do_eval", "--output_dir", str(tmp_path / "out")])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "dev.json" in err and "h=5" in err and "\n" not in err


@pytest.mark.slow
@pytest.mark.shared_data
def test_real_redocred_reads_and_trains_a_few_steps(tiny_bert_dir, tmp_path):
    dev = shared_data("docred", "dev_revised.json")
    rel_info = shared_data("docred", "rel_info.json")
    relations = load_relation_ids(str(rel_info))
    docs = read_docred(str(dev), relations)
    assert len(relations) == 97 and len(docs) == 500
    subset = tmp_path / "subset.json"
    subset.write_text(json.dumps(docs[:6]), encoding="utf-8")
    results = _run_docred([
        "--model_name_or_path", str(tiny_bert_dir), "--rel_info_file", str(rel_info), "--train_file", str(subset),
        "--split_seed", "1", "--validation_split_percentage", "34", "--do_train", "--do_eval",
        "--output_dir", str(tmp_path / "out"), "--max_steps", "1", "--per_device_train_batch_size", "4",
        "--num_na_pairs", "4", "--sliding_window", "true", "--max_seq_length", "256", "--disable_tqdm", "true",
    ])
    assert results["eval_num_gold"] > 0 and results["eval_truncated_entities"] == 0


def test_bilinear_scores_equal_torch_bilinear():
    from corefbert.tasks.docred import bilinear_scores

    torch.manual_seed(0)
    layer = torch.nn.Bilinear(6, 6, 5)
    heads, tails = torch.randn(2, 3, 6, requires_grad=True), torch.randn(2, 3, 6, requires_grad=True)
    expected = layer(heads, tails)
    expected_grads = torch.autograd.grad(expected.square().sum(), (heads, tails, layer.weight, layer.bias))
    # 30 floats: one pair per chunk (checkpointed: recomputed in the backward pass), as a long batch runs.
    for budget in (10**9, 30):
        scores = bilinear_scores(heads, tails, layer.weight, layer.bias, budget=budget)
        assert torch.allclose(scores, expected, atol=1e-5)
        grads = torch.autograd.grad(scores.square().sum(), (heads, tails, layer.weight, layer.bias))
        assert all(torch.allclose(g, e, atol=1e-5) for g, e in zip(grads, expected_grads))


def test_reader_turns_a_missing_field_into_one_line(tmp_path):
    docs = _load("train.json")
    del docs[1]["vertexSet"][2][0]["pos"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(docs), encoding="utf-8")
    with pytest.raises(CorefBertError, match=r"bad.json:document 1 \('Lake Tana'\): malformed .*KeyError: 'pos'"):
        read_docred(str(path), load_relation_ids(str(DOCRED / "rel_info.json")))


def test_cli_fine_tunes_two_steps_with_every_family(family_dir, tmp_path):
    """DocRED on a tiny random checkpoint of each encoder family (words to subwords by the word rule,
    windows framed by the family's special tokens): 2 steps and evaluation; the encoder saved loads whole."""
    from transformers import AutoModel

    out = tmp_path / "out"
    results = _run_docred([
        "--model_name_or_path", str(family_dir), "--rel_info_file", str(DOCRED / "rel_info.json"),
        "--train_file", str(DOCRED / "train.json"), "--validation_file", str(DOCRED / "dev.json"), "--do_train",
        "--do_eval", "--output_dir", str(out), "--max_steps", "2", "--per_device_train_batch_size", "2",
        "--num_na_pairs", "2", "--disable_tqdm", "true", "--max_seq_length", "256",
    ])
    assert results["train_steps"] == 2 and np.isfinite(results["train_loss"]) and 0.0 <= results["eval_f1"] <= 100.0
    _, info = AutoModel.from_pretrained(str(out / "best"), output_loading_info=True)
    assert not info["missing_keys"]
