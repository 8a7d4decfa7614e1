"""Literal, loop-by-loop references that the tests hold the library's batched implementations to.

Each one follows its paper's text (for the corpus's words, the rule its docstring states) step by step, for one
example at a time, with no vectorization: slow and obvious on purpose. They live beside the tests because nothing in the library runs them; a reference a
benchmark times (``lstmn_reference``, ``reference_coref_gru``, ``paired_bootstrap_reference``, the coreference
metrics' ``*_literal``) stays next to its fast twin in the package.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from corefbert.tasks.coref_e2e.encoders import LinearSentenceLinking, StaticAttentionalSentenceLinking
from corefbert.tasks.coref_e2e.span_ranking import SpanRanker, bucket_distance

# ---------------------------------------------------------------- CorefBERT's MLM + MRP masking (Ye et al. 2020, 3.2)


def mrp_masking_reference(row: Mapping, rng: np.random.Generator, random_token_ids: np.ndarray,
                          mask_token_id: int, mlm_probability: float = 0.15, mrp_ratio: float = 0.2,
                          mask_replace_prob: float = 0.8, random_replace_prob: float = 0.1,
                          group_choice: str = "uniform", split_by: str = "words") -> dict:
    """Mask ONE packed row (docs/contracts.md schema) the way the paper describes it, one word at a time.

    Returns ``{"mrp_words": set, "mlm_words": set, "input_ids": np.ndarray}``: the word ids masked for MRP and
    for MLM, and the row's inputs after the 80/10/10 replacement.

    The paper fixes the 15% budget, whole words, the 4 : 1 split by words, uniform group then uniform mention,
    one mention per group left unmasked and 80/10/10. Where it is silent, this follows the choices the collator
    documents (its class docstring), so that the two must agree in distribution:

    - the budget is ``max(1, round_half_up(0.15 * maskable tokens))``;
    - the number of MRP words ``k`` solves ``k = r (k + k_mlm)`` with ``k`` mentions of the row's mean mention
      length and ``k_mlm`` words of its mean word length filling the budget, rounded stochastically;
    - the mention each group keeps unmasked is drawn before any pick (uniformly), so a pick that would
      overflow the budget ends the MRP loop without changing which mention is kept;
    - MLM walks the other words in a uniformly random order and stops at the first that does not fit.

    ``group_choice="by_size"`` (a group in proportion to its maskable mentions) and ``split_by="tokens"``
    (MRP gets a fifth of the budget's tokens, not of its words) are the two bugs the distribution test must
    catch; the paper is the defaults.
    """
    input_ids = np.asarray(row["input_ids"], dtype=np.int64)
    word_ids = [int(w) for w in row["word_ids"]]
    words: dict[int, list[int]] = {}  # word id -> its token positions
    for position, word in enumerate(word_ids):
        if word >= 0:
            words.setdefault(word, []).append(position)
    n_maskable = sum(len(tokens) for tokens in words.values())
    budget = 0
    if n_maskable > 0 and mlm_probability > 0:
        budget = max(1, int(np.floor(mlm_probability * n_maskable + 0.5)))

    # Mentions by group: mention = its word id; a group is the mentions sharing a surface form (group id).
    groups: dict[int, list[int]] = {}
    for start, group in zip(row["mention_starts"], row["mention_groups"]):
        groups.setdefault(int(group), []).append(word_ids[int(start)])

    # One mention per group stays unmasked: chosen up front, uniformly (the referent MRP copies from).
    kept = {group: mentions[int(rng.integers(len(mentions)))] for group, mentions in groups.items()}

    # How many MRP words: MLM : MRP = 4 : 1 by words, in a budget counted in tokens.
    mentions_all = [m for mentions in groups.values() for m in mentions]
    k = 0
    if mrp_ratio > 0 and mentions_all:
        mean_mention = sum(len(words[m]) for m in mentions_all) / len(mentions_all)
        mean_word = n_maskable / len(words)
        k_float = mrp_ratio * budget / max(mrp_ratio * mean_mention + (1 - mrp_ratio) * mean_word, 1e-9)
        if split_by == "tokens":
            k_float = mrp_ratio * budget / mean_mention
        k = int(np.floor(k_float + rng.random()))

    # MRP: a usable group uniformly, then one of its maskable mentions uniformly, until k words or no group.
    mrp_words: set[int] = set()
    used = 0
    while len(mrp_words) < k:
        maskable = {g: [m for m in mentions if m != kept[g] and m not in mrp_words]
                    for g, mentions in groups.items()}
        usable = sorted(g for g, mentions in maskable.items() if mentions)
        if not usable:
            break  # every group is down to its one unmasked mention
        if group_choice == "by_size":
            sizes = np.asarray([len(maskable[g]) for g in usable], dtype=float)
            group = usable[int(rng.choice(len(usable), p=sizes / sizes.sum()))]
        else:
            group = usable[int(rng.integers(len(usable)))]
        mention = maskable[group][int(rng.integers(len(maskable[group])))]
        if used + len(words[mention]) > budget:
            break
        mrp_words.add(mention)
        used += len(words[mention])

    # MLM: whole words in a random order, never an MRP word nor (with MRP on) a group's kept mention.
    protected = set(kept.values()) if mrp_ratio > 0 else set()
    candidates = [w for w in sorted(words) if w not in mrp_words and w not in protected]
    mlm_words: set[int] = set()
    for index in rng.permutation(len(candidates)):
        word = candidates[int(index)]
        if used + len(words[word]) > budget:
            break
        mlm_words.add(word)
        used += len(words[word])

    # 80/10/10, decided once per masked word.
    masked_ids = input_ids.copy()
    for word in sorted(mrp_words | mlm_words):
        draw = rng.random()
        for position in words[word]:
            if draw < mask_replace_prob:
                masked_ids[position] = mask_token_id
            elif draw < mask_replace_prob + random_replace_prob:
                masked_ids[position] = random_token_ids[int(rng.integers(len(random_token_ids)))]
    return {"mrp_words": mrp_words, "mlm_words": mlm_words, "input_ids": masked_ids}


# ---------------------------------------------------------------- words over subwords: the corpus's rule, token by token


def words_reference(text: str, word_chars: list[tuple[int, int]], offsets: list[tuple[int, int]],
                    word_ids: list[int | None]) -> tuple[list[int], list[int]]:
    """The word of each subword token of ``text``, as :func:`corefbert.corpus.packing.word_spans` decides it, one
    token at a time with a union-find instead of its array passes.

    ``word_chars``: the spaCy words' ``(start, end)`` characters (whitespace tokens left out); ``offsets``: each
    token's ``(start, end)``; ``word_ids``: the tokenizer's own word id of each token (``BatchEncoding.word_ids()``).
    A token is in the word of every spaCy word it overlaps. A token that overlaps none (whitespace, or zero width)
    goes with the token after it when the tokenizer's word ids join it to a token that overlaps one (through
    such tokens only); otherwise a zero-width one goes with the token before it, and a whitespace one is a word
    of its own. Returns the word of each token (0, 1, ... in text order) and the one spaCy word of each word (-1
    where it holds several or none).
    """
    n = len(offsets)
    parent = list(range(n + len(word_chars)))  # the tokens, then the spaCy words

    def find(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    def union(x: int, y: int) -> None:
        parent[find(x)] = find(y)

    touched = [[k for k, (s, e) in enumerate(word_chars) if a < e and b > s and b > a] for a, b in offsets]
    for t, (a, b) in enumerate(offsets):
        for k in touched[t]:
            union(t, n + k)
        if touched[t]:
            continue
        assert not text[a:b].strip(), f"token {t} {text[a:b]!r} overlaps no spaCy word but is not whitespace"
        u = t
        while not touched[u] and u + 1 < n and word_ids[u] is not None and word_ids[u] == word_ids[u + 1]:
            u += 1
        if u != t and touched[u]:
            union(t, u)
        elif a == b and t > 0:
            union(t, t - 1)
    root_word: dict[int, int] = {}
    word_of_token = [root_word.setdefault(find(t), len(root_word)) for t in range(n)]
    spacy_words: list[set[int]] = [set() for _ in root_word]
    for k in range(len(word_chars)):
        if find(n + k) in root_word:
            spacy_words[root_word[find(n + k)]].add(k)
    return word_of_token, [next(iter(w)) if len(w) == 1 else -1 for w in spacy_words]


# ---------------------------------------------------------------- CorefBERT's copy loss (Ye et al. 2020, eq. 2-4)


def mrp_loss_reference(hidden: torch.Tensor, vector: torch.Tensor, batch: Mapping, form: str = "copyable") -> float:
    """Eq. 2-4 written out literally, one mention at a time, in float64 Python arithmetic.

    ``hidden`` ``[batch, seq, hidden]``, ``vector`` ``V`` ``[hidden]``, ``batch`` the collator's keys. ``form``:
    ``"copyable"`` (eq. 2 over the collator's ``copy_mask``), ``"sequence"`` (eq. 2 over every x_k ∈ X: each real
    token of the row, ``attention_mask``) or ``"official"`` (thunlp/CorefBERT's ``BertForCopy`` and
    ``gen_copy_data_MRP.py``: a masked word's first and last subword are two separate queries, each a log-sum over
    the referents' first, resp. last, subwords with the softmax over every position of the row, padding
    included; a one-token word is one query). With ``document_ids`` in ``batch`` a query sees only its own
    document's tokens (``"sequence"``: and the row's special tokens, document -1).
    The losses are averaged over the batch's mentions (the official form: over its queries), the official
    code's reduction; eq. 4 itself sums.
    """
    h = hidden.double().tolist()
    v = vector.double().tolist()
    length = hidden.shape[1]
    losses = []
    for b in range(hidden.shape[0]):

        def candidates(query, _b=b):
            """The k of eq. 2's denominator for the query position ``query``."""
            documents = batch.get("document_ids")
            if form == "official":
                return list(range(length))
            if form == "sequence":
                real = batch["attention_mask"][_b] if "attention_mask" in batch else [1] * length
                kept = [k for k in range(length) if real[k]]
            else:
                kept = [k for k in range(length) if batch["copy_mask"][_b, k]]
            if documents is None:
                return kept
            own = int(documents[_b, query])
            return [k for k in kept if int(documents[_b, k]) == own or (form == "sequence" and documents[_b, k] < 0)]

        def prob(i, _b=b):
            # Pr(x_k | x_i) = exp((V ⊙ h_k)ᵀ h_i) / Σ_k' exp((V ⊙ h_k')ᵀ h_i)   (eq. 2)
            scores = {k: sum(v[d] * h[_b][k][d] * h[_b][i][d] for d in range(len(v))) for k in candidates(i)}
            top = max(scores.values())
            norm = sum(math.exp(x - top) for x in scores.values())
            return {k: math.exp(x - top) / norm for k, x in scores.items()}

        for m in range(batch["mrp_mention_mask"].shape[1]):
            if not batch["mrp_mention_mask"][b, m]:
                continue
            p_start = prob(int(batch["mrp_mention_starts"][b, m]))
            p_end = prob(int(batch["mrp_mention_ends"][b, m]))  # a mention's two queries share one document
            refs = [
                (int(batch["mrp_referent_starts"][b, m, r]), int(batch["mrp_referent_ends"][b, m, r]))
                for r in range(batch["mrp_referent_mask"].shape[2])
                if batch["mrp_referent_mask"][b, m, r]
            ]
            if form == "official":
                losses.append(-math.log(sum(p_start[s] for s, _ in refs)))
                if batch["mrp_mention_ends"][b, m] != batch["mrp_mention_starts"][b, m]:  # a second query
                    losses.append(-math.log(sum(p_end[e] for _, e in refs)))
            else:
                # Pr(w_j | w_i) = Pr(x_sj | x_si) · Pr(x_tj | x_ti)  (eq. 3); -log Σ_{w_j ∈ C(w_i)}  (eq. 4)
                losses.append(-math.log(sum(p_start[s] * p_end[e] for s, e in refs)))
    return sum(losses) / max(len(losses), 1)


