"""QUOREF: reader, windows (BERT and RoBERTa tokenizers), count labels, decoding, model, CLI end to end."""

from __future__ import annotations

import importlib.util
import json
import logging

import numpy as np
import pytest
import torch
from helpers import FIXTURES, ROOT

from corefbert.errors import CorefBertError
from corefbert.tasks.qa.data import AnswerSpan, QAExample, read_qa_file, read_squad_json
from corefbert.tasks.qa.models import QuorefQAModel, SpanQAModel
from corefbert.tasks.qa.windows import build_windows, collate_windows, decode_answers, pick_spans

FIXTURE = FIXTURES / "quoref" / "quoref_tiny.json"


# Local tokenizers and tiny models: under transformers 5 the conftest tokenizers pass ``vocab_file=``,
# which is ignored, leaving a 5-token vocabulary (every BERT word [UNK], RoBERTa text encodes to nothing).
@pytest.fixture(scope="session")
def wp_tokenizer(tmp_path_factory):
    """WordPiece (BERT-style, uncased) trained on the shared fixture text, saved and reloaded."""
    from helpers import training_text
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast

    out = tmp_path_factory.mktemp("qa_wordpiece")
    trainer = BertWordPieceTokenizer(lowercase=True)
    trainer.train_from_iterator(training_text(), vocab_size=600, min_frequency=1)
    trainer.save_model(str(out))
    BertTokenizerFast(vocab=str(out / "vocab.txt"), do_lower_case=True).save_pretrained(str(out))
    return BertTokenizerFast.from_pretrained(str(out))


@pytest.fixture(scope="session")
def bpe_tokenizer(tmp_path_factory):
    """Byte-level BPE (RoBERTa-style) trained on the shared fixture text, saved and reloaded."""
    from helpers import training_text
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaTokenizerFast

    out = tmp_path_factory.mktemp("qa_bytelevel")
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(training_text(), vocab_size=700, min_frequency=1,
                                special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    trainer.save_model(str(out))
    RobertaTokenizerFast(vocab=str(out / "vocab.json"), merges=str(out / "merges.txt")).save_pretrained(str(out))
    return RobertaTokenizerFast.from_pretrained(str(out))


def _tiny_dir(tmp_path_factory, model_type, tokenizer):
    from helpers import tiny_config
    from transformers import BertModel, RobertaModel

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp(f"qa_tiny_{model_type}")
    model_class = BertModel if model_type == "bert" else RobertaModel
    model_class(tiny_config(model_type, tokenizer)).save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


@pytest.fixture(scope="session")
def bert_dir(tmp_path_factory, wp_tokenizer):
    return _tiny_dir(tmp_path_factory, "bert", wp_tokenizer)


@pytest.fixture(scope="session")
def roberta_dir(tmp_path_factory, bpe_tokenizer):
    return _tiny_dir(tmp_path_factory, "roberta", bpe_tokenizer)


TOKENIZERS = {"bert": "wp_tokenizer", "roberta": "bpe_tokenizer"}


def test_reader_multi_span_realigns_and_skips(caplog):
    with caplog.at_level(logging.WARNING):
        examples = {ex.qid: ex for ex in read_squad_json(str(FIXTURE))}
    assert list(examples) == ["q-single", "q-multi", "q-end", "q-shifted", "q-missing"]
    multi = examples["q-multi"]
    assert [a.text for a in multi.answers] == ["Desmond", "Marta"] and multi.gold_texts == ["Desmond", "Marta"]
    shifted = examples["q-shifted"]
    # the offset is 7 characters past the second "Ilse": aligned to that occurrence, not the first
    assert shifted.answers[0].start == shifted.context.index("Ilse", 30)
    assert examples["q-missing"].answers == [] and examples["q-missing"].gold_texts == ["Zebulon"]
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert "1 answer offset(s) did not match" in warnings and "1 answer(s) not found" in warnings


def test_reader_rejects_what_is_not_squad_shaped(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "x", "qas": [{"question": "q?"}]}]}]}))
    with pytest.raises(CorefBertError, match=r"bad.json:data\[0\].paragraphs\[0\].qas\[0\]: a question without"):
        read_squad_json(str(bad))
    bad.write_text("[1, 2]")
    with pytest.raises(CorefBertError, match='no top-level "data" list'):
        read_squad_json(str(bad))
    bad.write_text("{not json")
    with pytest.raises(CorefBertError, match=r"bad.json:1:2: not valid JSON"):
        read_qa_file(str(bad))


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_windows_map_answers_and_use_the_tokenizers_own_special_tokens(request, model_type):
    tokenizer = request.getfixturevalue(TOKENIZERS[model_type])
    examples = read_squad_json(str(FIXTURE))
    windows = build_windows(examples, tokenizer, max_seq_length=48, doc_stride=16, max_query_length=12)
    assert len(windows) > 2 * len(examples)  # long contexts really are cut
    found = {ex.qid: set() for ex in examples}
    for window in windows:
        example = examples[window["example_index"]]
        assert len(window["input_ids"]) <= 48
        assert window["input_ids"][0] == tokenizer.cls_token_id and window["input_ids"][-1] == tokenizer.sep_token_id
        for start, end in zip(window["answer_starts"], window["answer_ends"]):
            if start == 0:
                assert end == 0 and window["answer_count"] == 0
                continue
            text = example.context[window["offsets"][start][0] : window["offsets"][end][1]]
            found[example.qid].add(text)
        assert window["answer_count"] == len([s for s in window["answer_starts"] if s > 0])
    assert found["q-multi"] == {"Desmond", "Marta"} and found["q-end"] == {"Kellan"} and found["q-missing"] == set()


