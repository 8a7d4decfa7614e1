"""``python -m corefbert.resolve``: raw text -> clusters as character spans (JSON) and an HTML view."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import load_cli

from corefbert.resolve import main, render_html, tokenize

FIXTURE = Path(__file__).parent / "fixtures" / "coref_e2e" / "two_docs.conll"
TEXT = "Anna met Tom at the station. She gave him a letter.\n\nThe letter was from her mother."


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from accelerate.state import AcceleratorState, GradientState

    out = tmp_path_factory.mktemp("resolve_model")
    load_cli("finetune/run_coref_e2e.py").main([
        "--encoder", "lsl", "--train_file", str(FIXTURE), "--do_train", "--num_train_epochs", "20",
        "--learning_rate", "1e-2", "--embedding_dim", "32", "--lstm_size", "32", "--ffnn_size", "32",
        "--char_filters", "8", "--dropout", "0", "--lexical_dropout", "0", "--max_span_width", "3",
        "--top_span_ratio", "3", "--allow_crossing_spans", "--disable_tqdm", "--output_dir", str(out)])
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    return out / "last"


def test_tokenize_offsets_and_sentences():
    sentences = tokenize('Anna met Tom. "She smiled!" Then he left.\n\nThe end')
    assert [[w for w, _, _ in s] for s in sentences] == [
        ["Anna", "met", "Tom", "."], ['"', "She", "smiled", "!", '"'], ["Then", "he", "left", "."], ["The", "end"]]
    text = "It's well-known, isn't it?"
    assert [(w, text[s:e]) for w, s, e in tokenize(text)[0]][:3] == [("It's", "It's"), ("well-known", "well-known"),
                                                                      (",", ",")]


def test_resolve_writes_json_and_html(model_dir, tmp_path, capsys):
    result = main(["--model", str(model_dir), "--text", TEXT, "--output_dir", str(tmp_path)])
    printed = json.loads(capsys.readouterr().out.rsplit("\nwrote", 1)[0])
    saved = json.loads((tmp_path / "text.json").read_text(encoding="utf-8"))
    assert saved == result and printed == result["clusters"] and saved["text"] == TEXT
    assert result["clusters"], "a model that fits the fixture links its pronouns"
    for cluster in result["clusters"]:
        assert len(cluster) >= 2
        for mention in cluster:
            assert TEXT[mention["start"]:mention["end"]] == mention["text"]
    names = {m["text"] for c in result["clusters"] for m in c}
    assert {"Anna", "She"} <= names or {"Tom", "him"} <= names
    page = (tmp_path / "text.html").read_text(encoding="utf-8")
    assert page.count('<span class="mention"') == sum(len(c) for c in result["clusters"])
    assert page.count("</span>") == page.count("<span") and "<br>" in page


def test_resolve_input_file(model_dir, tmp_path):
    story = tmp_path / "story.txt"
    story.write_text(TEXT, encoding="utf-8")
    main(["--model", str(model_dir), "--input_file", str(story), "--output_dir", str(tmp_path / "out")])
    assert (tmp_path / "out" / "story.json").is_file() and (tmp_path / "out" / "story.html").is_file()


def test_html_nests_mentions_and_escapes():
    text = "<Her> own mother"
    result = {"text": text, "clusters": [[{"start": 0, "end": 16, "text": text}, {"start": 1, "end": 4, "text": "Her"}]]}
    body = render_html(result).split("<p>")[2]
    assert body.index('<span class="mention"') < body.index("&lt;") < body.rindex('<span class="mention"')


@pytest.mark.parametrize("argv_tail, message", [
    (["--text", "  \n "], "the text is empty"),
    (["--text", "... !!"], None),  # punctuation only still has tokens: resolves to no cluster
    (["--input_file", "{binary}"], "a binary file"),
    (["--input_file", "{latin1}"], "not UTF-8 text"),
    (["--input_file", "{missing}"], "no such file"),
])
def test_bad_input_is_one_line(model_dir, tmp_path, capsys, argv_tail, message):
    (tmp_path / "binary.bin").write_bytes(b"\x00\x01\x02text")
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    paths = {"binary": tmp_path / "binary.bin", "latin1": tmp_path / "latin1.txt", "missing": tmp_path / "nope.txt"}
    argv = ["--model", str(model_dir)] + [a.format(**paths) for a in argv_tail]
    if message is None:
        assert main(argv)["clusters"] == []
        return
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and message in err


def test_not_a_model_folder_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--model", str(tmp_path), "--text", "Anna met Tom."])
    assert "not a coreference model folder" in capsys.readouterr().err
