"""``python -m corefbert.tasks.coref_e2e.resolve``: raw text -> clusters as character spans (JSON) and an HTML view."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers import FIXTURES, can_mount_tmpfs, load_cli, run_under_memory_cap

from corefbert.tasks.coref_e2e.inference import Resolver
from corefbert.tasks.coref_e2e.resolve import load_pipeline, main, render_html, resolve_texts, text_sentences

FIXTURE = FIXTURES / "coref_e2e" / "two_docs.conll"
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


@pytest.fixture(scope="module")
def nlp():
    return load_pipeline()


def test_spacy_sentences_keep_abbreviations_and_exact_offsets(nlp):
    sentences = text_sentences(nlp, "Dr. Smith arrived. He sat.")
    assert [[w[0] for w in s] for s in sentences] == [["Dr.", "Smith", "arrived", "."], ["He", "sat", "."]]
    text = 'Anna met Tom.  "She smiled!" Then he left.\n\nIt\'s well-known, isn\'t it?'
    sentences = text_sentences(nlp, text)
    assert len(sentences) >= 3 and all(text[start:end] == word for s in sentences for word, start, end, _ in s)
    assert "".join(w[0] for s in sentences for w in s) == "".join(text.split())  # no character lost or added


def test_long_texts_go_through_spacy_in_pieces_with_offsets_kept(nlp):
    text = "Anna met Tom at the station. She gave him a letter. " * 1000  # 52,000 characters: three pieces
    words = [w for s in text_sentences(nlp, text) for w in s]
    assert len(words) == 13_000 and all(text[start:end] == word for word, start, end, _ in words)


def test_dr_smith_stays_whole(model_dir):
    (result,) = resolve_texts(Resolver(str(model_dir)), load_pipeline("blank"), ["Dr. Smith arrived. He sat."])
    mentions = [m["text"] for c in result["clusters"] for m in c]
    assert all(m not in ("Dr.", "Smith") for m in mentions), mentions
    assert text_sentences(load_pipeline("blank"), "Dr. Smith arrived. He sat.")[0][0][0] == "Dr."


def test_jsonl_of_many_texts_writes_one_result_per_line(model_dir, tmp_path, capsys):
    texts = [{"id": "a", "text": TEXT}, {"text": "Dr. Smith arrived. He sat."}, {"id": "c", "text": TEXT[:51]}]
    source = tmp_path / "many.jsonl"
    source.write_text("\n".join(json.dumps(t) for t in texts) + "\n\n", encoding="utf-8")
    out = tmp_path / "out"
    summary = main(["--model", str(model_dir), "--input_file", str(source), "--output_dir", str(out),
                    "--batch_size", "2"])
    assert summary == {"texts": 3, "output": str(out / "many.jsonl")}
    lines = [json.loads(line) for line in (out / "many.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [line["id"] for line in lines] == ["a", "2", "c"]
    for line, given in zip(lines, texts):
        assert line["text"] == given["text"] and (out / "many" / f"{line['id']}.html").is_file()
        (alone,) = resolve_texts(Resolver(str(model_dir)), load_pipeline(), [given["text"]])
        assert line["clusters"] == alone["clusters"], "a batch of texts gives each one's own clusters"
    assert "resolve" in capsys.readouterr().err  # the progress bar


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
    (["--text", "... !!"], None),  # punctuation only still has tokens: a result, not an error
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
        # spaCy reads "..." as one token; this tiny model, fitted with every span kept, may then link the two
        # punctuation tokens (the regex tokenizer's five single marks gave it nothing to link): any clusters
        # are fine as long as they point into the text.
        result = main(argv)
        assert all(result["text"][m["start"]:m["end"]] == m["text"] for c in result["clusters"] for m in c)
        return
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and message in err


def test_not_a_model_folder_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--model", str(tmp_path), "--text", "Anna met Tom."])
    assert "not a coreference model folder" in capsys.readouterr().err


class _TagChecker(HTMLParser):
    """Checks that tags nest and collects each mention's fragments: ``data-mention`` -> cluster ids seen, plus
    the cluster numbers written in ``<sub>`` labels and which mention's fragment holds each."""

    def __init__(self):
        super().__init__()
        self.stack: list[tuple[str, dict]] = []
        self.clusters_of: dict[str, set[str]] = {}
        self.labels: list[tuple[str, str]] = []  # (label text, cluster id of the span holding it)
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("meta", "br"):  # void elements: no end tag
            return
        attributes = dict(attrs)
        self.stack.append((tag, attributes))
        if tag == "span":
            self.clusters_of.setdefault(attributes["data-mention"], set()).add(attributes["data-cluster"])

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1][0] == tag, f"</{tag}> closes <{self.stack[-1][0]}>: not well-formed"
        self.stack.pop()

    def handle_data(self, data):
        if self.stack and self.stack[-1][0] == "sub":
            self.labels.append((data, self.stack[-2][1].get("data-cluster")))