# ---------------------------------------------------------------- the GA reader's attention sum (Dhingra et al. 2017, 3.2)


def reference_attention_sum(attention: torch.Tensor, doc_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``corefbert.tasks.babi.ga_reader.attention_sum`` literally, one position at a time."""
    result = torch.zeros(attention.size(0), vocab_size, dtype=attention.dtype)
    for b in range(attention.size(0)):
        for i in range(attention.size(1)):
            result[b, doc_ids[b, i]] += attention[b, i]
    return result


# ---------------------------------------------------------------- the recurrent encoders of Luo & Glass (2018)


# ------------------------------------------------------------------ literal references (tests only)


def lstm_reference(lstm: nn.LSTM, layer: int, inputs: list[torch.Tensor], h0=None) -> list[torch.Tensor]:
    """One bidirectional layer of ``lstm`` run word by word with its own weights (the LSTM equations):
    ``inputs`` one [dim] per word; ``h0`` (forward, backward) [hidden] each or None -> [2 * hidden] per word."""
    hidden = lstm.hidden_size
    outputs = [[None, None] for _ in inputs]
    for direction, suffix in enumerate(("", "_reverse")):
        w_ih, w_hh = getattr(lstm, f"weight_ih_l{layer}{suffix}"), getattr(lstm, f"weight_hh_l{layer}{suffix}")
        bias = getattr(lstm, f"bias_ih_l{layer}{suffix}") + getattr(lstm, f"bias_hh_l{layer}{suffix}")
        h = torch.zeros(hidden) if h0 is None else h0[direction]
        c = torch.zeros(hidden)
        order = range(len(inputs)) if direction == 0 else reversed(range(len(inputs)))
        for t in order:
            i, f, g, o = (w_ih @ inputs[t] + w_hh @ h + bias).chunk(4)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs[t][direction] = h
    return [torch.cat(pair) for pair in outputs]


def lsl_reference(module: LinearSentenceLinking, sentences: list[torch.Tensor]) -> list[torch.Tensor]:
    """LSL sentence by sentence, word by word: ``sentences`` [len_i, dim] each -> [len_i, 2 * hidden] each."""
    out, previous = [], None
    for words in sentences:
        first = lstm_reference(module.layer1, 0, list(words))
        h0 = None
        if previous is not None:  # final forward output = last word's; final backward output = first word's
            h0 = (previous[-1][:module.hidden], previous[0][module.hidden:])
        out.append(torch.stack(lstm_reference(module.layer2, 0, first, h0)))
        previous = first
    return out


def asl_static_reference(module: StaticAttentionalSentenceLinking, sentences: list[torch.Tensor]
                         ) -> list[torch.Tensor]:
    """``--asl_variant static`` (attention and gate without h_{t-1}) one word and one previous word at a time
    -> [len_i, 2 * hidden] per sentence."""
    out = []
    for i, words in enumerate(sentences):
        gated = []
        for x in words:
            if i == 0:
                gated.append(x)
                continue
            previous = sentences[i - 1]
            w_e = torch.cat([module.attend_word.weight, module.attend_previous.weight], dim=1)
            scores = torch.stack([module.attention_out.weight[0] @ torch.tanh(w_e @ torch.cat([x, p])
                                                                                + module.attend_word.bias)
                                  for p in previous])  # eq. 1
            weights = torch.exp(scores) / torch.exp(scores).sum()  # eq. 2
            summary = sum(a * p for a, p in zip(weights, previous))  # eq. 3
            gate = torch.sigmoid(module.gate.weight @ torch.cat([x, summary]) + module.gate.bias)  # eq. 4
            gated.append(gate * x + (1 - gate) * summary)  # eq. 5
        out.append(torch.stack(lstm_reference(module.lstm, 0, gated)))  # eq. 6
    return out


# ---------------------------------------------------------------- span ranking of Lee et al. (2017), eq. 7


def antecedent_loss_reference(ranker: SpanRanker, top_spans: torch.Tensor, top_scores: torch.Tensor,
                              speakers: list, genre: int, cluster: list[int]) -> tuple[list[list[float]], float]:
    """The literal version of :meth:`SpanRanker.antecedent_scores` + eq. 7, one span pair at a time (eval
    mode): returns per kept span the scores ``[s(i, ε), s(i, i-1), s(i, i-2), ...]`` and the summed loss."""
    c = ranker.config
    slots = max(1, min(c.max_antecedents, len(top_spans) - 1))
    all_scores, loss = [], 0.0
    genre_vector = ranker.genre_embeddings.weight[genre]
    for i in range(len(top_spans)):
        scores, gold = [torch.tensor(0.0)], []
        for offset in range(1, slots + 1):
            j = i - offset
            if j < 0:
                break
            speaker = ranker.speaker_embeddings.weight[int(speakers[i] == speakers[j])]
            distance = ranker.distance_embeddings.weight[int(bucket_distance(torch.tensor(offset)))]
            g_i, g_j = top_spans[i], top_spans[j]
            pair = torch.cat([g_i, g_j, g_i * g_j, speaker, genre_vector, distance])
            scores.append(top_scores[i] + top_scores[j] + ranker.antecedent_scorer(pair)[0])
            if cluster[i] > 0 and cluster[j] == cluster[i]:
                gold.append(len(scores) - 1)
        gold = gold or [0]
        normaliser = torch.log(sum(torch.exp(s) for s in scores))
        loss += float(normaliser - torch.log(sum(torch.exp(scores[g]) for g in gold)))
        all_scores.append([float(s) for s in scores])
    return all_scores, loss


# ---------------------------------------------------------------- the frozen-feature probe's pairs and bootstrap


def window_pairs_reference(mention_window: list[int]) -> list[tuple[int, int]]:
    """Every pair ``i < j`` of mentions in the same window, by looking at every pair of mentions."""
    pairs = []
    for i in range(len(mention_window)):
        for j in range(i + 1, len(mention_window)):
            if mention_window[i] == mention_window[j]:
                pairs.append((i, j))
    return pairs


def pair_bootstrap_reference(scores: list[np.ndarray], labels: list[np.ndarray], drawn: list[int]) -> dict:
    """AUC and F1 of one document resample, rebuilt: the pairs of every drawn document (a document drawn twice
    gives its pairs twice). AUC is the Mann-Whitney statistic, the share of (positive, negative) pairs that the
    scores order right, ties counting half (what ``sklearn.metrics.roc_auc_score`` computes), None without both
    classes; F1 is the positive class's, deciding "positive" where the score is above 0 (0 with nothing to count)."""
    positives = [float(s) for d in drawn for s, y in zip(scores[d], labels[d]) if y]
    negatives = [float(s) for d in drawn for s, y in zip(scores[d], labels[d]) if not y]
    auc = None
    if positives and negatives:
        right = 0.0
        for p in positives:
            for n in negatives:
                right += 1.0 if p > n else 0.5 if p == n else 0.0
        auc = right / (len(positives) * len(negatives))
    tp = sum(p > 0 for p in positives)
    fn = len(positives) - tp
    fp = sum(n > 0 for n in negatives)
    return {"auc": auc, "f1": 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0}


# ---------------------------------------------------------------- the same-candidate mention recovery probe


def same_candidate_reference(log_p_at: dict, hidden: torch.Tensor, vector: torch.Tensor, batch: Mapping,
                             row: int = 0) -> dict[str, list[int]]:
    """:func:`corefbert.ablation.probes.same_candidate_hits` written out, one mention and one candidate word at a
    time, in float64 Python arithmetic. ``log_p_at[position]`` is the MLM head's log-probability list over the
    vocabulary at a masked position; ``hidden`` ``[batch, seq, hidden]``. A candidate: a word (a run of one
    ``word_ids`` value) whose first and last tokens are copyable, in the mention's document; the best candidate
    under a scorer is the first of the highest score in position order; a hit recovers the masked word's subwords."""
    ids, labels = batch["input_ids"][row].tolist(), batch["labels"][row].tolist()
    word_ids, copy = batch["word_ids"][row].tolist(), batch["copy_mask"][row].tolist()
    documents = batch["document_ids"][row].tolist() if "document_ids" in batch else None
    h = hidden[row].double().tolist()
    trained = vector.double().tolist()
    untrained = [1.0 / len(trained)] * len(trained)
    words = {}  # word id -> [first position, last position]
    for k, w in enumerate(word_ids):
        if w >= 0:
            words.setdefault(w, [k, k])[1] = k
    found = {"same_mlm": [0, 0], "same_copy": [0, 0], "same_copy_untrained": [0, 0]}
    for m in range(batch["mrp_mention_mask"].shape[1]):
        if not batch["mrp_mention_mask"][row, m]:
            continue
        s, t = int(batch["mrp_mention_starts"][row, m]), int(batch["mrp_mention_ends"][row, m])
        target = labels[s:t + 1]
        options = [(a, b) for a, b in sorted(words.values()) if copy[a] and copy[b]
                   and (documents is None or documents[a] == documents[s])]

        def dot(v, i, k):
            return sum(v[d] * h[k][d] * h[i][d] for d in range(len(v)))

        scorers = {"same_mlm": lambda a, b, s=s, t=t: log_p_at[s][ids[a]] + log_p_at[t][ids[b]],
                   "same_copy": lambda a, b, s=s, t=t: dot(trained, s, a) + dot(trained, t, b),
                   "same_copy_untrained": lambda a, b, s=s, t=t: dot(untrained, s, a) + dot(untrained, t, b)}
        for name, score in scorers.items():
            found[name][1] += 1
            if options:
                a, b = max(options, key=lambda o: (score(*o), -o[0]))
                found[name][0] += ids[a:b + 1] == target
    return found
