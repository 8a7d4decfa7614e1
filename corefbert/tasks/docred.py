"""DocRED document-level relation extraction: reader, features, the paper's bilinear model, and the task.

The model follows the BERT baseline of the DocRED code that CorefBERT's appendix fine-tunes: the document
is encoded once, a mention is the mean of its subword vectors, an entity the mean of its mentions; both
entities of a pair are projected to ``entity_hidden_size`` and joined with an embedding of the bucketed
word distance between their first mentions (head: h - t, tail: t - h); a bilinear layer scores the 96
relations + NA; the loss is multi-label BCE over all relations of the pairs used.

Long documents: by default only the first ``max_seq_length`` tokens are encoded (the paper's setting); an
entity whose mentions all start later is a zero vector (its pairs told apart by distance only), counted in
``truncated_entities``. With ``sliding_window`` the whole document is encoded in overlapping windows
(:func:`window_stride`), every token's vector the mean over the windows that hold it, ``window_batch_size``
windows at a time (:meth:`DocredModel.token_states`), so a long document's memory is bounded by that setting.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import torch
from accelerate.utils import gather_object
from torch import nn
from torch.utils.checkpoint import checkpoint

from corefbert.errors import CorefBertError
from corefbert.metrics.docred import (
    best_threshold,
    docred_counts,
    docred_scores,
    scores_from_counts,
    training_facts,
)
from corefbert.tasks.base import (
    FinetuningArguments,
    FinetuningTask,
    HeldOutArguments,
    check_data_flags,
    held_out_split,
)
from corefbert.tasks.heads import (
    check_head_weights,
    load_encoder,
    load_encoder_and_head,
    read_head_config,
    save_encoder_and_head,
)
from corefbert.text.durable import fresh_file, output_file, put_in_place
from corefbert.text.jsonio import read_json
from corefbert.text.tokenizers import load_tokenizer, special_token_frame, word_pieces
from corefbert.training.hub import hub_offline
from corefbert.training.memory import CHUNK_ELEMENTS, map_row_chunks

NA_RELATION = "Na"
HEAD = "docred"  # docred_head.safetensors + docred_head.json
# Signed log buckets of word distance, as the DocRED baseline's dis2idx: 0 | 1 | 2-3 | 4-7 | ... | 256+,
# mirrored for negative distances and shifted by 10, so 19 buckets in 0..19.
_BUCKET_EDGES = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256])
NUM_DISTANCE_BUCKETS = 20
# Candidate facts scored below this are never kept for the threshold search (memory on big dev sets).
_CANDIDATE_FLOOR = 1e-3


@dataclass
class DocredArguments(HeldOutArguments):
    """Data and model options of ``finetune/run_docred.py`` (the DocRED baseline's sizes)."""

    train_file: str | None = field(default=None, metadata={"help": "DocRED JSON with labels (train_annotated.json)."})
    validation_file: str | None = field(default=None, metadata={"help": "DocRED JSON with labels (dev.json)."})
    test_file: str | None = field(default=None, metadata={"help": "DocRED JSON to predict (labels optional)."})
    rel_info_file: str | None = field(
        default=None, metadata={"help": "rel_info.json (relation id -> name); fixes the 96 relation classes."}
    )
    max_seq_length: int = field(default=512, metadata={"help": "Tokens encoded at once, special tokens included."})
    sliding_window: bool = field(
        default=False, metadata={"help": "Encode longer documents whole in overlapping windows (else truncate)."}
    )
    window_stride: int | None = field(
        default=None, metadata={"help": "Token step between sliding windows, at most a window's content "
                                        "(max_seq_length minus the special tokens); default: half of it."})
    window_batch_size: int = field(
        default=32, metadata={"help": "Encoder windows per forward pass (bounds memory on long documents)."})
    num_na_pairs: int = field(
        default=-1, metadata={"help": "NA (no relation) pairs sampled per training document; -1 keeps all."})
    entity_hidden_size: int = field(default=128, metadata={"help": "Entity projection size before the bilinear."})
    distance_embedding_size: int = field(default=20, metadata={"help": "Size of the distance-bucket embedding."})
    threshold: float | None = field(
        default=None, metadata={"help": "Fact probability threshold; default: the one chosen on dev."})


def distance_bucket(distance: np.ndarray | int) -> np.ndarray:
    """Signed log bucket (0..19) of word distance(s); 10 means 0."""
    distance = np.asarray(distance)
    magnitude = np.searchsorted(_BUCKET_EDGES, np.abs(distance), side="right")  # 0..9
    return np.where(distance < 0, 10 - magnitude, 10 + magnitude)


def load_relation_ids(path: str) -> list[str]:
    """Relation classes from ``rel_info.json``: ``["Na", "P6", "P17", ...]`` in file order (index 0 = NA)."""
    info = read_json(path, missing="rel_info file not found; pass the DocRED rel_info.json")
    if not isinstance(info, dict) or not info or not all(isinstance(k, str) for k in info):
        raise CorefBertError("expected a JSON object of relation id -> name", path=path)
    return [NA_RELATION] + list(info)


def read_docred(path: str, relations: list[str]) -> list[dict]:
    """Read and check an official DocRED JSON file (a list of documents); returns the documents. Every mention
    must lie inside its sentence, every label must name existing entities and a relation of ``relations``;
    anything else is a :class:`CorefBertError` naming the document."""
    documents = read_json(path, missing="DocRED file not found; check the path")
    if not isinstance(documents, list):
        raise CorefBertError("expected a JSON list of documents (official DocRED format)", path=path)
    known = set(relations)
    for number, doc in enumerate(documents):
        where = f"document {number}"
        if not isinstance(doc, dict) or not {"title", "sents", "vertexSet"} <= set(doc):
            raise CorefBertError("a document needs title, sents and vertexSet", path=path, position=where)
        where += f" ({doc['title']!r})"
        try:
            _check_document(doc, known, path, where)
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise CorefBertError(f"malformed mention or label ({type(err).__name__}: {err}); expected the "
                                 "official DocRED fields", path=path, position=where) from None
    return documents


def _check_document(doc: dict, known: set[str], path: str, where: str) -> None:
    """The checks of :func:`read_docred` on one document."""
    sents, entities = doc["sents"], doc["vertexSet"]
    for e, entity in enumerate(entities):
        if not entity:
            raise CorefBertError(f"entity {e} has no mention", path=path, position=where)
        for mention in entity:
            sent_id, (start, end) = mention["sent_id"], mention["pos"]
            if not 0 <= sent_id < len(sents):
                raise CorefBertError(f"entity {e}: mention sent_id {sent_id} is not a sentence of the "
                                     f"document ({len(sents)} sentences)", path=path, position=where)
            if not 0 <= start < end <= len(sents[sent_id]):
                raise CorefBertError(f"entity {e}: mention pos [{start}, {end}) lies beyond sentence "
                                     f"{sent_id} ({len(sents[sent_id])} tokens)", path=path, position=where)
    for label in doc.get("labels", []):
        for side in ("h", "t"):
            if not 0 <= label[side] < len(entities):
                raise CorefBertError(f"label {side}={label[side]} is not an entity index (0..{len(entities) - 1})",
                                     path=path, position=where)
        if label["r"] not in known:
            raise CorefBertError(f"unknown relation id {label['r']!r} (not in rel_info.json)",
                                 path=path, position=where)


def window_stride(stride: int | None, content: int) -> int:
    """The step between sliding windows of ``content`` tokens each (the special tokens left out): half a
    window when ``stride`` is None. A larger step than ``content`` would skip tokens: refused."""
    if stride is None:
        stride = max(content // 2, 1)
    if not 1 <= stride <= content:
        raise CorefBertError(f"--window_stride {stride} must lie in 1..{content}: a window holds {content} tokens "
                             "(--max_seq_length minus the special tokens), and a longer step leaves tokens unencoded")
    return stride


def window_starts(num_tokens: int, content: int, stride: int) -> list[int]:
    """Offsets of windows of ``content`` tokens ``stride`` apart, the last one ending at ``num_tokens``."""
    if num_tokens <= content:
        return [0]
    return list(range(0, num_tokens - content, stride)) + [num_tokens - content]


def document_features(doc: dict, tokenizer, max_seq_length: int, sliding_window: bool, stride: int | None,
                      relation_index: dict[str, int]) -> dict:
    """Tokenize one document into encoder windows, entity mention spans (in document tokens), first-mention
    word positions and gold labels ``{(h, t): [relation index, ...]}``. ``stride``: see :func:`window_stride`."""
    words = [word for sent in doc["sents"] for word in sent]
    sent_offsets = np.cumsum([0] + [len(sent) for sent in doc["sents"]])
    pieces = word_pieces(tokenizer, words)  # as in running text, for every tokenizer family
    word_starts = np.cumsum([0] + [len(p) for p in pieces])  # [W + 1] token offset of each word
    token_ids = [t for p in pieces for t in p]
    prefix_ids, suffix_ids = special_token_frame(tokenizer)
    content = max_seq_length - len(prefix_ids) - len(suffix_ids)
    starts = window_starts(len(token_ids), content, window_stride(stride, content)) if sliding_window else [0]
    kept = min(len(token_ids), content) if len(starts) == 1 else len(token_ids)
    windows = [(s, token_ids[s:s + content]) for s in starts]
    spans, first_positions, truncated = [], [], 0
    for entity in doc["vertexSet"]:
        entity_spans = []
        for mention in entity:
            word_start = int(sent_offsets[mention["sent_id"]] + mention["pos"][0])
            word_end = int(sent_offsets[mention["sent_id"]] + mention["pos"][1])
            start, end = int(word_starts[word_start]), min(int(word_starts[word_end]), kept)
            if start < kept:
                entity_spans.append((start, max(end, start + 1)))  # words of no token keep one
        truncated += not entity_spans
        spans.append(entity_spans)
        first_positions.append(min(int(sent_offsets[m["sent_id"]] + m["pos"][0]) for m in entity))
    labels: dict[tuple[int, int], list[int]] = {}
    for label in doc.get("labels", []):
        labels.setdefault((label["h"], label["t"]), []).append(relation_index[label["r"]])
    return {"windows": windows, "num_tokens": kept, "mention_spans": spans, "first_positions": first_positions,
            "labels": labels, "truncated_entities": truncated}


class DocredDataset(torch.utils.data.Dataset):
    """Documents as features; training draws ``num_na_pairs`` NA pairs per document anew in every epoch, as a
    function of (seed, epoch, document) alone: a resumed run skips the batches it did without reading them and
    must still draw what the uninterrupted run drew (Accelerate's ``set_epoch`` passes the epoch on)."""

    def __init__(self, features: list[dict], num_na_pairs: int = -1, seed: int | None = None):
        self.features, self.num_na_pairs, self.seed = features, num_na_pairs, seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Draw the NA pairs of ``epoch`` from now on."""
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> dict:
        feature = self.features[index]
        count = len(feature["mention_spans"])
        pairs = [(h, t) for h in range(count) for t in range(count) if h != t]
        if self.seed is not None and self.num_na_pairs >= 0:
            positive = [p for p in pairs if p in feature["labels"]]
            negative = [p for p in pairs if p not in feature["labels"]]
            rng = random.Random(f"{self.seed}-{self.epoch}-{index}")  # a str seed hashes the same in every process
            negative = rng.sample(negative, min(self.num_na_pairs, len(negative)))
            pairs = positive + negative
        return {**feature, "doc_index": index, "pairs": pairs}


def docred_collate(features: list[dict], tokenizer, num_relations: int) -> dict[str, torch.Tensor]:
    """Batch documents: encoder windows plus the maps from window tokens back to document tokens,
    entity pooling weights, pairs, distance buckets and multi-hot labels (NA = column 0)."""
    batch_size = len(features)
    num_tokens = max(max(f["num_tokens"] for f in features), 1)
    num_entities = max(max(len(f["mention_spans"]) for f in features), 1)
    num_pairs = max(max(len(f["pairs"]) for f in features), 1)
    prefix_ids, suffix_ids = special_token_frame(tokenizer)
    window_inputs, window_index = [], []
    for b, feature in enumerate(features):
        for offset, ids in feature["windows"]:
            window_inputs.append(prefix_ids + list(ids) + suffix_ids)
            window_index.append([-1] * len(prefix_ids) + [b * num_tokens + offset + j for j in range(len(ids))]
                                + [-1] * len(suffix_ids))
    length = max(len(ids) for ids in window_inputs)
    input_ids = torch.full((len(window_inputs), length), tokenizer.pad_token_id, dtype=torch.long)
    token_index = torch.full((len(window_inputs), length), -1, dtype=torch.long)
    attention_mask = torch.zeros((len(window_inputs), length), dtype=torch.long)
    for w, (ids, index) in enumerate(zip(window_inputs, window_index)):
        input_ids[w, :len(ids)] = torch.tensor(ids)
        token_index[w, :len(ids)] = torch.tensor(index)
        attention_mask[w, :len(ids)] = 1
    entity_weights = torch.zeros(batch_size, num_entities, num_tokens)
    pair_heads = torch.zeros(batch_size, num_pairs, dtype=torch.long)
    pair_tails = torch.zeros(batch_size, num_pairs, dtype=torch.long)
    pair_distance = torch.full((batch_size, num_pairs), 10, dtype=torch.long)
    pair_mask = torch.zeros(batch_size, num_pairs, dtype=torch.bool)
    labels = torch.zeros(batch_size, num_pairs, num_relations)
    for b, feature in enumerate(features):
        for e, spans in enumerate(feature["mention_spans"]):
            for start, end in spans:  # mention = mean of its tokens, entity = mean of its mentions
                entity_weights[b, e, start:end] += 1.0 / ((end - start) * len(spans))
        if not feature["pairs"]:
            continue
        heads, tails = zip(*feature["pairs"])
        count = len(heads)
        pair_heads[b, :count], pair_tails[b, :count] = torch.tensor(heads), torch.tensor(tails)
        first = np.asarray(feature["first_positions"])
        pair_distance[b, :count] = torch.from_numpy(distance_bucket(first[list(heads)] - first[list(tails)]))
        pair_mask[b, :count] = True
        for p, pair in enumerate(feature["pairs"]):
            labels[b, p, feature["labels"].get(pair, [0])] = 1.0
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "token_index": token_index, "entity_weights": entity_weights, "pair_heads": pair_heads,
            "pair_tails": pair_tails, "pair_distance": pair_distance, "pair_mask": pair_mask, "labels": labels,
            "doc_index": torch.tensor([f["doc_index"] for f in features])}


def bilinear_scores(heads: torch.Tensor, tails: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                    budget: int = CHUNK_ELEMENTS):
    """``heads[n] @ weight[r] @ tails[n] + bias[r]`` for all n, r: what ``F.bilinear`` computes, as two
    matmuls. heads/tails [..., D], weight [R, D, D], bias [R] -> [..., R]. ``F.bilinear`` on CPU is many times
    slower (benchmarks/docred_bilinear.py); this costs an [n, R*D] intermediate (57 KB a pair at DocRED's 97
    relations and D = 148), so the pairs go through ``budget`` floats' worth at a time
    (:func:`map_row_chunks`): a batch's memory does not grow with the pairs of its largest document."""
    num_relations, dim, _ = weight.shape
    stacked = weight.permute(1, 0, 2).reshape(dim, num_relations * dim)  # [D, R*D]

    def chunk(start: int, end: int, flat_heads, flat_tails, stacked) -> torch.Tensor:
        projected = flat_heads[start:end] @ stacked  # [n, R*D]
        return torch.bmm(projected.view(-1, num_relations, dim), flat_tails[start:end, :, None]).squeeze(-1)  # [n, R]

    flat_heads, flat_tails = heads.reshape(-1, dim), tails.reshape(-1, dim)  # [N, D]
    scores = map_row_chunks(chunk, flat_heads.shape[0], num_relations * dim, budget, flat_heads, flat_tails, stacked)
    scores = scores.view(*heads.shape[:-1], num_relations)
    return scores + bias if bias is not None else scores


class DocredModel(nn.Module):
    """Encoder + entity pooling + distance embeddings + bilinear relation scorer (module docstring)."""

    def __init__(self, encoder: nn.Module, num_relations: int, entity_hidden_size: int = 128,
                 distance_embedding_size: int = 20, window_batch_size: int = 32):
        super().__init__()
        self.encoder = encoder
        self.window_batch_size = window_batch_size
        self.entity_projection = nn.Linear(encoder.config.hidden_size, entity_hidden_size)
        self.distance_embedding = nn.Embedding(NUM_DISTANCE_BUCKETS, distance_embedding_size)
        side = entity_hidden_size + distance_embedding_size
        self.bilinear = nn.Bilinear(side, side, num_relations)

    def token_states(self, input_ids, attention_mask, token_index, batch: int, num_tokens: int) -> torch.Tensor:
        """Each document token's vector, the mean over the windows that hold it: [B, T, H].

        input_ids/attention_mask/token_index [W, Lw] (``token_index``: ``b * T + t`` or -1 for special and
        padding tokens). The windows are encoded ``window_batch_size`` at a time and summed into place, so
        only one chunk's activations and the [B * T, H] sums are held; in training with more than one chunk,
        each is checkpointed, else autograd keeps every chunk's activations (6.4 GB for 100k words).
        """
        num_windows = input_ids.size(0)
        recompute = torch.is_grad_enabled() and num_windows > self.window_batch_size
        sums = None
        for first in range(0, num_windows, self.window_batch_size):
            chunk = slice(first, first + self.window_batch_size)
            length = int(attention_mask[chunk].sum(-1).max())  # this chunk's padding only
            chunk_ids, chunk_mask = input_ids[chunk, :length], attention_mask[chunk, :length]  # [w, Lw]
            if recompute:  # the RNG state is kept, so the recomputed dropout masks are the ones used here
                hidden = checkpoint(self._encode, chunk_ids, chunk_mask, use_reentrant=False)  # [w, Lw, H]
            else:
                hidden = self._encode(chunk_ids, chunk_mask)  # [w, Lw, H]
            index = token_index[chunk, :length]  # [w, Lw]
            valid = index >= 0
            if sums is None:
                sums = hidden.new_zeros(batch * num_tokens, hidden.size(-1))  # [B * T, H]
            # In place: no [B * T, H] copy per chunk; index_put_ keeps only the indices for the backward pass
            # (index_add_ would keep each chunk's states as well).
            sums.index_put_((index[valid],), hidden[valid], accumulate=True)
        flat_index = token_index[token_index >= 0]
        counts = torch.bincount(flat_index, minlength=batch * num_tokens).to(sums.dtype)  # [B * T]
        return (sums / counts.clamp(min=1).unsqueeze(-1)).view(batch, num_tokens, -1)

    def _encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The encoder's last hidden states of one chunk of windows: [w, Lw] -> [w, Lw, H]."""
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def forward(self, input_ids, attention_mask, token_index, entity_weights, pair_heads, pair_tails,
                pair_distance, pair_mask, labels=None, doc_index=None):
        batch, _, num_tokens = entity_weights.shape
        tokens = self.token_states(input_ids, attention_mask, token_index, batch, num_tokens)  # [B, T, H]
        entities = self.entity_projection(torch.bmm(entity_weights.to(tokens.dtype), tokens))  # [B, E, D]
        gather = entities.size(-1)
        heads = entities.gather(1, pair_heads.unsqueeze(-1).expand(-1, -1, gather))  # [B, P, D]
        tails = entities.gather(1, pair_tails.unsqueeze(-1).expand(-1, -1, gather))  # [B, P, D]
        heads = torch.cat([heads, self.distance_embedding(pair_distance)], dim=-1)
        tails = torch.cat([tails, self.distance_embedding(NUM_DISTANCE_BUCKETS - pair_distance)], dim=-1)
        logits = bilinear_scores(heads, tails, self.bilinear.weight, self.bilinear.bias)  # [B, P, R]
        loss = None
        if labels is not None:
            per_pair = nn.functional.binary_cross_entropy_with_logits(logits, labels, reduction="none").mean(-1)
            loss = (per_pair * pair_mask).sum() / pair_mask.sum().clamp(min=1)
        return SimpleNamespace(loss=loss, logits=logits)


def _could_be_hub_id(name: str) -> bool:
    """Whether ``name`` has the shape of a Hub model id (``name`` or ``org/name``), not of a local path."""
    return re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?", name) is not None


def document_candidates(model, batch: dict, floor: float) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Run ``model`` on ``batch``; for each document, its facts scored at least ``floor``:
    ``(doc_index, facts [n, 3] (head, tail, relation index; NA is 0 and never proposed), scores [n])``."""
    probs = torch.sigmoid(model(**batch).logits[..., 1:].float())  # [B, P, R-1], NA column dropped
    probs = probs.masked_fill(~batch["pair_mask"].unsqueeze(-1), 0.0)
    found = []
    for b, doc_index in enumerate(batch["doc_index"].tolist()):
        pair, relation = torch.nonzero(probs[b] >= floor, as_tuple=True)  # [n], [n]
        facts = np.stack([batch["pair_heads"][b, pair].cpu().numpy(), batch["pair_tails"][b, pair].cpu().numpy(),
                          relation.cpu().numpy() + 1], axis=1).astype(np.int64)  # [n, 3]
        found.append((doc_index, facts, probs[b, pair, relation].cpu().numpy()))
    return found


class JsonListWriter:
    """Writes a JSON list item by item, byte for byte what ``json.dump(items, handle)`` writes."""

    def __init__(self, path: str):
        self.handle = fresh_file(path)  # closed by close()
        self.handle.write("[")
        self.empty = True

    def extend(self, items: list) -> None:
        if items:  # one encoder call per list: its items without the brackets, joined as json.dump joins them
            self.handle.write(("" if self.empty else ", ") + json.dumps(items)[1:-1])
            self.empty = False

    def close(self) -> None:
        self.handle.write("]")
        self.handle.close()


class DocredTask(FinetuningTask):
    """DocRED / Re-DocRED on the shared loop; ``main_metric`` is dev F1 at the threshold chosen on dev."""

    name = "docred"
    main_metric = "f1"
    args_class = DocredArguments
    # The paper's DocRED settings (appendix): LR 4e-5, batch 32; evaluation every few epochs keeps the best.
    training_defaults = {"learning_rate": 4e-5, "per_device_train_batch_size": 32, "per_device_eval_batch_size": 8}

    def __init__(self, task_args: DocredArguments, training_args: FinetuningArguments):
        super().__init__(task_args, training_args)
        check_data_flags(training_args, task_args, kind="official DocRED JSON")
        args, model_name_or_path = task_args, training_args.model_name_or_path
        self.model_name_or_path, self.seed = model_name_or_path, training_args.seed
        # Before the head check: a folder that does not exist has no head file either, and the line would
        # then ask for --rel_info_file instead of naming the folder.
        if model_name_or_path and not os.path.isdir(model_name_or_path) and (
                hub_offline() or not _could_be_hub_id(model_name_or_path)):
            raise CorefBertError("model folder not found; check --model_name_or_path (a local checkpoint folder, or "
                                 "a Hub model id when online)", path=model_name_or_path)
        self.head = read_head_config(model_name_or_path, HEAD)
        if self.head is not None:  # a model fine-tuned here: its relation classes and threshold
            self.relations = self.head["relations"]
            check_head_weights(model_name_or_path, HEAD)
        elif args.rel_info_file is not None:
            self.relations = load_relation_ids(args.rel_info_file)
        else:
            raise CorefBertError("pass --rel_info_file (DocRED's rel_info.json) to fix the relation classes")
        self.relation_index = {r: i for i, r in enumerate(self.relations)}
        self.threshold = args.threshold if args.threshold is not None else (self.head or {}).get("threshold")
        self.tokenizer = load_tokenizer(model_name_or_path)
        if args.window_batch_size < 1:
            raise CorefBertError(f"--window_batch_size {args.window_batch_size} must be at least 1")
        if args.sliding_window:  # checked before any document is read
            window_stride(args.window_stride, args.max_seq_length - sum(map(len, special_token_frame(self.tokenizer))))
        read = lambda path: read_docred(path, self.relations) if path else None  # noqa: E731
        self.train_docs, self.eval_docs, self.test_docs = (read(args.train_file), read(args.validation_file),
                                                           read(args.test_file))
        if args.validation_split_percentage and self.train_docs is not None and self.eval_docs is None:
            self.train_docs, self.eval_docs = held_out_split(self.train_docs, args.validation_split_percentage,
                                                             args.split_seed)
        # Ign F1 ignores facts of the training annotations (the file given, or its seeded part); see _metrics.
        self.train_facts = training_facts(self.train_docs) if self.train_docs is not None else None
        self.truncated_entities: dict[str, int] = {}  # per split: each is featurized once, in any order

    def _features(self, documents, split: str):
        a = self.task_args
        features = [document_features(doc, self.tokenizer, a.max_seq_length, a.sliding_window, a.window_stride,
                                      self.relation_index) for doc in documents]
        self.truncated_entities[split] = sum(f["truncated_entities"] for f in features)
        return features

    def train_dataset(self):
        if not self.train_docs:
            return None
        return DocredDataset(self._features(self.train_docs, "train"), self.task_args.num_na_pairs, seed=self.seed)

    def eval_dataset(self):
        return DocredDataset(self._features(self.eval_docs, "eval")) if self.eval_docs else None

    def predict_dataset(self):
        return DocredDataset(self._features(self.test_docs, "predict")) if self.test_docs else None

    def collate(self, features):
        return docred_collate(features, self.tokenizer, len(self.relations))

    def build_model(self) -> DocredModel:
        # The pooler is kept frozen (never read by the pairs) so the saved encoder is a complete checkpoint.
        sizes = self.head if self.head is not None else vars(self.task_args)  # saved head or flags
        model = DocredModel(load_encoder(self.model_name_or_path), len(self.relations),
                            sizes["entity_hidden_size"], sizes["distance_embedding_size"],
                            self.task_args.window_batch_size)
        if self.head is not None:
            load_encoder_and_head(model, self.model_name_or_path, HEAD, with_encoder=False)
        return model

    def evaluate(self, model, dataloader, accelerator, split):
        if split == "predict":
            return self._predict(model, dataloader, accelerator)
        # Dev: the threshold search ranks the candidate facts of all documents, so they are collected.
        documents = self.eval_docs
        candidates, seen = [], []
        for batch in dataloader:
            for doc_index, facts, scores in document_candidates(model, batch, _CANDIDATE_FLOOR):
                seen.append(doc_index)
                candidates.append(np.concatenate([np.full((len(facts), 1), doc_index), facts], axis=1))
                candidates.append(scores)
        # Gathered once after the loop (objects of any size); uneven shards repeat documents: deduplicated.
        gathered = gather_object([(seen, candidates)]) if accelerator.num_processes > 1 else [(seen, candidates)]
        seen = sorted({i for part_seen, _ in gathered for i in part_seen})
        facts = np.concatenate([c for _, part in gathered for c in part[0::2]] or [np.zeros((0, 4), np.int64)])
        scores = np.concatenate([c for _, part in gathered for c in part[1::2]] or [np.zeros(0, np.float32)])
        facts, first = np.unique(facts, axis=0, return_index=True)  # a document evaluated twice counts once
        scores = scores[first]
        gold_docs = [documents[i] for i in seen]
        has_labels = all("labels" in doc for doc in gold_docs)
        if has_labels and self.task_args.threshold is None:
            gold = {(i, lab["h"], lab["t"], self.relation_index[lab["r"]]) for i in seen
                    for lab in documents[i]["labels"]}
            is_correct = np.array([tuple(f) in gold for f in facts.tolist()], dtype=bool)
            self.threshold, _ = best_threshold(scores, is_correct, len(gold))
        threshold = self.threshold if self.threshold is not None else 0.5
        predictions = [{"title": documents[d]["title"], "h_idx": h, "t_idx": t, "r": self.relations[r]}
                       for d, h, t, r in facts[scores >= threshold].tolist()]
        found = docred_scores(predictions, gold_docs, self.train_facts) if has_labels else None
        return self._metrics(found, split, threshold, accelerator), predictions

    def _predict(self, model, dataloader, accelerator) -> tuple[dict[str, float], str]:
        """The test split, streamed: each batch's facts at or above the threshold are written to
        ``result.json.partial`` (main process; its path is the predictions) and counted for the metrics, then
        dropped: memory is bounded by the batch settings (an untrained model predicts half of all facts)."""
        documents = self.test_docs
        threshold = self.threshold if self.threshold is not None else 0.5
        has_labels = all("labels" in doc for doc in documents)
        if has_labels and len({doc["title"] for doc in documents}) < len(documents) and accelerator.is_main_process:
            print("warning: predict: titles repeat in --test_file; the official scorer merges the facts of "
                  "documents with one title, here each document is scored on its own", file=sys.stderr)
        counts: Counter = Counter()
        done: set[int] = set()  # uneven shards give a few documents to two processes: each counts once
        path = os.path.join(self.args.output_dir, "result.json.partial")
        writer = JsonListWriter(path) if accelerator.is_main_process else None
        try:
            for batch in dataloader:
                found = [(d, facts) for d, facts, _ in
                         document_candidates(model, batch, max(threshold, _CANDIDATE_FLOOR))]
                if accelerator.num_processes > 1:  # a prepared loader gives every process as many batches
                    found = [item for part in gather_object([found]) for item in part]
                for doc_index, facts in sorted(found, key=lambda item: item[0]):
                    if doc_index in done:
                        continue
                    done.add(doc_index)
                    title = documents[doc_index]["title"]
                    predictions = [{"title": title, "h_idx": h, "t_idx": t, "r": self.relations[r]}
                                   for h, t, r in facts.tolist()]
                    if has_labels:
                        counts.update(docred_counts(predictions, [documents[doc_index]], self.train_facts))
                    if writer is not None:
                        writer.extend(predictions)
        finally:
            if writer is not None:
                writer.close()
        found = scores_from_counts(counts) if has_labels else None
        return self._metrics(found, "predict", threshold, accelerator), path

    def _metrics(self, scores: dict | None, split: str, threshold: float, accelerator) -> dict[str, float]:
        """``scores`` (None without gold labels) with the threshold and the entities ``split`` truncated.
        Without training annotations Ign F1 would silently equal F1: it is left out, with a warning."""
        metrics = dict(scores or {})
        if scores is not None and self.train_facts is None:
            for key in ("ign_precision", "ign_f1", "num_correct_in_train"):
                metrics.pop(key)
            if accelerator.is_main_process:
                print(f"warning: {split}: Ign F1 left out: it ignores the facts of the training annotations, "
                      "and no --train_file was given (pass it; it is only read)", file=sys.stderr)
        metrics.update(threshold=threshold, truncated_entities=float(self.truncated_entities.get(split, 0)))
        return metrics

    def write_predictions(self, predictions, output_dir, split):
        path = os.path.join(output_dir, "result.json" if split == "predict" else f"{split}_result.json")
        if split == "predict":  # written while predicting (_predict): moved into place whole
            put_in_place(predictions, path, "the predictions")
            return [path]
        with output_file(path, what="the predictions") as handle:
            json.dump(predictions, handle)
        return [path]

    def save_pretrained(self, model, output_dir, state_dict=None):
        # The encoder as an ordinary checkpoint (AutoModel loads it), the head in docred_head.*.
        head = {"relations": self.relations, "threshold": self.threshold,
                "entity_hidden_size": model.entity_projection.out_features,
                "distance_embedding_size": model.distance_embedding.embedding_dim}
        save_encoder_and_head(model, output_dir, HEAD, head, state_dict)
        self.tokenizer.save_pretrained(output_dir)

    def load_weights(self, model, directory):
        load_encoder_and_head(model, directory, HEAD)
        saved = read_head_config(directory, HEAD)["threshold"]
        if self.task_args.threshold is None and saved is not None:
            self.threshold = saved
