"""The end-to-end model's typed config: built without mutation, saved and read back, older files still load."""

import json
import logging

import pytest
import torch
from helpers import FIXTURES, load_cli

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
                                            ({"ranker": {"width": 3}}, r"unknown keys \['ranker.width'\]"),
                                            ({"lstm_size": "big"}, "lstm_size must be an integer"),
                                            ({"ranker": {"context_dim": 8}}, r"missing keys \['ranker.head_dim'\]")])
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


# -------------------------------------------------------------------------------------- flags a saved model fixes

FIXTURE = FIXTURES / "coref_e2e" / "two_docs.conll"
TINY = ["--embedding_dim", "8", "--lstm_size", "8", "--ffnn_size", "8", "--char_filters", "4", "--disable_tqdm"]


@pytest.fixture(scope="module")
def width_1_model(tmp_path_factory):
    """A model saved with --max_span_width 1: 10 of the fixture's 20 gold mentions are wider."""
    out = tmp_path_factory.mktemp("width_1")
    load_cli("finetune/run_coref_e2e.py").main(["--encoder", "bilstm", *TINY, "--max_span_width", "1",
                                                "--train_file", str(FIXTURE), "--do_train", "--max_steps", "1",
                                                "--output_dir", str(out)])
    return out / "last"


def _evaluate(model, tmp_path, *flags):
    return load_cli("finetune/run_coref_e2e.py").main([
        "--encoder", "bilstm", "--model_name_or_path", str(model), "--validation_file", str(FIXTURE), "--do_eval",
        "--disable_tqdm", "--output_dir", str(tmp_path / "eval"), *flags])


def test_evaluating_a_saved_model_logs_the_span_width_it_uses(width_1_model, tmp_path, caplog, fresh_accelerate_state):
    # Before: "... 0 of them wider than --max_span_width 10" (the command-line default) from a model of width 1.
    for flags in ([], ["--max_span_width", "1"]):  # its own value, given, is accepted
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="corefbert.tasks.coref_e2e.task"):
            results = _evaluate(width_1_model, tmp_path / str(len(flags)), *flags)
        summary = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("--validation_file"))
        assert "20 gold mentions, 10 of them wider than the model's max_span_width 1 (saved with it" in summary, \
            summary
        assert "eval_avg_f1" in results


@pytest.mark.parametrize("flags, named", [
    (["--max_span_width", "10"], "--max_span_width 1 (given 10)"),
    (["--max_antecedents", "50", "--dropout", "0.3"], "--max_antecedents 250 (given 50), --dropout 0.2 (given 0.3)"),
    (["--allow_crossing_spans"], "--allow_crossing_spans False (given True)"),
    (["--embeddings_file", "vectors.txt"], "its own vocabulary and vectors (given --embeddings_file)"),
])
def test_a_flag_the_saved_model_fixes_given_with_another_value_is_one_line(width_1_model, tmp_path, capsys, flags,
                                                                          named):
    # Before: silently ignored (the model used its own width, dropout, ...).
    with pytest.raises(SystemExit) as stop:
        _evaluate(width_1_model, tmp_path, *flags)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("error:") == 1 and "Traceback" not in err, err
    line = next(line for line in err.splitlines() if line.startswith("error:"))
    assert f"this model was trained with {named}; a saved model keeps the settings" in line, line
    assert not (tmp_path / "eval" / "all_results.json").exists()