@pytest.mark.parametrize("clusters, label", [
    # crossing: [Anna met [Tom] and she] ... him: cluster 1 "Anna met Tom" crosses cluster 2 "Tom and she"
    ([[(0, 12), (17, 20)], [(9, 20), (25, 28)]], "crossing"),
    ([[(0, 4), (17, 20)], [(0, 12)], [(9, 12), (25, 28)]], "nested and sharing a start"),
    ([[(0, 4)]], "one cluster"),
])
def test_html_is_well_formed_and_labels_each_mention_with_its_own_cluster(clusters, label):
    text = "Anna met Tom and she saw him."
    result = {"text": text, "clusters": [[{"start": s, "end": e, "text": text[s:e]} for s, e in c] for c in clusters]}
    page = render_html(result)
    checker = _TagChecker()
    checker.feed(page)
    checker.close()
    assert not checker.stack, "every tag is closed"
    mentions = [(s, e, number + 1) for number, cluster in enumerate(clusters) for s, e in cluster]
    assert sorted(checker.clusters_of) == sorted(str(i) for i in range(len(mentions))), "every mention is shown"
    for index, (_, _, number) in enumerate(mentions):
        assert checker.clusters_of[str(index)] == {str(number)}, "one mention's fragments carry one cluster id"
    assert sorted(checker.labels) == sorted((str(n), str(n)) for _, _, n in mentions), "labels sit in their spans"
    count = len(clusters)
    assert f"<p>{count} cluster{'s' if count != 1 else ''}</p>" in page


