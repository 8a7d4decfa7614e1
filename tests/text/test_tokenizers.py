"""The one tokenizer loader and the special-token frame (corefbert/text/tokenizers.py)."""

from __future__ import annotations

import json
import shutil

import pytest

from corefbert.errors import CorefBertError, one_line
from corefbert.text.tokenizers import load_tokenizer, special_token_frame


def test_a_missing_folder_is_one_line_naming_it_and_the_callers_advice(tmp_path):
    missing = tmp_path / "no_such_model"
    with pytest.raises(CorefBertError) as err:
        load_tokenizer(str(missing), advice="pass --tokenizer_name")
    text = str(err.value)
    assert text.startswith(f"{missing}: cannot load a tokenizer (") and text.endswith("; pass --tokenizer_name")
    assert "\n" not in text
    with pytest.raises(CorefBertError, match="no tokenizer: pass --model_name_or_path"):
        load_tokenizer(None)


def test_a_library_error_is_quoted_by_its_first_line(tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    def refuse(path):
        raise OSError("\nthe file is damaged\nIf you were trying to load it from the Hub, make sure ...")

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", refuse)
    with pytest.raises(CorefBertError, match=r"cannot load a tokenizer \(the file is damaged\); check") as err:
        load_tokenizer(str(tmp_path))
    assert "Hub" not in str(err.value)


def test_the_fallback_tokenizer_of_a_folder_without_tokenizer_files_is_refused(tmp_path, tiny_bert_dir):
    bare = tmp_path / "config_only"
    bare.mkdir()
    shutil.copy(tiny_bert_dir / "config.json", bare / "config.json")
    with pytest.raises(CorefBertError, match=r"only \d vocabulary entries .*lacks the tokenizer files"):
        load_tokenizer(str(bare))
    assert len(load_tokenizer(str(bare), check_vocabulary=False)) < 100  # what every task got before
    assert load_tokenizer(str(tiny_bert_dir)).is_fast


def test_the_frame_is_what_the_tokenizer_adds_around_one_sequence(bert_tokenizer, roberta_tokenizer):
    for tokenizer, first, last in ((bert_tokenizer, "cls", "sep"), (roberta_tokenizer, "bos", "eos")):
        prefix, suffix = special_token_frame(tokenizer)
        assert prefix == [getattr(tokenizer, f"{first}_token_id")]
        assert suffix == [getattr(tokenizer, f"{last}_token_id")]
        text = "The keeper of the lighthouse wrote in his notebook."
        plain = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer(text)["input_ids"] == prefix + plain + suffix


def test_one_line_quotes_the_first_line_of_an_error():
    assert one_line(ValueError("\n  what went wrong \nadvice\tmore"), first_line=True) == "what went wrong"
    assert one_line(KeyError(), first_line=True) == "KeyError"  # str() was "" and [0] an IndexError
    assert one_line("a\tb\nc", first_line=True, limit=2) == "a\\"
    assert one_line("two\nlines") == "two\\nlines"  # without first_line: the whole text, escaped


def test_a_quoted_first_line_ending_in_a_colon_keeps_the_list_it_introduces(tmp_path):
    """An empty folder quoted transformers as "(... from one of:)", which reads as cut off."""
    with pytest.raises(CorefBertError) as err:
        load_tokenizer(str(tmp_path))  # a real folder without a tokenizer
    text = str(err.value)
    assert "from one of:)" not in text and "(3) an equivalent slow tokenizer class" in text and "\n" not in text
    listed = "Error(s) in loading:\n\t" + "\n\t".join(f"size mismatch for layer.{i}" for i in range(200))
    assert one_line(listed, first_line=True).endswith(" ...")  # one paragraph, at most 400 characters of it
    assert len(one_line(listed, first_line=True)) <= 404
    assert one_line("from one of:\n(1) a\n(2) b\n\nadvice", first_line=True) == "from one of: (1) a (2) b"


def _deberta_with(tokenizer, folder):
    """A tiny DeBERTa-v2 checkpoint (vocabulary 800) whose tokenizer files are replaced by ``tokenizer``'s."""
    from helpers import save_tiny_family

    save_tiny_family("deberta", folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "spm.model"):
        (folder / name).unlink(missing_ok=True)
    tokenizer.save_pretrained(str(folder))
    return folder


def test_another_familys_tokenizer_beside_the_weights_is_refused_before_training(tmp_path, bert_tokenizer):
    """DeBERTa weights (vocabulary 800) with a 588-entry BERT tokenizer in the same folder pretrained with rc 0 and
    no warning: every id indexed a row that meant another piece."""
    from helpers import synthetic_corpus
    from test_families import _args

    from corefbert.pretraining.run import run_pretraining

    folder = _deberta_with(bert_tokenizer, tmp_path / "deberta")
    with pytest.raises(CorefBertError) as err:
        load_tokenizer(str(folder))
    text = str(err.value)
    assert text.startswith(f"{folder}: the tokenizer is a BertTokenizer, but the model is deberta-v2")
    assert "is a BertTokenizer, but the model is deberta-v2" in text
    assert "DebertaV2Tokenizer" in text and "\n" not in text
    splits = synthetic_corpus(bert_tokenizer, n_train=8, n_eval=4)
    with pytest.raises(CorefBertError, match="another family's tokenizer"):
        run_pretraining(_args(folder, tmp_path / "run"), splits=splits)
    assert not (tmp_path / "run" / "checkpoints").exists()
    # the config may name the tokenizer a checkpoint ships on purpose
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "tokenizer_class": "BertTokenizer"}))
    assert len(load_tokenizer(str(folder))) == len(bert_tokenizer)


def test_a_tokenizer_longer_than_the_models_vocabulary_is_refused(tmp_path, tiny_bert_dir):
    small = tmp_path / "small"
    shutil.copytree(tiny_bert_dir, small)
    config = json.loads((small / "config.json").read_text())
    (small / "config.json").write_text(json.dumps({**config, "vocab_size": 300}))
    with pytest.raises(CorefBertError, match=rf"has {len(load_tokenizer(str(tiny_bert_dir)))} entries, more than "
                                             r"the model's vocabulary of 300 \(bert\)"):
        load_tokenizer(str(small))


def test_every_familys_own_tokenizer_fits(family_dir):
    assert len(load_tokenizer(str(family_dir))) == 800