def test_windows_step_by_doc_stride_and_truncate_questions(wp_tokenizer):
    context = " ".join(f"w{i}" for i in range(60))
    example = QAExample("q", "which one of these many words is the answer to this long question", context,
                        [AnswerSpan(context.index("w40"), context.index("w40") + 3, "w40")], ["w40"])
    windows = build_windows([example], wp_tokenizer, max_seq_length=40, doc_stride=10, max_query_length=5)
    assert all(w["input_ids"].index(wp_tokenizer.sep_token_id) - 1 == 5 for w in windows)  # [CLS] q(5) [SEP]
    firsts = [next(w["offsets"][i][0] for i in range(len(w["offsets"])) if w["offsets"][i][0] >= 0) for w in windows]
    context_tokens = wp_tokenizer(context, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    starts = [s for s, _ in context_tokens]
    window_token_starts = [starts.index(f) for f in firsts]
    assert all(b - a == 10 for a, b in zip(window_token_starts, window_token_starts[1:]))
    assert windows[-1]["offsets"][-2][1] == len(context)  # the last window reaches the end


def test_count_label_is_clipped_to_two_and_said(wp_tokenizer, caplog):
    context = "Anna met Bert and Carl and Dora at the harbour."
    spans = [AnswerSpan(context.index(n), context.index(n) + 4, n) for n in ("Anna", "Bert", "Carl")]
    example = QAExample("q", "who met?", context, spans, [s.text for s in spans])
    with caplog.at_level(logging.WARNING):
        (window,) = build_windows([example], wp_tokenizer, max_seq_length=64)
    assert window["answer_count"] == 2 and len(window["answer_starts"]) == 3
    assert "clipped to 2" in caplog.text
    batch = collate_windows([window, window | {"answer_starts": [0], "answer_ends": [0]}], wp_tokenizer.pad_token_id)
    assert batch["answer_starts"].tolist()[1] == [0, -100, -100]


def test_decoding_picks_non_overlapping_spans_across_windows():
    context = "Anna met Bert near the harbour."
    assert pick_spans([(9.0, 0, 8), (8.0, 0, 4), (7.0, 9, 13), (6.0, 9, 13)], context, 2) == ["Anna met", "Bert"]
    # two windows of one example, offsets for tokens: [CLS] Anna met | Bert near
    windows = [
        {"example_index": 0, "offsets": [[-1, -1], [0, 4], [5, 8], [-1, -1]]},
        {"example_index": 0, "offsets": [[-1, -1], [9, 13], [14, 18], [-1, -1]]},
    ]
    start = np.array([[0, 5.0, 0, 0], [0, 4.0, 0, 0]])
    end = np.array([[0, 5.0, 0, 0], [0, 4.0, 0, 0]])
    examples = [QAExample("q", "who?", context)]
    two = np.array([[0.0, 0.0, 3.0], [0.0, 3.0, 0.0]])  # the best span's window predicts 2 answers
    assert decode_answers(examples, windows, start, end, two, multi_span=True) == {"q": ["Anna", "Bert"]}
    assert decode_answers(examples, windows, start, end, None, multi_span=True) == {"q": ["Anna"]}
    assert decode_answers(examples, windows, start, end, max_answer_length=1) == {"q": "Anna"}


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_model_loss_switches_and_save_load_round_trip(request, tmp_path, model_type, caplog):
    backbone = request.getfixturevalue(f"{model_type}_dir")
    tokenizer = request.getfixturevalue(TOKENIZERS[model_type])
    windows = build_windows(read_squad_json(str(FIXTURE)), tokenizer, max_seq_length=64, doc_stride=32)
    batch = collate_windows(windows[:4], tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = QuorefQAModel.from_pretrained(str(backbone)).eval()
    out = model(**batch)
    # loss = sum over gold spans of (CE_start + CE_end) / 2, averaged over windows, + count CE
    log_start, log_end = out.start_logits.log_softmax(-1), out.end_logits.log_softmax(-1)
    expected = 0.0
    for row in range(4):
        for s, e in zip(batch["answer_starts"][row], batch["answer_ends"][row]):
            if s >= 0:
                expected -= (log_start[row, s] + log_end[row, e]) / 2 / 4
    expected += torch.nn.functional.cross_entropy(out.count_logits, batch["answer_count"])
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert torch.all(out.start_logits[batch["attention_mask"] == 0] < -1e30)

    model.save_pretrained(str(tmp_path))
    again = QuorefQAModel.from_pretrained(str(tmp_path), reasoning_layer=False, count_head=False).eval()
    assert again.reasoning is not None and again.count_outputs is not None  # the saved options win
    assert "its saved heads are used" in caplog.text
    torch.testing.assert_close(again(**batch).start_logits, out.start_logits)
    plain = QuorefQAModel.from_pretrained(str(backbone), reasoning_layer=False, count_head=False)
    assert plain.reasoning is None and plain.count_outputs is None and plain(**batch).count_logits is None


def test_accepts_a_corefbert_pretraining_checkpoint(tmp_path, wp_tokenizer):
    from helpers import tiny_config

    from corefbert.pretraining.modeling import CorefBertForPreTraining

    pretrained = CorefBertForPreTraining(tiny_config("bert", wp_tokenizer))
    pretrained.save_pretrained(str(tmp_path))
    embeddings = pretrained.bert.embeddings.word_embeddings.weight
    quoref = QuorefQAModel.from_pretrained(str(tmp_path))
    torch.testing.assert_close(quoref.encoder.embeddings.word_embeddings.weight, embeddings)
    mrqa = SpanQAModel.from_pretrained(str(tmp_path))
    torch.testing.assert_close(mrqa.qa.bert.embeddings.word_embeddings.weight, embeddings)


def run_cli(script: str, *args: str) -> dict:
    """Run ``finetune/<script>``'s ``main`` in this process (no second interpreter start-up)."""
    spec = importlib.util.spec_from_file_location(script[:-3], ROOT / "finetune" / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(list(args))


@pytest.mark.slow
def test_cli_end_to_end_on_the_fixture(tmp_path, bert_dir):
    out = tmp_path / "out"
    run_cli(
        "run_quoref.py", "--model_name_or_path", str(bert_dir), "--train_file", str(FIXTURE),
        "--validation_file", str(FIXTURE), "--test_file", str(FIXTURE), "--do_train", "--do_eval", "--do_predict",
        "--max_seq_length", "64", "--doc_stride", "32", "--max_steps", "3", "--per_device_train_batch_size", "8",
        "--learning_rate", "1e-3", "--output_dir", str(out), "--disable_tqdm",
    )
    results = json.loads((out / "all_results.json").read_text())
    assert 0.0 <= results["eval_f1"] <= 100.0 and results["eval_total"] == 5
    predictions = json.loads((out / "eval_predictions.json").read_text())
    assert set(predictions) == {"q-single", "q-multi", "q-end", "q-shifted", "q-missing"}
    assert all(isinstance(p, list) and 1 <= len(p) <= 2 and all(isinstance(s, str) for s in p) for p in predictions.values())
    assert (out / "predict_predictions.json").is_file()
    assert (out / "best" / "quoref_head.safetensors").is_file()


def test_cli_bad_input_is_one_line(tmp_path, bert_dir, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": "1"}))
    with pytest.raises(SystemExit) as exit_info:
        run_cli("run_quoref.py", "--model_name_or_path", str(bert_dir), "--train_file", str(bad),
                "--do_train", "--max_seq_length", "64", "--output_dir", str(tmp_path / "out"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and 'bad.json:root: no top-level "data" list' in err[-1]


@pytest.mark.shared_data
def test_real_quoref_sample_reads_and_trains_a_few_steps(tmp_path, bert_dir):
    from helpers import shared_data

    sample = shared_data("quoref", "quoref_sample.json")
    examples = read_squad_json(str(sample))
    assert len(examples) == 4 and all(ex.answers for ex in examples)
    out = tmp_path / "out"
    results = run_cli(
        "run_quoref.py", "--model_name_or_path", str(bert_dir), "--train_file", str(sample),
        "--validation_file", str(sample), "--do_train", "--max_seq_length", "128", "--max_steps", "2",
        "--per_device_train_batch_size", "4", "--output_dir", str(out), "--disable_tqdm",
    )
    assert results["train_steps"] == 2 and 0.0 <= results["best_eval_f1"] <= 100.0
    assert len(json.loads((out / "best" / "eval_predictions.json").read_text())) == 4


def test_context_offsets_carry_no_space_with_every_tokenizer_kind(kind_tokenizer):
    """ModernBERT's byte-level BPE and DeBERTa-v3's SentencePiece keep the space a token carries in its
    offsets; the windows' context offsets are trimmed, so a gold answer reads back as its own text and no decoded
    answer starts with a space (a lone space piece is no answer edge)."""
    examples = read_squad_json(str(FIXTURE))
    windows = build_windows(examples, kind_tokenizer, max_seq_length=48, doc_stride=16, max_query_length=12)
    found = {ex.qid: set() for ex in examples}
    for window in windows:
        context = examples[window["example_index"]].context
        pieces = [context[a:b] for a, b in window["offsets"] if a >= 0]
        assert pieces and all(piece and piece == piece.strip() for piece in pieces)
        for start, end in zip(window["answer_starts"], window["answer_ends"]):
            if start:
                found[examples[window["example_index"]].qid].add(
                    context[window["offsets"][start][0]:window["offsets"][end][1]])
    assert found["q-multi"] == {"Desmond", "Marta"} and found["q-end"] == {"Kellan"} and found["q-missing"] == set()


def test_cli_fine_tunes_two_steps_and_predicts_with_every_family(tmp_path, family_dir):
    """The paper's QUOREF model (reasoning layer + count head) on a tiny random checkpoint of each encoder
    family: 2 steps, evaluation and prediction from the saved best folder, which ``AutoModel`` loads whole."""
    from safetensors import safe_open
    from transformers import AutoModel

    out = tmp_path / "out"
    results = run_cli(
        "run_quoref.py", "--model_name_or_path", str(family_dir), "--train_file", str(FIXTURE),
        "--validation_file", str(FIXTURE), "--test_file", str(FIXTURE), "--do_train", "--do_eval", "--do_predict",
        "--max_seq_length", "64", "--doc_stride", "32", "--max_steps", "2", "--per_device_train_batch_size", "8",
        "--learning_rate", "1e-3", "--output_dir", str(out), "--disable_tqdm",
    )
    assert results["train_steps"] == 2 and results["eval_total"] == 5 and 0.0 <= results["eval_f1"] <= 100.0
    contexts = {ex.qid: ex.context for ex in read_squad_json(str(FIXTURE))}
    for name in ("eval_predictions.json", "predict_predictions.json"):
        predictions = json.loads((out / name).read_text())
        assert set(predictions) == set(contexts)
        for qid, spans in predictions.items():
            assert 1 <= len(spans) <= 2 and all(s and s == s.strip() and s in contexts[qid] for s in spans), spans
    with safe_open(str(out / "best" / "quoref_head.safetensors"), framework="pt") as head:
        assert any(key.startswith("reasoning.") for key in head.keys()) and "count_outputs.weight" in head.keys()
    _, info = AutoModel.from_pretrained(str(out / "best"), output_loading_info=True)
    assert not info["missing_keys"]