def test_resolve_on_500_kb_without_sentence_breaks_stays_under_a_memory_cap(tmp_path):
    story = tmp_path / "unbroken.txt"
    story.write_text(("Anna met Tom and she gave him a letter then " * 12_000)[:500_000], encoding="utf-8")
    train = ["--encoder", "lsl", "--train_file", str(FIXTURE), "--do_train", "--max_steps", "1",
             "--max_antecedents", "50", "--embedding_dim", "32", "--lstm_size", "32", "--ffnn_size", "32",
             "--char_filters", "8", "--max_span_width", "3", "--disable_tqdm", "--output_dir", str(tmp_path / "m")]
    setup = f"""
        import json
        from helpers import load_cli
        from corefbert.tasks.coref_e2e.resolve import main
        load_cli("finetune/run_coref_e2e.py").main({train!r})
        main(["--model", {str(tmp_path / "m" / "last")!r}, "--text", "Anna met Tom. She gave him a letter."])
    """
    # About 100,000 words in one sentence: the model's default bounds (sentences of 250 words, segments of
    # 5,000) hold each forward pass to a few MB of spans and antecedent scores.
    work = f"""
        result = main(["--model", {str(tmp_path / "m" / "last")!r}, "--input_file", {str(story)!r},
                       "--output_dir", {str(tmp_path / "view")!r}])
        print("CLUSTERS", len(result["clusters"]))
    """
    # 600 s: overlapping windows read about a third more words than the touching segments this test was timed on.
    done = run_under_memory_cap(textwrap.dedent(setup) + "cap_memory()\n" + textwrap.dedent(work), headroom_mb=500,
                                timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CLUSTERS" in done.stdout.splitlines()[-1]
    saved = json.loads((tmp_path / "view" / "unbroken.json").read_text(encoding="utf-8"))
    for cluster in saved["clusters"]:
        for mention in cluster:
            assert saved["text"][mention["start"]:mention["end"]] == mention["text"]


def test_long_text_is_resolved_segment_by_segment(model_dir, nlp):
    # Within the bounds: one window, the same clusters as before; with one-sentence windows that share nothing
    # every cluster lies inside one sentence, and offsets still point into the whole text.
    (whole,) = resolve_texts(Resolver(str(model_dir)), nlp, [TEXT])
    assert whole["clusters"], "the fixture model links something in TEXT"
    (pieces,) = resolve_texts(Resolver(str(model_dir), max_segment_words=12, overlap_words=0), nlp, [TEXT])
    sentences = [(s[0][1], s[-1][2]) for s in text_sentences(nlp, TEXT)]
    for cluster in pieces["clusters"]:
        inside = {next(i for i, (lo, hi) in enumerate(sentences) if lo <= m["start"] and m["end"] <= hi)
                  for m in cluster}
        assert len(inside) == 1
        for mention in cluster:
            assert TEXT[mention["start"]:mention["end"]] == mention["text"]


def _output_dir_is_a_file(work: Path) -> list[str]:
    (work / "taken").write_text("x", encoding="utf-8")
    return ["--text", "Anna met Tom.", "--output_dir", str(work / "taken")]


@pytest.mark.parametrize("make, message", [
    (_output_dir_is_a_file, "--output_dir names an existing file"),
    (lambda d: ["--input_file", str(d)], "a folder, not a file"),
])
def test_output_file_and_input_folder_are_one_line_before_the_model_loads(tmp_path, capsys, make, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["--model", str(tmp_path / "no_model"), *make(tmp_path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and message in err, err


def test_a_50k_word_text_resolves_in_merged_windows_under_a_memory_cap(tmp_path):
    """50,600 words (59,800 spaCy tokens; 4,600 two-sentence paragraphs) in overlapping windows of
    the model's 5,000 words, with the default spaCy pipeline, within 400 MiB above what imports and loading map."""
    story = tmp_path / "long.txt"
    story.write_text("Anna met Tom at the station. She gave him a letter.\n" * 4600, encoding="utf-8")
    # Fitted to the fixture (so it links pronouns), with the paper's pruning (λ = 0.4) and K = 50.
    train = ["--encoder", "lsl", "--train_file", str(FIXTURE), "--do_train", "--num_train_epochs", "20",
             "--learning_rate", "1e-2", "--dropout", "0", "--lexical_dropout", "0", "--max_antecedents", "50",
             "--embedding_dim", "32", "--lstm_size", "32", "--ffnn_size", "32", "--char_filters", "8",
             "--max_span_width", "3", "--disable_tqdm", "--output_dir", str(tmp_path / "m")]
    setup = f"""
        import json, resource
        from helpers import load_cli
        from corefbert.tasks.coref_e2e.resolve import main
        load_cli("finetune/run_coref_e2e.py").main({train!r})
        main(["--model", {str(tmp_path / "m" / "last")!r}, "--text", "Anna met Tom. She gave him a letter."])
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    """
    work = f"""
        result = main(["--model", {str(tmp_path / "m" / "last")!r}, "--input_file", {str(story)!r},
                       "--output_dir", {str(tmp_path / "view")!r}])
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024
        print("CLUSTERS", len(result["clusters"]), "PEAK_GROWTH_MB", grown)
    """
    done = run_under_memory_cap(textwrap.dedent(setup) + "cap_memory()\n" + textwrap.dedent(work), headroom_mb=400,
                                timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CLUSTERS" in done.stdout.splitlines()[-1], done.stdout[-500:]
    print(done.stdout.splitlines()[-1])
    saved = json.loads((tmp_path / "view" / "long.json").read_text(encoding="utf-8"))
    mentions = [m for cluster in saved["clusters"] for m in cluster]
    assert all(saved["text"][m["start"]:m["end"]] == m["text"] for m in mentions)
    assert max(m["end"] for m in mentions) > len(saved["text"]) - 200, "the last window is read too"
    assert len({(m["start"], m["end"]) for m in mentions}) == len(mentions), "merged clusters share no mention"


# Resolve writes only its own outputs, whole, never through a link, with ids checked
# before the model loads.

def _one_line_exit(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("name, content", [
    ("texts.jsonl", '{"id": "a", "text": "Anna met Tom.", "source": "kept"}\n'),
    ("story.json", '{"text": "Anna met Tom."}'),  # read as one text: writes <stem>.json beside it
])
def test_resolve_never_writes_onto_its_input(model_dir, tmp_path, capsys, name, content):
    data = tmp_path / "data"
    data.mkdir()
    source = data / name
    source.write_text(content, encoding="utf-8")
    (tmp_path / "via_link").symlink_to(data)
    for output_dir in (data, tmp_path / "via_link"):
        err = _one_line_exit(capsys, ["--model", str(model_dir), "--input_file", str(source),
                                      "--output_dir", str(output_dir)])
        assert f"would replace the input {source}" in err
    assert source.read_text(encoding="utf-8") == content and sorted(p.name for p in data.iterdir()) == [name]


def test_links_planted_at_the_output_names_are_replaced_not_written_through(model_dir, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious", encoding="utf-8")
    source = tmp_path / "many.jsonl"
    source.write_text('{"id": "p", "text": "Anna met Tom. She smiled."}\n', encoding="utf-8")
    out = tmp_path / "out"
    (out / "many").mkdir(parents=True)
    for planted in (out / "many.jsonl", out / "many" / "p.html", out / "text.json", out / "text.html"):
        planted.symlink_to(victim)
    main(["--model", str(model_dir), "--input_file", str(source), "--output_dir", str(out), "--disable_tqdm"])
    main(["--model", str(model_dir), "--text", "Anna met Tom. She smiled.", "--output_dir", str(out)])
    assert victim.read_text(encoding="utf-8") == "precious"
    for written in (out / "many.jsonl", out / "many" / "p.html", out / "text.json", out / "text.html"):
        assert written.is_file() and not written.is_symlink(), written
    assert json.loads((out / "many.jsonl").read_text(encoding="utf-8"))["id"] == "p"


def test_a_pages_folder_that_is_a_link_is_refused(model_dir, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    source = tmp_path / "many.jsonl"
    source.write_text('{"text": "Anna met Tom."}\n', encoding="utf-8")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "many").symlink_to(elsewhere)
    err = _one_line_exit(capsys, ["--model", str(model_dir), "--input_file", str(source), "--output_dir",
                                  str(tmp_path / "out")])
    assert "is a symbolic link" in err and not list(elsewhere.iterdir())


@pytest.mark.parametrize("lines, message", [
    (['{"id": "a", "text": "x y"}', '{"id": "a", "text": "z"}'], r"many.jsonl:2: the id 'a' is taken by line 1"),
    (['{"text": "x y"}', '{"id": "1", "text": "z"}'], r"many.jsonl:2: the id '1' is taken by line 1"),
    (['{"id": 1, "text": "x y"}', '{"id": "1", "text": "z"}'], r"many.jsonl:2: the id '1' is taken by line 1"),
    (['{"id": null, "text": "x"}'], r'many.jsonl:1: "id" null is not a string or a number'),
    (['{"id": {"a": 1}, "text": "x"}'], r'many.jsonl:1: "id" \{"a": 1\} is not a string or a number'),
    (['{"id": true, "text": "x"}'], r'many.jsonl:1: "id" true is not a string or a number'),
    (['{"id": "' + "x" * 300 + '", "text": "x"}'], r'many.jsonl:1: "id" is 300 bytes long; a page name takes at most 250'),
    (['{"id": "a\\u0000b", "text": "x"}'], r"""many.jsonl:1: "id" 'a\\x00b' holds the character '\\x00'"""),
    (['{"id": "../up", "text": "x"}'], r"""many.jsonl:1: "id" '../up' cannot name a file"""),
])
def test_ids_are_checked_before_the_model_loads(tmp_path, capsys, lines, message):
    source = tmp_path / "many.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # No model at --model: an id error can only come first.
    err = _one_line_exit(capsys, ["--model", str(tmp_path / "no_model"), "--input_file", str(source),
                                  "--output_dir", str(tmp_path / "out")])
    assert re.search(message, err), err
    assert not (tmp_path / "out").exists()


def test_jsonl_lines_holding_unicode_line_separators_are_read_whole(model_dir, tmp_path):
    texts = ["Anna met Tom.\u2028She smiled.", "Tom left.\u0085He ran.", "A\u2029B"]
    source = tmp_path / "seps.jsonl"
    source.write_bytes("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts).encode("utf-8"))
    assert "\u2028" in source.read_text(encoding="utf-8")  # raw in the file, not escaped
    main(["--model", str(model_dir), "--input_file", str(source), "--output_dir", str(tmp_path / "out"),
          "--disable_tqdm"])
    rows = [json.loads(line) for line in (tmp_path / "out" / "seps.jsonl").read_text(encoding="utf-8").split("\n")
            if line]
    assert [r["text"] for r in rows] == texts and [r["id"] for r in rows] == ["1", "2", "3"]


def test_standard_input_and_a_named_pipe_are_read(model_dir, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    command = [sys.executable, "-m", "corefbert.tasks.coref_e2e.resolve", "--model", str(model_dir),
               "--spacy_model", "blank"]
    done = subprocess.run([*command, "--input_file", "-"], input=TEXT, capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    by_stdin = json.loads(done.stdout)
    jsonl = json.dumps({"id": "s", "text": TEXT}) + "\n"
    done = subprocess.run([*command, "--input_file", "/dev/stdin", "--input_format", "jsonl", "--output_dir",
                           str(tmp_path / "out"), "--disable_tqdm"], input=jsonl, capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out" / "stdin.jsonl").read_text(encoding="utf-8"))["clusters"] == by_stdin
    pipe = tmp_path / "texts.fifo"
    os.mkfifo(pipe)
    writer = threading.Thread(target=lambda: pipe.write_text(TEXT, encoding="utf-8"))
    writer.start()
    result = main(["--model", str(model_dir), "--spacy_model", "blank", "--input_file", str(pipe)])
    writer.join(timeout=60)
    assert result["clusters"] == by_stdin and result["text"] == TEXT


def test_standard_input_redirected_from_an_output_is_refused_as_dev_stdin_is(model_dir, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3]), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "out"
    out.mkdir()
    for name, content, flags in (("stdin.json", '"Anna met Tom. She smiled."', []),
                                 ("stdin.jsonl", '{"text": "Anna met Tom. She smiled."}\n', ["--input_format", "jsonl"])):
        source = out / name  # `resolve --input_file - --output_dir out < out/stdin.json` would write onto it
        source.write_text(content, encoding="utf-8")
        for given in ("-", "/dev/stdin"):
            with open(source, encoding="utf-8") as handle:
                done = subprocess.run([sys.executable, "-m", "corefbert.tasks.coref_e2e.resolve", "--model",
                                       str(model_dir), "--spacy_model", "blank", "--input_file", given,
                                       "--output_dir", str(out), "--disable_tqdm", *flags], stdin=handle,
                                      capture_output=True, text=True, env=env, timeout=300)
            assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-2000:]
            assert f"{given}: the output {out / name} would replace the input {given}" in done.stderr, done.stderr
        assert source.read_text(encoding="utf-8") == content
    assert sorted(p.name for p in out.iterdir()) == ["stdin.json", "stdin.jsonl"]


def _cap_address_space():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # an unbounded read fails here, not the machine


def test_endless_standard_input_and_a_file_over_the_bound_are_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3]), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "corefbert.tasks.coref_e2e.resolve", "--model", str(tmp_path / "no_model"),
               "--spacy_model", "blank"]
    endless = subprocess.Popen(["yes", "Anna met Tom. She smiled."], stdout=subprocess.PIPE)
    try:
        done = subprocess.run([*command, "--input_file", "-"], stdin=endless.stdout, capture_output=True, text=True,
                              env=env, timeout=300, preexec_fn=_cap_address_space)
    finally:
        endless.kill()
        endless.wait()
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.startswith("error: -: more than 64 MiB (--max_input_mb 64)"), done.stderr
    big = tmp_path / "big.txt"
    big.write_bytes(b"Anna met Tom. " * 80_000)  # 1.07 MiB
    done = subprocess.run([*command, "--input_file", str(big), "--max_input_mb", "1"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 2 and done.stderr == f"error: {big}: more than 1 MiB (--max_input_mb 1); split the " \
        "input into several runs or raise --max_input_mb\n", done.stderr


@pytest.mark.slow
def test_a_full_disk_while_writing_results_is_one_line_and_leaves_no_half_file(model_dir, tmp_path):
    mount = tmp_path / "small"
    if not can_mount_tmpfs(mount):
        pytest.skip("mounting a tmpfs needs root and unshare (CI and the dev machines have both)")
    source = tmp_path / "many.jsonl"
    source.write_text("".join(json.dumps({"id": f"t{i}", "text": TEXT * 5}) + "\n" for i in range(60)),
                      encoding="utf-8")
    # The tmpfs lives in the private namespace only: list what is left there before it goes.
    script = ('mount -t tmpfs -o size=64k tmpfs "$1" || exit 99; m="$1"; shift; "$@"; code=$?; '
              'ls -A "$m/out" > "$m/../listing" 2>&1; exit $code')
    done = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(mount), sys.executable, "-m", "corefbert.tasks.coref_e2e.resolve", "--model",
                           str(model_dir), "--spacy_model", "blank", "--input_file", str(source), "--output_dir",
                           str(mount / "out"), "--disable_tqdm"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])})
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {mount}/out/many") and "(disk full); nothing was written there" in last, last
    assert "Traceback" not in done.stderr
    assert (tmp_path / "listing").read_text().split() == ["many"], "no many.jsonl, whole or half, and no scratch"


@pytest.mark.parametrize("family_dir", ["modernbert", "deberta"], indirect=True)
def test_resolve_and_the_spacy_component_read_a_model_on_another_encoder_family(family_dir, tmp_path,
                                                                                 fresh_accelerate_state):
    """A coreference model whose ``bert`` encoder is a ModernBERT (byte-level BPE in ``[CLS]``/``[SEP]``)
    or a DeBERTa-v3 (SentencePiece) resolves text: ``resolve`` gives mentions at their exact characters, and the
    spaCy component puts the same clusters on the Doc, batched as one text at a time."""
    import spacy

    out = tmp_path / "model"
    load_cli("finetune/run_coref_e2e.py").main([
        "--encoder", "bert", "--model_name_or_path", str(family_dir), "--train_file", str(FIXTURE), "--do_train",
        "--max_steps", "1", "--max_seq_length", "32", "--ffnn_size", "32", "--max_span_width", "3",
        "--disable_tqdm", "--output_dir", str(out)])
    result = main(["--model", str(out / "last"), "--text", TEXT, "--output_dir", str(tmp_path / "resolved")])
    assert result["clusters"], "an untrained ranker still links its top spans"
    assert all(TEXT[m["start"]:m["end"]] == m["text"] for cluster in result["clusters"] for m in cluster)
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("corefbert_coref", config={"model": str(out / "last")})
    texts = [TEXT, "Tom saw Anna. He waved at her.", "The letter was from her mother."]
    batched = [[[(s.start, s.end) for s in c] for c in doc._.coref_clusters] for doc in nlp.pipe(texts, batch_size=3)]
    assert batched == [[[(s.start, s.end) for s in c] for c in nlp(text)._.coref_clusters] for text in texts]
    doc = nlp(TEXT)
    assert doc._.coref_clusters and all(TEXT[s.start_char:s.end_char] == s.text for c in doc._.coref_clusters for s in c)
