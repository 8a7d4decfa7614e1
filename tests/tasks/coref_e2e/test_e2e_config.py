"""The end-to-end model's typed config: built without mutation, saved and read back, older files still load."""

import json

import pytest
import torch

from corefbert.errors import CorefBertError
from corefbert.tasks.coref_e2e.config import CorefE2EConfig
from corefbert.tasks.coref_e2e.documents import build_vocabulary, featurize
from corefbert.tasks.coref_e2e.model import build_model, load_model, save_model
from corefbert.tasks.coref_e2e.span_ranking import SpanRankingConfig
from corefbert.text.conll import ConllDocument


def _config(**changes) -> CorefE2EConfig:
    ranker = SpanRankingConfig(context_dim=0, head_dim=0, max_span_width=2, feature_size=4, ffnn_size=8,
                               ffnn_depth=1, dropout=0.0, max_antecedents=3)
    values = {"encoder": "lsl", "ranker": ranker, "genres": ["nw"], "embedding_dim": 6, "char_filters": 2,
              "lstm_size": 4, "attention_size": 4, "lexical_dropout": 0.0, **changes}
    return CorefE2EConfig(**values)


def _document() -> ConllDocument:
    words = [["Anna", "met", "Tom", "."], ["She", "liked", "him", "."]]
    return ConllDocument("d_0", "d", "0", words, [["-"] * 4, ["-"] * 4], "nw", [[(0, 0), (4, 4)], [(2, 2), (6, 6)]])


def test_building_a_model_leaves_the_given_config_as_it_was():
    config = _config()
    model = build_model(config, build_vocabulary([_document()]))
    assert (config.ranker.context_dim, config.ranker.head_dim) == (0, 0)  # the old dict was filled in place
    assert model.config.ranker.context_dim == 8 and model.config.ranker.head_dim > 0
    assert model.config.encoder == "lsl" and not model.config.reads_subwords


def test_config_round_trips_through_its_file_form():
    config = _config(fixed_embeddings=True, max_segment_words=40)
    again = CorefE2EConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config and isinstance(again.ranker, SpanRankingConfig)


def test_a_config_file_from_before_the_segment_settings_reads_with_the_run_defaults():
    values = _config().to_dict()
    del values["max_sentence_words"], values["max_segment_words"]
    old = CorefE2EConfig.from_dict(values)
    assert (old.max_sentence_words, old.max_segment_words) == (250, 5000)


@pytest.mark.parametrize("change, reason", [({"encoder": "gru"}, "encoder 'gru'"), ({"colour": 1}, "unknown keys"),
                                            ({"ranker": {"width": 3}}, "unexpected keyword")])
def test_a_config_that_is_not_one_is_one_line(change, reason):
    with pytest.raises(CorefBertError, match=f"x.json: not an end-to-end coreference model config .*{reason}"):
        CorefE2EConfig.from_dict({**_config().to_dict(), **change}, "x.json")


def test_a_saved_recurrent_model_loads_with_its_config_and_vocabulary_and_scores_the_same(tmp_path):
    document = _document()
    vocab = build_vocabulary([document])
    model = build_model(_config(), vocab).eval()
    save_model(model, str(tmp_path), vocab)
    loaded, loaded_vocab, tokenizer = load_model(str(tmp_path))
    assert tokenizer is None and loaded_vocab == vocab and loaded.config == model.config
    features = featurize(document, loaded.config, loaded_vocab)
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(**features).scores, model(**features).scores)
