"""DocRED --sliding_window: the windows cover every token (the special tokens accounted for), the stride
is checked, and the windows go through the encoder in bounded batches equal to encoding each alone, in
training too (a long document's training memory grew with its length)."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import FIXTURES, run_under_memory_cap

from corefbert.errors import CorefBertError
from corefbert.tasks.base import FinetuningArguments
from corefbert.tasks.docred import (
    DocredArguments,
    DocredDataset,
    DocredModel,
    DocredTask,
    docred_collate,
    document_features,
    load_relation_ids,
)
from corefbert.text.tokenizers import special_token_frame

DOCRED = FIXTURES / "docred"
REL_INFO = str(DOCRED / "rel_info.json")


def _long_document(sentences: int) -> dict:
    """``sentences`` copies of the first fixture document's sentences; its entities mentioned in the first
    and last copy (labels kept)."""
    doc = json.loads((DOCRED / "train.json").read_text(encoding="utf-8"))[0]
    sents = [sent for _ in range(sentences) for sent in doc["sents"]]
    last = len(sents) - len(doc["sents"])
    entities = [entity + [{**m, "sent_id": m["sent_id"] + last} for m in entity] for entity in doc["vertexSet"]]
    return {**doc, "sents": sents, "vertexSet": entities}


def _task(tmp_path, model_dir, **options) -> DocredTask:
    train = tmp_path / "train.json"
    train.write_text(json.dumps([_long_document(40)]), encoding="utf-8")
    args = DocredArguments(train_file=str(train), rel_info_file=REL_INFO, sliding_window=True, **options)
    return DocredTask(args, FinetuningArguments(model_name_or_path=str(model_dir), output_dir=str(tmp_path / "out"),
                                                do_train=True))


def _covered(feature) -> set[int]:
    return {offset + j for offset, ids in feature["windows"] for j in range(len(ids))}


@pytest.mark.parametrize("max_seq_length", [256, 64, 17])
def test_default_stride_encodes_every_token(tmp_path, tiny_bert_dir, max_seq_length):
    """At --max_seq_length 256 the old default stride (256) stepped past the 254 tokens a window holds."""
    task = _task(tmp_path, tiny_bert_dir, max_seq_length=max_seq_length)
    (feature,) = task.train_dataset().features
    content = max_seq_length - sum(map(len, special_token_frame(task.tokenizer)))
    assert feature["num_tokens"] > 2 * content and len(feature["windows"]) > 2
    assert all(len(ids) == content for _, ids in feature["windows"])
    assert _covered(feature) == set(range(feature["num_tokens"]))
    assert feature["truncated_entities"] == 0


@pytest.mark.parametrize("stride, message", [
    (0, "--window_stride 0 must lie in 1..254"),
    (-3, "--window_stride -3 must lie in 1..254"),
    (255, "--window_stride 255 must lie in 1..254: a window holds 254 tokens"),
])
def test_a_stride_that_skips_tokens_is_one_error_line(tmp_path, tiny_bert_dir, stride, message):
    with pytest.raises(CorefBertError, match=message) as err:
        _task(tmp_path, tiny_bert_dir, max_seq_length=256, window_stride=stride)
    assert "\n" not in str(err.value)
    with pytest.raises(CorefBertError, match="--window_batch_size 0 must be at least 1"):
        _task(tmp_path, tiny_bert_dir, max_seq_length=256, window_batch_size=0)


def _model(model_dir, window_batch_size):
    from transformers import AutoModel

    torch.manual_seed(0)
    encoder = AutoModel.from_pretrained(str(model_dir), add_pooling_layer=False)
    return DocredModel(encoder, num_relations=4, entity_hidden_size=8, distance_embedding_size=4,
                       window_batch_size=window_batch_size).eval()


def _batch(tokenizer, docs, max_seq_length, stride=None):
    relations = load_relation_ids(REL_INFO)
    features = [document_features(doc, tokenizer, max_seq_length, True, stride, {r: i for i, r in enumerate(relations)})
                for doc in docs]
    dataset = DocredDataset(features)
    return features, docred_collate([dataset[i] for i in range(len(features))], tokenizer, len(relations))


def test_batched_windows_equal_each_window_encoded_alone(bert_tokenizer, tiny_bert_dir):
    model = _model(tiny_bert_dir, window_batch_size=3)
    docs = [_long_document(6), _long_document(2)]  # windows of unequal count and length across documents
    features, batch = _batch(bert_tokenizer, docs, max_seq_length=24, stride=7)
    prefix, suffix = special_token_frame(bert_tokenizer)
    num_tokens = batch["entity_weights"].shape[-1]
    with torch.no_grad():
        tokens = model.token_states(batch["input_ids"], batch["attention_mask"], batch["token_index"], 2, num_tokens)
        # The literal reference: every window alone, unpadded; a token's vector is the mean over its windows.
        for b, feature in enumerate(features):
            vectors: dict[int, list[torch.Tensor]] = {}
            for offset, ids in feature["windows"]:
                hidden = model.encoder(input_ids=torch.tensor([prefix + list(ids) + suffix])).last_hidden_state[0]
                for j in range(len(ids)):
                    vectors.setdefault(offset + j, []).append(hidden[len(prefix) + j])
            assert sorted(vectors) == list(range(feature["num_tokens"]))  # every token is in a window
            reference = torch.stack([torch.stack(vectors[t]).mean(0) for t in range(feature["num_tokens"])])
            torch.testing.assert_close(tokens[b, :feature["num_tokens"]], reference, atol=1e-5, rtol=1e-5)
        # The same result in one chunk as in chunks of 3: the batching changes memory, not numbers.
        model.window_batch_size = 1000
        whole = model.token_states(batch["input_ids"], batch["attention_mask"], batch["token_index"], 2, num_tokens)
    torch.testing.assert_close(tokens, whole, atol=1e-5, rtol=1e-5)


def test_a_long_document_reaches_the_encoder_at_most_n_windows_at_a_time(bert_tokenizer, tiny_bert_dir):
    model = _model(tiny_bert_dir, window_batch_size=4)
    _, batch = _batch(bert_tokenizer, [_long_document(60)], max_seq_length=32)
    windows = batch["input_ids"].shape[0]
    assert windows > 20
    seen = []
    encode = model.encoder.forward

    def recording(*args, **kwargs):
        seen.append(kwargs["input_ids"].shape[0])
        return encode(*args, **kwargs)

    model.encoder.forward = recording
    with torch.no_grad():
        out = model(**batch)
    assert max(seen) <= 4 and sum(seen) == windows and torch.isfinite(out.logits).all()
    model.train()
    model(**batch).loss.backward()  # training goes through the same chunks; every parameter gets a gradient
    assert [n for n, p in model.named_parameters() if p.grad is None] == []


def test_training_gradients_do_not_depend_on_the_window_batch(bert_tokenizer, tiny_bert_dir):
    """Chunks recomputed in the backward pass (window batch 3) give the loss and gradients of one chunk."""
    _, batch = _batch(bert_tokenizer, [_long_document(6), _long_document(2)], max_seq_length=24, stride=7)
    assert batch["input_ids"].shape[0] > 3
    results = []
    for window_batch_size in (3, 1000):
        model = _model(tiny_bert_dir, window_batch_size)  # eval(): no dropout, so the two runs can agree
        loss = model(**batch).loss
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}))
    (loss, grads), (whole_loss, whole_grads) = results
    torch.testing.assert_close(loss, whole_loss, atol=1e-6, rtol=1e-5)
    assert grads.keys() == whole_grads.keys() and any(n.startswith("encoder.") for n in grads)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, whole_grads[name], atol=1e-6, rtol=1e-4, msg=name)


_TRAIN_ONE_LONG_DOCUMENT = """
import json, sys
from transformers import AutoModel, AutoTokenizer
from corefbert.tasks.docred import DocredDataset, DocredModel, docred_collate, document_features, load_relation_ids
model_dir, document, rel_info = sys.argv[1:]
tokenizer = AutoTokenizer.from_pretrained(model_dir)
relations = load_relation_ids(rel_info)
with open(document, encoding="utf-8") as handle:
    feature = document_features(json.load(handle), tokenizer, 128, True, None, {r: i for i, r in enumerate(relations)})
batch = docred_collate([DocredDataset([feature])[0]], tokenizer, len(relations))
encoder = AutoModel.from_pretrained(model_dir, add_pooling_layer=False)
model = DocredModel(encoder, len(relations), 8, 4, window_batch_size=8).train()
cap_memory()
model(**batch).loss.backward()
print("windows", batch["input_ids"].shape[0])
"""


def test_training_on_a_long_document_is_bounded_by_the_window_batch(tmp_path, tiny_bert_dir):
    """10,000 words in 285 windows of 128 tokens, one training step: before the checkpointed chunks autograd kept every
    window's activations (about 370 MB more here, 6.4 GB for 100k words with a real encoder); now the
    windows are recomputed 8 at a time in the backward pass and the step fits in 150 MB over the model."""
    document = tmp_path / "long.json"
    document.write_text(json.dumps(_long_document(500)), encoding="utf-8")
    code = _TRAIN_ONE_LONG_DOCUMENT.replace("sys.argv[1:]", repr([str(tiny_bert_dir), str(document), REL_INFO]))
    done = run_under_memory_cap(code, headroom_mb=150)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "windows 285" in done.stdout
