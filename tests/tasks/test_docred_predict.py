"""DocRED --do_predict streams: the test split's facts are written and counted batch by
batch, so its memory is bounded by the batch settings, not by the number of documents, and the file and
the scores are those of collecting every prediction first."""

from __future__ import annotations

import json

import pytest
from helpers import FIXTURES, load_cli, run_under_memory_cap

from corefbert.metrics.docred import docred_scores, training_facts

DOCRED = FIXTURES / "docred"


def test_streamed_predictions_equal_the_collected_ones(tmp_path, tiny_bert_dir):
    """The same file through --do_eval (collected, fixed threshold) and --do_predict (streamed, one document
    per batch): byte-identical files, and the streamed counts give docred_scores' F1 and Ign F1."""
    out = tmp_path / "out"
    results = load_cli("finetune/run_docred.py").main([
        "--model_name_or_path", str(tiny_bert_dir), "--rel_info_file", str(DOCRED / "rel_info.json"),
        "--train_file", str(DOCRED / "train.json"), "--validation_file", str(DOCRED / "dev.json"),
        "--test_file", str(DOCRED / "dev.json"), "--do_eval", "--do_predict", "--threshold", "0.3",
        "--per_device_eval_batch_size", "1", "--max_seq_length", "256", "--output_dir", str(out),
        "--disable_tqdm", "true"])
    streamed = (out / "result.json").read_bytes()
    assert streamed == (out / "eval_result.json").read_bytes()
    assert not (out / "result.json.partial").exists()
    predictions = json.loads(streamed)
    assert len(predictions) > 3  # an untrained model above 0.3: facts of both documents
    dev = json.loads((DOCRED / "dev.json").read_text(encoding="utf-8"))
    train = json.loads((DOCRED / "train.json").read_text(encoding="utf-8"))
    expected = docred_scores(predictions, dev, training_facts(train))
    for key in ("precision", "recall", "f1", "ign_precision", "ign_f1", "num_predicted", "num_correct"):
        assert results[f"predict_{key}"] == pytest.approx(expected[key]) == results[f"eval_{key}"], key


_PREDICT = """
import sys
from corefbert.tasks.docred import DocredTask  # imported before the cap: only the run is measured
from corefbert.tasks.base import main
argv = sys.argv[1:]
cap_memory()
results = main(DocredTask, argv, prog="run_docred.py")
print("predicted", int(results["predict_num_predicted"]))
"""


def test_prediction_memory_does_not_grow_with_the_number_of_documents(tmp_path, tiny_bert_dir):
    """80 documents of 20 entities, 96 relations, an untrained model: about half of the 2.9 M pair x
    relation facts pass the 0.5 threshold. Collected before writing they took 1,130 MB of address space
    more than the model run (4.7 GB on the 500 Re-DocRED dev documents); streamed, the run stays within
    650 MB (it measured 455 MB with 20 documents and with 80)."""
    words = [f"w{i % 50}" for i in range(60)]
    documents = [{"title": f"document {d}", "sents": [words],
                  "vertexSet": [[{"name": words[3 * e], "sent_id": 0, "pos": [3 * e, 3 * e + 1], "type": "PER"}]
                                for e in range(20)],
                  "labels": [{"h": 0, "t": 1, "r": "P1", "evidence": [0]}]} for d in range(80)]
    test_file, rel_info = tmp_path / "test.json", tmp_path / "rel_info.json"
    test_file.write_text(json.dumps(documents), encoding="utf-8")
    rel_info.write_text(json.dumps({f"P{i}": f"relation {i}" for i in range(1, 97)}), encoding="utf-8")
    argv = ["--model_name_or_path", str(tiny_bert_dir), "--rel_info_file", str(rel_info), "--test_file",
            str(test_file), "--do_predict", "--entity_hidden_size", "8", "--distance_embedding_size", "4",
            "--max_seq_length", "128", "--output_dir", str(tmp_path / "out"), "--disable_tqdm", "true"]
    done = run_under_memory_cap(_PREDICT.replace("sys.argv[1:]", repr(argv)), headroom_mb=650)
    assert done.returncode == 0, done.stderr[-2000:]
    predicted = int(done.stdout.split("predicted ")[-1])
    assert predicted > 1_000_000
    # The file holds them all (counted in pieces: loading 1.5 M dicts here would cost more than the run).
    items, tail = 0, b""
    with open(tmp_path / "out" / "result.json", "rb") as handle:
        while piece := handle.read(1 << 20):
            items += (tail + piece).count(b'{"title"')  # tail: 7 bytes, too short to hold a whole match
            tail = (tail + piece)[-7:]
    assert items == predicted and tail.endswith(b"}]")


def test_a_batch_holding_a_document_of_many_entities_predicts_within_a_fixed_memory(tmp_path, tiny_bert_dir):
    """The peak grew with the number of documents (1.16 GB for 100 of Re-DocRED's 500 held-out
    documents, 1.71 GB for all) because it is set by the batch whose largest document has the most entity
    pairs: every document of a batch is padded to that many pairs, and the bilinear scorer held an
    [pairs x 97 relations x 148] intermediate (57 KB a pair). Here one document of 60 entities (3,540 pairs)
    among 7 small ones in a batch of 8 asked for 1.5 GiB at once; scored 64 MiB at a time, the run stays within
    650 MB. Documents and their features stay loaded for the run (about 0.1 MB a Re-DocRED document)."""
    words = [f"w{i % 50}" for i in range(200)]

    def document(number: int, entities: int) -> dict:
        return {"title": f"document {number}", "sents": [words],
                "vertexSet": [[{"name": words[3 * e], "sent_id": 0, "pos": [3 * e, 3 * e + 1], "type": "PER"}]
                              for e in range(entities)],
                "labels": [{"h": 0, "t": 1, "r": "P1", "evidence": [0]}]}

    documents = [document(d, 5) for d in range(7)] + [document(7, 60)]
    test_file, rel_info = tmp_path / "test.json", tmp_path / "rel_info.json"
    test_file.write_text(json.dumps(documents), encoding="utf-8")
    rel_info.write_text(json.dumps({f"P{i}": f"relation {i}" for i in range(1, 97)}), encoding="utf-8")
    # The paper's entity and distance sizes (128 + 20): the intermediate is pairs x relations x their sum.
    argv = ["--model_name_or_path", str(tiny_bert_dir), "--rel_info_file", str(rel_info), "--test_file",
            str(test_file), "--do_predict", "--per_device_eval_batch_size", "8", "--max_seq_length", "256",
            "--output_dir", str(tmp_path / "out"), "--disable_tqdm", "true"]
    done = run_under_memory_cap(_PREDICT.replace("sys.argv[1:]", repr(argv)), headroom_mb=650)
    assert done.returncode == 0, done.stderr[-2000:]
    predicted = int(done.stdout.split("predicted ")[-1])
    written = json.loads((tmp_path / "out" / "result.json").read_text(encoding="utf-8"))
    assert len(written) == predicted > 60_000  # an untrained model: about half of the 3,540 x 96 facts and more
    assert {fact["title"] for fact in written} >= {"document 7"}
