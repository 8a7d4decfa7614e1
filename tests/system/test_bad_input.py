"""Every CLI x every kind of bad input: exit status 2 and exactly one ``error:`` line, no traceback.

The CLIs run in-process (their ``main(argv)``, wrapped by ``cli_entry``): a subprocess pays 5-10 s of
torch + transformers start-up per case here. The observed table (CLI, bad input, message) is compared
with the one in ``docs/guides/hardening.md`` so the documentation cannot drift; regenerate it with

    COREFBERT_WRITE_BAD_INPUT_TABLE=1 pytest tests/system/test_bad_input.py

which rewrites the table between the markers in that file (linked from the README).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import FIXTURES, ROOT, load_cli

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")

TABLE_DOC = ROOT / "docs" / "guides" / "hardening.md"  # the table lives in the hardening guide
START, END = "<!-- bad-input-table:start -->", "<!-- bad-input-table:end -->"
BINARY = bytes(range(256)) * 4
NOT_UTF8 = "Gauß und Café\tx\n".encode("latin-1")


@dataclass
class Case:
    cli: str  # path of the script, relative to the repository root
    bad: str  # the kind of bad input, as the table names it
    argv: Callable[[Path, Path], list[str]]  # (workdir, tiny model dir) -> arguments
    fault: Callable[[object], None] | None = None  # injects a fault through pytest's monkeypatch


def _file(work: Path, name: str, data: bytes | str) -> str:
    path = work / name
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return str(path)


def _truncated(path: Path, work: Path, name: str) -> str:
    data = path.read_bytes()
    return _file(work, name, data[: len(data) // 2])


def _a_file(work: Path) -> str:
    return _file(work, "not_a_dir", "I am a file\n")


def _mutated_json(path: Path, work: Path, name: str, change: Callable[[object], None]) -> str:
    document = json.loads(path.read_text(encoding="utf-8"))
    change(document)
    return _file(work, name, json.dumps(document))


def _mutated_jsonl(path: Path, work: Path, name: str, change: Callable[[dict], None], key: str = "claim") -> str:
    """``change`` applied to the first line that has ``key`` (MRQA files open with a header line)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    change(next(row for row in rows if key in row))
    return _file(work, name, "\n".join(json.dumps(r) for r in rows) + "\n")


# --- per-CLI argument builders ----------------------------------------------------------------------------

def glue(*extra):
    return lambda w, m: ["--model_name_or_path", str(m), "--output_dir", str(w / "out"), *extra]


def glue_file(task, make, split="--train_file", flag="--do_train"):
    return lambda w, m: glue("--task_name", task, split, make(w), flag)(w, m)


RTE = FIXTURES / "glue" / "RTE" / "train.tsv"
QUOREF = FIXTURES / "quoref" / "quoref_tiny.json"
MRQA = FIXTURES / "mrqa" / "mrqa_tiny.jsonl"
DOCRED = FIXTURES / "docred" / "dev.json"
REL_INFO = FIXTURES / "docred" / "rel_info.json"
FEVER = FIXTURES / "fever" / "train.jsonl"
GAP = FIXTURES / "coref" / "gap.tsv"


def finetune(*extra):
    return lambda w, m: ["--model_name_or_path", str(m), "--output_dir", str(w / "out"), *extra]


def qa(flag, make, *extra):
    # The tiny model has 258 positions: a smaller window so the data, not the model, is what fails.
    return with_file(flag, make, "--max_seq_length", "128", "--doc_stride", "32", *extra)


def with_file(flag, make, *extra):
    return lambda w, m: finetune(flag, make(w), *extra)(w, m)


def docred(make_train=None, *extra):
    def argv(w, m):
        train = make_train(w) if make_train else str(DOCRED)
        return finetune("--train_file", train, "--rel_info_file", str(REL_INFO), "--do_train", *extra)(w, m)
    return argv


def fever(make, *extra):
    return with_file("--train_file", make, "--do_train", *extra)


def prepare(*extra):
    # 128: the tiny model has 258 positions, and a longer --max_seq_length is refused (a case of its own)
    return lambda w, m: ["--model_name_or_path", str(m), "--output_dir", str(w / "prepared"), "--max_seq_length",
                         "128", *extra]


def prepare_file(make, *extra):
    return lambda w, m: prepare("--train_file", make(w), *extra)(w, m)


def mrp(*extra):
    return lambda w, m: ["--model_name_or_path", str(m), "--output_dir", str(w / "run"), "--max_steps", "1", *extra]


def _tsv_bad_label(w):
    return _file(w, "rte_label.tsv", RTE.read_text().replace("not_entailment", "maybe", 1))


def _tsv_short_row(w):
    lines = RTE.read_text().splitlines()
    return _file(w, "rte_short.tsv", "\n".join([lines[0], lines[1].rsplit("\t", 1)[0], *lines[2:]]) + "\n")


def _gap_offset(w):
    lines = GAP.read_text().splitlines()
    fields = lines[1].split("\t")
    fields[3] = "9999"
    return _file(w, "gap_offset.tsv", "\n".join([lines[0], "\t".join(fields), *lines[2:]]) + "\n")


def _gap_columns(w):
    lines = GAP.read_text().splitlines()
    return _file(w, "gap_columns.tsv", "\n".join([lines[0], lines[1].rsplit("\t", 2)[0], *lines[2:]]) + "\n")


def _docred_offset(w):
    def change(docs):
        docs[0]["vertexSet"][0][0]["pos"] = [500, 501]
    return _mutated_json(DOCRED, w, "docred_offset.json", change)


def _docred_relation(w):
    def change(docs):
        docs[0]["labels"][0]["r"] = "P_unknown"
    return _mutated_json(DOCRED, w, "docred_relation.json", change)


def _quoref_wrong_type(w):
    def change(doc):
        doc["data"][0]["paragraphs"][0]["context"] = 7
    return _mutated_json(QUOREF, w, "quoref_type.json", change)


def _mrqa_wrong_type(w):
    def change(row):
        row["qas"] = "not a list"
    return _mutated_jsonl(MRQA, w, "mrqa_type.jsonl", change, key="context")


def _fever_label(w):
    def change(row):
        row["label"] = "PERHAPS"
    return _mutated_jsonl(FEVER, w, "fever_label.jsonl", change)


def _fever_evidence(w):
    def change(row):
        row["evidence"] = [[["x"]]]
    return _mutated_jsonl(FEVER, w, "fever_evidence.jsonl", change)


def _jsonl_no_text(w):
    return _file(w, "corpus.jsonl", '{"body": "Anna met Bob."}\n')


def _bad_yaml(w):
    return _file(w, "bad.yaml", "max_steps: [1\n")


def _yaml_unknown(w):
    return _file(w, "unknown.yaml", "no_such_argument: 1\n")


def _missing(w):
    return str(w / "missing.txt")


def _empty(w):
    return _file(w, "empty.txt", "")


def _binary(w):
    return _file(w, "binary.txt", BINARY)


def _latin1(w):
    return _file(w, "latin1.txt", NOT_UTF8)


def _earlier_run(w):
    out = w / "earlier_run"
    out.mkdir()
    (out / "log.jsonl").write_text('{"split": "eval", "step": 0}\n')
    return str(out)


def _no_trackers(monkeypatch) -> None:
    import accelerate.tracking
    import accelerate.utils

    for module in (accelerate.utils, accelerate.tracking):
        monkeypatch.setattr(module, "is_tensorboard_available", lambda: False)
        monkeypatch.setattr(module, "is_wandb_available", lambda: False)


def _docred_without_head(w, m):
    """A fine-tuned DocRED folder missing docred_head.safetensors (e.g. written before the encoder/head split)."""
    old = w / "docred_old"
    shutil.copytree(m, old)
    relations = ["Na", *json.loads(REL_INFO.read_text(encoding="utf-8"))]
    (old / "docred_head.json").write_text(json.dumps({"relations": relations, "threshold": 0.5,
                                                      "entity_hidden_size": 8, "distance_embedding_size": 4}))
    return ["--model_name_or_path", str(old), "--output_dir", str(w / "out"),
            "--validation_file", str(DOCRED), "--do_eval"]


def _mrp_yaml(text):
    return lambda w, m: ["--config", _file(w, "run.yaml", text), "--model_name_or_path", str(m),
                         "--output_dir", str(w / "run"), "--dataset_dir", str(w)]


def _final_folder(w):
    """The final/ model folder of an earlier run (weights and config, no trainer state)."""
    final = w / "old" / "final"
    final.mkdir(parents=True)
    (final / "config.json").write_text("{}")
    return str(final)


def _config_only(w, m):
    """A model folder with config.json alone: transformers falls back to a 5-token tokenizer."""
    folder = w / "config_only"
    folder.mkdir()
    shutil.copy(Path(m) / "config.json", folder / "config.json")
    return folder


def _fifo(w):
    path = w / "pipe.txt"
    os.mkfifo(path)
    return str(path)


def _text_folder(w):
    folder = w / "texts"
    folder.mkdir()
    shutil.copy(FIXTURES / "tiny_corpus.txt", folder / "tiny_corpus.txt")
    return str(folder)


def _tsv_tab_in_sentence(w):
    """MRPC/RTE sentences with a tab inside: the reader used to shift the columns silently."""
    lines = RTE.read_text().splitlines()
    index, sentence1, sentence2, label = lines[1].split("\t")
    row = "\t".join([index, sentence1.replace(" ", "\t", 1), sentence2, label])
    return _file(w, "rte_tab.tsv", "\n".join([lines[0], row, *lines[2:]]) + "\n")


def _pickled(w, m):
    """The tiny model's folder with its weights as a pickle (pytorch_model.bin) instead of safetensors."""
    import torch
    from safetensors.torch import load_file

    folder = w / "pickled"
    shutil.copytree(m, folder)
    torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    return folder


def _official(w, m, weights=True, **config_changes):
    """An official-format CorefBERT folder (2.x config without model_type, vocab.txt, pytorch_model.bin)."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    out = w / "official"
    out.mkdir(exist_ok=True)
    config = json.loads((m / "config.json").read_text())
    for key in ("model_type", "architectures"):
        config.pop(key, None)
    (out / "config.json").write_text(json.dumps({**config, **config_changes}))
    vocab = AutoTokenizer.from_pretrained(m).get_vocab()
    (out / "vocab.txt").write_text("\n".join(sorted(vocab, key=vocab.get)) + "\n")
    if weights:
        torch.save(load_file(m / "model.safetensors"), out / "pytorch_model.bin")
    return str(out)


class _RunsCode:
    def __reduce__(self):
        import os

        return os.system, ("echo pwned",)


def _official_pickle_with_code(w, m):
    import torch

    out = _official(w, m, weights=False)
    torch.save({"coef": _RunsCode()}, Path(out) / "pytorch_model.bin")
    return out


def _nonempty(w):
    (w / "full").mkdir()
    (w / "full" / "x").write_text("x")
    return str(w / "full")


def _official_nan(w, m):
    import torch

    out = _official(w, m)
    state = torch.load(Path(out) / "pytorch_model.bin", weights_only=True)
    next(t for t in state.values() if t.is_floating_point())[0] = float("nan")
    torch.save(state, Path(out) / "pytorch_model.bin")
    return out


PAIRS_CONLL = FIXTURES / "pronoun_pairs" / "story.conll"


def pairs(make):
    return lambda w, m: ["--input", make(w), "--output_dir", str(w / "pairs")]


def _conll_short_row(w):
    return _file(w, "short.conll", PAIRS_CONLL.read_text().replace("\tmet\t_", "\tmet", 1))


def _conll_unbalanced(w):
    return _file(w, "unbalanced.conll", PAIRS_CONLL.read_text().replace("2)\n", "-\n", 1))


def _conll_no_end(w):
    return _file(w, "no_end.conll", PAIRS_CONLL.read_text().replace("#end document\n", ""))



E2E_FIX = str(FIXTURES / "coref_e2e" / "two_docs.conll")
SHORT_CONLL = "#begin document (d); part 0\nd\t0\t0\tHi\n\n#end document\n"


def e2e(*extra):
    return lambda w, m: ["--output_dir", str(w / "out"), *[x(w) if callable(x) else x for x in extra]]


PAIR_PAIRS = FIXTURES / "pronoun_pairs" / "pairs16.jsonl"


def pair_classifier(make, *extra):
    return lambda w, m: ["--output_dir", str(w / "out"), "--train_file", make(w), "--do_train", *extra]


def _pairs_label(w):
    def change(row):
        row["label"] = "yes"
    return _mutated_jsonl(PAIR_PAIRS, w, "pairs_label.jsonl", change, key="label")


def _pairs_type(w):
    def change(row):
        row["type"] = "wrong"
    return _mutated_jsonl(PAIR_PAIRS, w, "pairs_type.jsonl", change, key="type")


def _pairs_label_float(w):
    def change(row):
        row["label"] = 1.0
    return _mutated_jsonl(PAIR_PAIRS, w, "pairs_label_float.jsonl", change, key="label")


def _pairs_correct_only(w):
    return _file(w, "correct_only.jsonl", PAIR_PAIRS.read_text(encoding="utf-8").splitlines()[0] + "\n")


def _glove_ragged(w):
    return _file(w, "glove.txt", "the 0.1 0.2\nhe 0.3\n")


def _other_pair_model(w):
    _file(w, "pair_model.json", '{"model_type": "da", "vocab_size": 5}')
    return str(w)



def ablation(*extra):
    return lambda w, m: ["--model_name_or_path", str(m), "--output_dir", str(w / "study"), "--max_steps", "1", *extra]


def babi_file(data):
    """A --data_dir holding one qa1 training file with ``data``."""
    def argv(w, _model):
        folder = w / "babi"
        folder.mkdir(exist_ok=True)
        _file(folder, "qa1_bad_train.txt", data)
        return ["--data_dir", str(folder), "--task_ids", "1", "--do_train", "--do_eval", "--output_dir", str(w / "out")]
    return argv


def babi_finished_then(*changed):
    """A finished tiny qa1 run in ``out``, then a rerun that keeps finished tasks, with ``changed`` settings."""
    def argv(w, _model):
        base = ["--data_dir", str(FIXTURES / "babi"), "--task_ids", "1", "--do_train", "--do_eval", "--output_dir",
                str(w / "out"), "--max_steps", "1", "--checkpointing_steps", "1", "--embedding_dim", "8",
                "--hidden_size", "8", "--disable_tqdm", "true"]
        load_cli(BABI_CLI).main(base)
        return [*base, "--resume_from_checkpoint", "latest", *changed]
    return argv


GLUE_CLI, QUOREF_CLI, MRQA_CLI = "finetune/run_glue.py", "finetune/run_quoref.py", "finetune/run_mrqa.py"
DOCRED_CLI, FEVER_CLI, COREF_CLI = "finetune/run_docred.py", "finetune/run_fever.py", "finetune/run_coref.py"
PREP_CLI, MRP_CLI = "pretrain/prepare_corpus.py", "pretrain/run_mrp.py"
ONE_CLI = "corefbert/cli.py"
CONVERT_CLI, PAIRS_CLI = "corefbert/pretraining/convert.py", "corefbert/tasks/pronoun_pairs/builder.py"
E2E_CLI, RESOLVE_CLI, PAIR_CLS_CLI = "finetune/run_coref_e2e.py", "corefbert/tasks/coref_e2e/resolve.py", "finetune/run_pronoun_pairs.py"
ABLATION_CLI, BABI_CLI = "pretrain/run_ablation.py", "finetune/run_babi.py"

CASES = [
    # GLUE
    Case(GLUE_CLI, "missing file", glue_file("rte", _missing)),
    Case(GLUE_CLI, "empty file", glue_file("rte", _empty)),
    Case(GLUE_CLI, "binary file", glue_file("rte", _binary)),
    Case(GLUE_CLI, "non-UTF-8 file", glue_file("rte", _latin1)),
    Case(GLUE_CLI, "wrong format (SQuAD JSON as TSV)", glue_file("rte", lambda w: str(QUOREF))),
    Case(GLUE_CLI, "wrong column count", glue_file("rte", _tsv_short_row)),
    Case(GLUE_CLI, "tab inside a sentence (extra column)", glue_file("rte", _tsv_tab_in_sentence)),
    Case(GLUE_CLI, "--max_seq_length beyond the model's positions",
         glue("--task_name", "rte", "--data_dir", str(RTE.parent), "--do_eval", "--max_seq_length", "1024")),
    Case(GLUE_CLI, "pickle-only model folder",
         lambda w, m: glue("--task_name", "rte", "--data_dir", str(RTE.parent), "--do_eval")(w, _pickled(w, m))),
    Case(GLUE_CLI, "unknown label", glue_file("rte", _tsv_bad_label)),
    Case(GLUE_CLI, "unknown task", glue_file("rtx", lambda w: str(RTE))),
    Case(GLUE_CLI, "conflicting arguments (--do_eval, no dev file)", glue("--task_name", "rte", "--do_eval")),
    Case(GLUE_CLI, "unknown argument", glue("--task_name", "rte", "--no_such_flag", "1")),
    Case(GLUE_CLI, "output dir is a file",
         lambda w, m: ["--model_name_or_path", str(m), "--output_dir", _a_file(w), "--task_name", "rte",
                       "--train_file", str(RTE), "--do_train"]),
    # Quoref (SQuAD JSON)
    Case(QUOREF_CLI, "missing file", qa("--train_file", _missing, "--do_train")),
    Case(QUOREF_CLI, "empty file", qa("--train_file", lambda w: _file(w, "empty.json", ""), "--do_train")),
    Case(QUOREF_CLI, "binary file", qa("--train_file", lambda w: _file(w, "bin.json", BINARY), "--do_train")),
    Case(QUOREF_CLI, "non-UTF-8 file",
         qa("--train_file", lambda w: _file(w, "latin1.json", b'{"data": "caf\xe9"}'), "--do_train")),
    Case(QUOREF_CLI, "truncated JSON", qa("--train_file", lambda w: _truncated(QUOREF, w, "cut.json"),
                                                 "--do_train")),
    Case(QUOREF_CLI, "wrong type in a JSON field", qa("--train_file", _quoref_wrong_type, "--do_train")),
    Case(QUOREF_CLI, "unknown data format", qa("--train_file", lambda w: str(QUOREF), "--do_train",
                                                      "--data_format", "csv")),
    Case(QUOREF_CLI, "output dir is a file",
         lambda w, m: ["--model_name_or_path", str(m), "--output_dir", _a_file(w), "--train_file", str(QUOREF),
                       "--do_train", "--max_seq_length", "128", "--doc_stride", "32"]),
    # MRQA (JSONL)
    Case(MRQA_CLI, "missing file", qa("--train_file", _missing, "--do_train")),
    Case(MRQA_CLI, "truncated JSON", qa("--train_file", lambda w: _truncated(MRQA, w, "cut.jsonl"),
                                               "--do_train")),
    Case(MRQA_CLI, "wrong type in a JSON field", qa("--train_file", _mrqa_wrong_type, "--do_train")),
    Case(MRQA_CLI, "non-UTF-8 file",
         qa("--train_file", lambda w: _file(w, "latin1.jsonl", b'{"context": "caf\xe9"}\n'), "--do_train")),
    # DocRED
    Case(DOCRED_CLI, "missing file", docred(_missing)),
    Case(DOCRED_CLI, "truncated JSON", docred(lambda w: _truncated(DOCRED, w, "cut.json"))),
    Case(DOCRED_CLI, "non-UTF-8 file", docred(lambda w: _file(w, "latin1.json", b'["caf\xe9"]'))),
    Case(DOCRED_CLI, "offsets out of range", docred(_docred_offset)),
    Case(DOCRED_CLI, "unknown label (relation)", docred(_docred_relation)),
    Case(DOCRED_CLI, "conflicting arguments (--do_predict, no test file)", docred(None, "--do_predict")),
    Case(DOCRED_CLI, "fine-tuned folder without its head weights", _docred_without_head),
    Case(DOCRED_CLI, "--window_stride 0", docred(None, "--sliding_window", "true", "--window_stride", "0")),
    Case(DOCRED_CLI, "--window_stride longer than a window",
         docred(None, "--sliding_window", "true", "--max_seq_length", "128", "--window_stride", "200")),
    Case(DOCRED_CLI, "--window_batch_size 0", docred(None, "--window_batch_size", "0")),
    # FEVER
    Case(FEVER_CLI, "missing file", fever(_missing)),
    Case(FEVER_CLI, "empty file", fever(_empty)),
    Case(FEVER_CLI, "non-UTF-8 file", fever(lambda w: _file(w, "latin1.jsonl", b'{"claim": "caf\xe9"}\n'))),
    Case(FEVER_CLI, "truncated JSON", fever(lambda w: _truncated(FEVER, w, "cut.jsonl"))),
    Case(FEVER_CLI, "unknown label", fever(_fever_label)),
    Case(FEVER_CLI, "wrong type in a JSON field", fever(_fever_evidence)),
    Case(FEVER_CLI, "unknown model type", fever(lambda w: str(FEVER), "--model_type", "gnn")),
    # Pronoun coreference
    Case(COREF_CLI, "missing file", with_file("--train_file", _missing, "--do_train")),
    Case(COREF_CLI, "non-UTF-8 file", with_file("--train_file", _latin1, "--do_train")),
    Case(COREF_CLI, "wrong column count (GAP)", with_file("--train_file", _gap_columns, "--do_train")),
    Case(COREF_CLI, "offsets out of range (GAP)", with_file("--train_file", _gap_offset, "--do_train")),
    Case(COREF_CLI, "unknown format", with_file("--train_file", lambda w: str(GAP), "--do_train",
                                                "--data_format", "conll")),
    Case(COREF_CLI, "unknown option value", with_file("--train_file", lambda w: str(GAP), "--do_train",
                                                      "--score_reduction", "max")),
    Case(COREF_CLI, "file of another task (WinoGender templates.tsv)",
         with_file("--validation_file", lambda w: str(FIXTURES / "coref" / "templates.tsv"), "--do_eval",
                   "--zero_shot", "mlm")),
    Case(COREF_CLI, "file of another task (CoNLL-2012)",
         with_file("--train_file", lambda w: str(FIXTURES / "coref" / "sample.gold_conll"), "--do_train")),
    # Corpus preparation
    Case(PREP_CLI, "missing file", prepare_file(_missing)),
    Case(PREP_CLI, "empty file", prepare_file(_empty)),
    Case(PREP_CLI, "binary file", prepare_file(_binary)),
    Case(PREP_CLI, "non-UTF-8 file", prepare_file(_latin1)),
    Case(PREP_CLI, "JSONL without the text field", prepare_file(_jsonl_no_text)),
    Case(PREP_CLI, "missing spaCy pipeline",
         prepare_file(lambda w: str(FIXTURES / "tiny_corpus.txt"), "--spacy_model", "xx_no_such_pipeline")),
    Case(PREP_CLI, "output dir is a file",
         lambda w, m: ["--model_name_or_path", str(m), "--output_dir", _a_file(w), "--train_file",
                       str(FIXTURES / "tiny_corpus.txt"), "--max_seq_length", "128"]),
    Case(PREP_CLI, "no --output_dir", lambda w, m: ["--model_name_or_path", str(m), "--train_file",
                                                     str(FIXTURES / "tiny_corpus.txt")]),
    Case(PREP_CLI, "malformed YAML config", lambda w, m: ["--config", _bad_yaml(w)]),
    Case(PREP_CLI, "unknown name in YAML config", lambda w, m: ["--config", _yaml_unknown(w)]),
    Case(PREP_CLI, "model folder without tokenizer files",
         lambda w, m: prepare("--train_file", str(FIXTURES / "tiny_corpus.txt"))(w, _config_only(w, m))),
    Case(PREP_CLI, "--max_seq_length beyond the model's positions",
         prepare_file(lambda w: str(FIXTURES / "tiny_corpus.txt"), "--max_seq_length", "1024")),
    Case(PREP_CLI, "FIFO as the only input", prepare_file(_fifo)),
    Case(PREP_CLI, "output dir inside the input folder",
         lambda w, m: ["--model_name_or_path", str(m), "--train_file", _text_folder(w), "--output_dir",
                       str(w / "texts" / "prepared"), "--max_seq_length", "128"]),
    Case(PREP_CLI, "file name with a newline", prepare_file(lambda w: _file(w, "two\nlines.txt", BINARY))),
    Case(PREP_CLI, "CoNLL-2012 token line with too few columns",
         prepare_file(lambda w: _file(w, "bad.conll", "#begin document (x); part 0\nx\t0\t0\tThe\t_\nx\t0\n"
                                                      "#end document\n"))),
    # Pretraining
    Case(MRP_CLI, "missing corpus (--dataset_dir)", mrp("--dataset_dir", "{work}/none")),
    Case(MRP_CLI, "conflicting arguments (--dataset_dir and --train_file)",
         mrp("--dataset_dir", "{work}", "--train_file", "x.txt")),
    Case(MRP_CLI, "missing model folder", lambda w, m: mrp("--train_file", "x.txt")(w, w / "no_model")),
    Case(MRP_CLI, "out-of-range option", mrp("--dataset_dir", "{work}", "--mrp_ratio", "1.5")),
    Case(MRP_CLI, "malformed YAML config", lambda w, m: ["--config", _bad_yaml(w)]),
    Case(MRP_CLI, "missing file", mrp("--train_file", "{work}/missing.txt")),
    Case(MRP_CLI, "output dir is a file",
         lambda w, m: ["--model_name_or_path", str(m), "--output_dir", _a_file(w), "--max_steps", "1",
                       "--train_file", str(FIXTURES / "tiny_corpus.txt")]),
    Case(MRP_CLI, "output dir of an earlier run",
         lambda w, m: ["--model_name_or_path", str(m), "--output_dir", _earlier_run(w), "--max_steps", "1",
                       "--train_file", str(FIXTURES / "tiny_corpus.txt")]),
    Case(MRP_CLI, "--with_tracking, tracker not installed",
         mrp("--dataset_dir", "{work}", "--with_tracking"), fault=_no_trackers),
    Case(MRP_CLI, "YAML max_steps: null", _mrp_yaml("max_steps: null\n")),
    Case(MRP_CLI, "YAML max_steps: a list", _mrp_yaml("max_steps: [1, 2]\n")),
    Case(MRP_CLI, "YAML max_steps: 3.7", _mrp_yaml("max_steps: 3.7\n")),
    Case(MRP_CLI, "YAML batch size 2.5", _mrp_yaml("per_device_train_batch_size: 2.5\n")),
    Case(MRP_CLI, "negative --seed", mrp("--dataset_dir", "{work}", "--seed", "-1")),
    Case(MRP_CLI, "negative --num_workers", mrp("--dataset_dir", "{work}", "--num_workers", "-1")),
    Case(MRP_CLI, "--adam_beta1 out of range", mrp("--dataset_dir", "{work}", "--adam_beta1", "1.5")),
    Case(MRP_CLI, "negative --adam_epsilon", mrp("--dataset_dir", "{work}", "--adam_epsilon", "-1")),
    Case(MRP_CLI, "--learning_rate nan", mrp("--dataset_dir", "{work}", "--learning_rate", "nan")),
    Case(MRP_CLI, "negative --learning_rate", mrp("--dataset_dir", "{work}", "--learning_rate", "-1")),
    Case(MRP_CLI, "--logging_steps 0", mrp("--dataset_dir", "{work}", "--logging_steps", "0")),
    Case(MRP_CLI, "--mlm_probability 0", mrp("--dataset_dir", "{work}", "--mlm_probability", "0")),
    Case(MRP_CLI, "--mlm_probability 1", mrp("--dataset_dir", "{work}", "--mlm_probability", "1")),
    Case(MRP_CLI, "--per_device_eval_batch_size 0", mrp("--dataset_dir", "{work}", "--per_device_eval_batch_size", "0")),
    Case(MRP_CLI, "empty --output_dir", lambda w, m: ["--model_name_or_path", str(m), "--output_dir", "",
                                                       "--max_steps", "1", "--dataset_dir", str(w)]),
    Case(MRP_CLI, "resume from a final/ folder",
         lambda w, m: mrp("--dataset_dir", "{work}", "--resume_from_checkpoint", _final_folder(w))(w, m)),
    Case(MRP_CLI, "corpus of one document (no validation split)",
         lambda w, m: mrp("--train_file", _file(w, "one_document.txt",
                                                (FIXTURES / "tiny_corpus.txt").read_text().replace("\n\n", "\n")))(w, m)),
    Case(MRP_CLI, "unknown --packing", mrp("--train_file", str(FIXTURES / "tiny_corpus.txt"), "--packing", "rows")),
    Case(MRP_CLI, "--dataset_dir glob matching no shard", mrp("--dataset_dir", "{work}/part_*")),
    Case(MRP_CLI, "--dataset_dir and --dataset_name", mrp("--dataset_dir", "{work}", "--dataset_name", "x/y")),
    Case(GLUE_CLI, "--push_to_hub offline", glue("--task_name", "rte", "--do_train", "--push_to_hub")),
    Case(GLUE_CLI, "--hub_model_id without --push_to_hub", glue("--task_name", "rte", "--do_train", "--hub_model_id",
                                                              "me/x")),
    Case(GLUE_CLI, "--push_to_hub without --do_train", glue("--task_name", "rte", "--do_eval", "--push_to_hub")),
    # Conversion of released CorefBERT weights
    Case(CONVERT_CLI, "missing file", lambda w, m: [str(w / "none"), str(w / "out")]),
    Case(CONVERT_CLI, "wrong format (no weights)", lambda w, m: [_official(w, m, weights=False), str(w / "out")]),
    Case(CONVERT_CLI, "pickle that would run code", lambda w, m: [_official_pickle_with_code(w, m), str(w / "out")]),
    Case(CONVERT_CLI, "conflicting arguments (--model_type roberta, BERT files)",
         lambda w, m: [_official(w, m), str(w / "out"), "--model_type", "roberta"]),
    Case(CONVERT_CLI, "config of another model (shape mismatch)",
         lambda w, m: [_official(w, m, intermediate_size=48), str(w / "out")]),
    Case(CONVERT_CLI, "output dir not empty", lambda w, m: [_official(w, m), _nonempty(w)]),
    # Pronoun-replacement pairs from CoNLL-2012 files
    Case(PAIRS_CLI, "missing file", pairs(_missing)),
    Case(PAIRS_CLI, "empty file", pairs(_empty)),
    Case(PAIRS_CLI, "binary file", pairs(_binary)),
    Case(PAIRS_CLI, "non-UTF-8 file", pairs(_latin1)),
    Case(PAIRS_CLI, "wrong column count", pairs(_conll_short_row)),
    Case(PAIRS_CLI, "unbalanced brackets", pairs(_conll_unbalanced)),
    Case(PAIRS_CLI, "missing #end document", pairs(_conll_no_end)),
    Case(PAIRS_CLI, "wrong format (SQuAD JSON as CoNLL)", pairs(lambda w: str(QUOREF))),
    Case(PAIRS_CLI, "unknown argument",
         lambda w, m: ["--input", str(PAIRS_CONLL), "--output_dir", str(w / "p"), "--no_such_flag", "1"]),
    # End-to-end coreference and raw-text resolution
    Case(E2E_CLI, "unknown --encoder", e2e("--encoder", "lstm", "--train_file", E2E_FIX, "--do_train")),
    Case(E2E_CLI, "binary file", e2e("--train_file", lambda w: _file(w, "b.conll", BINARY), "--do_train")),
    Case(E2E_CLI, "CoNLL word line with 4 columns",
         e2e("--train_file", lambda w: _file(w, "s.conll", SHORT_CONLL), "--do_train")),
    Case(E2E_CLI, "no file matches the --train_file glob",
         e2e("--train_file", lambda w: str(w / "none*.conll"), "--do_train")),
    Case(E2E_CLI, "GloVe line with a missing number",
         e2e("--train_file", E2E_FIX, "--do_train", "--embeddings_file",
             lambda w: _file(w, "g.txt", "Anna 0.1 0.2\nTom 0.3\n"))),
    Case(E2E_CLI, "two documents per batch", e2e("--train_file", E2E_FIX, "--do_train", "--per_device_train_batch_size",
                                                 "2")),
    Case(E2E_CLI, "--model_name_or_path not a run_coref_e2e folder",
         e2e("--model_name_or_path", lambda w: str(w), "--validation_file", E2E_FIX, "--do_eval")),
    Case(E2E_CLI, "--encoder bert without --model_name_or_path",
         e2e("--encoder", "bert", "--train_file", E2E_FIX, "--do_train")),
    Case(E2E_CLI, "--top_span_ratio 0", e2e("--train_file", E2E_FIX, "--do_train", "--top_span_ratio", "0")),
    Case(E2E_CLI, "unknown --asl_variant",
         e2e("--encoder", "asl", "--asl_variant", "sideways", "--train_file", E2E_FIX, "--do_train")),
    Case(RESOLVE_CLI, "empty --text", lambda w, m: ["--model", str(w), "--text", "   "]),
    Case(RESOLVE_CLI, "binary file", lambda w, m: ["--model", str(w), "--input_file", _file(w, "x.bin", BINARY)]),
    Case(RESOLVE_CLI, "--model not a coreference model folder",
         lambda w, m: ["--model", str(w), "--text", "Anna met Tom."]),
    # Pronoun-pair entailment classifiers
    Case(PAIR_CLS_CLI, "missing file", pair_classifier(_missing)),
    Case(PAIR_CLS_CLI, "empty file", pair_classifier(_empty)),
    Case(PAIR_CLS_CLI, "binary file", pair_classifier(_binary)),
    Case(PAIR_CLS_CLI, "non-UTF-8 file", pair_classifier(_latin1)),
    Case(PAIR_CLS_CLI, "truncated JSON", pair_classifier(lambda w: _truncated(PAIR_PAIRS, w, "cut.jsonl"))),
    Case(PAIR_CLS_CLI, "wrong format (GLUE TSV as pairs.jsonl)", pair_classifier(lambda w: str(RTE))),
    Case(PAIR_CLS_CLI, "unknown label", pair_classifier(_pairs_label)),
    Case(PAIR_CLS_CLI, "unknown pair type", pair_classifier(_pairs_type)),
    Case(PAIR_CLS_CLI, "no pair of the --train_types",
         pair_classifier(_pairs_correct_only, "--train_types", "in_scope")),
    Case(PAIR_CLS_CLI, "unknown --model", pair_classifier(lambda w: str(PAIR_PAIRS), "--model", "gru")),
    Case(PAIR_CLS_CLI, "--model bert without a checkpoint",
         pair_classifier(lambda w: str(PAIR_PAIRS), "--model", "bert")),
    Case(PAIR_CLS_CLI, "ragged embeddings file",
         lambda w, m: pair_classifier(lambda w: str(PAIR_PAIRS), "--embeddings_file", _glove_ragged(w))(w, m)),
    Case(PAIR_CLS_CLI, "model folder of another --model",
         lambda w, m: pair_classifier(lambda w: str(PAIR_PAIRS), "--model", "lstmn", "--model_name_or_path",
                                      _other_pair_model(w))(w, m)),
    # The MRP ablation study
    Case(ABLATION_CLI, "unknown arm", ablation("--dataset_dir", "{work}", "--arms", "corefbert,nsp")),
    Case(ABLATION_CLI, "missing corpus (--dataset_dir)", ablation("--dataset_dir", "{work}/none")),
    Case(ABLATION_CLI, "no corpus", ablation()),
    Case(ABLATION_CLI, "malformed --finetune spec", ablation("--dataset_dir", "{work}", "--finetune", "train.txt")),
    Case(ABLATION_CLI, "missing probe file",
         ablation("--dataset_dir", "{work}", "--zero_shot_file", "{work}/missing.txt")),
    Case(ABLATION_CLI, "unknown preset", ablation("--preset", "tpu")),
    Case(ABLATION_CLI, "--seeds 0", ablation("--dataset_dir", "{work}", "--seeds", "0")),
    Case(ABLATION_CLI, "arm flags that contradict (official_loss with weight 0)",
         ablation("--dataset_dir", "{work}", "--arms", "corefbert,official_loss", "--mrp_loss_weight", "0")),
    Case(ABLATION_CLI, "negative --base_mlm_steps", ablation("--dataset_dir", "{work}", "--base_mlm_steps", "-1")),
    Case(ABLATION_CLI, "QUOREF probe with a train file only",
         ablation("--dataset_dir", "{work}", "--quoref_train_file", str(QUOREF))),
    # Coref-GRU on bAbI
    Case(BABI_CLI, "missing file",
         lambda w, m: ["--data_dir", str(w / "missing_dir"), "--do_train", "--output_dir", str(w / "out")]),
    Case(BABI_CLI, "empty file", babi_file("")),
    Case(BABI_CLI, "binary file", babi_file(BINARY)),
    Case(BABI_CLI, "non-UTF-8 file", babi_file(NOT_UTF8)),
    Case(BABI_CLI, "wrong format (JSON as bAbI)", babi_file('{"data": []}\n')),
    Case(BABI_CLI, "question line without an answer", babi_file("1 Mary went home.\n2 Where is Mary?\t\t1\n")),
    Case(BABI_CLI, "unknown task", lambda w, m: ["--data_dir", str(FIXTURES / "babi"), "--task_ids", "21", "--do_train",
                                                 "--output_dir", str(w / "out")]),
    Case(BABI_CLI, "conflicting arguments (--do_predict, no test file)",
         lambda w, m: ["--data_dir", str(FIXTURES / "babi"), "--task_ids", "8", "--do_predict", "--output_dir",
                       str(w / "out")]),
    Case(MRP_CLI, "--lr_scheduler_type step without --lr_decay_steps",
         mrp("--dataset_dir", "{work}", "--lr_scheduler_type", "step")),
    # bAbI supporting facts outside the story, an empty question, an extractive answer off the story
    Case(BABI_CLI, "supporting fact id beyond the story",
         babi_file("1 Mary went home.\n2 Where is Mary?\thome\t7\n")),
    Case(BABI_CLI, "supporting fact id pointing at a question line",
         babi_file("1 Mary went home.\n2 Where is Mary?\thome\t1\n3 Where is Mary?\thome\t2\n")),
    Case(BABI_CLI, "empty question", babi_file("1 Mary went home.\n2 \thome\t1\n")),
    Case(BABI_CLI, "training answer not in its story (extractive task)",
         babi_file("1 Mary went home.\n2 Where is Mary?\tmoon\t1\n")),
    # A finished task is kept by a rerun only under the settings it ran with
    Case(BABI_CLI, "rerun of a finished task with a changed setting (--learning_rate)",
         babi_finished_then("--learning_rate", "0.02")),
    # convert's output folder, config values and weights, a Hub id offline
    Case(CONVERT_CLI, "OUTPUT_DIR contains the source (--overwrite_output_dir)",
         lambda w, m: [_official(w, m), str(w), "--overwrite_output_dir"]),
    Case(CONVERT_CLI, "config value of the wrong type (hidden_size \"32\")",
         lambda w, m: [_official(w, m, hidden_size="32"), str(w / "out")]),
    Case(CONVERT_CLI, "config sizing a 51 GB model (vocab_size 400000000)",
         lambda w, m: [_official(w, m, vocab_size=400_000_000), str(w / "out")]),
    Case(CONVERT_CLI, "weights holding NaN", lambda w, m: [_official_nan(w, m), str(w / "out")]),
    Case(CONVERT_CLI, "Hub id with HF_HUB_OFFLINE=1", lambda w, m: ["nielsr/coref-bert-base", str(w / "out")]),
    # Config values argparse cannot convert, a token of the wrong type, wrong words
    Case(MRP_CLI, "YAML max_steps: ten (not an integer)", _mrp_yaml("learning_rate: 1e-4\nmax_steps: ten\n")),
    Case(MRP_CLI, "YAML hub_token as a list", _mrp_yaml("hub_token: [hf_SECRETwB7xQ2mZ9kLp4vR8tY1nC5dF3gH6jK]\n")),
    Case(MRP_CLI, "--seed not an integer", mrp("--dataset_dir", "{work}", "--seed", "ten")),
    Case(DOCRED_CLI, "model folder that does not exist (predicting, no --rel_info_file)",
         lambda w, m: ["--model_name_or_path", str(w / "out" / "bset"), "--test_file", str(DOCRED), "--do_predict",
                       "--output_dir", str(w / "pred")]),
    # Pronoun pairs: a float label, the old split flags, the scope cap
    Case(PAIR_CLS_CLI, "label 1.0 (a float)", pair_classifier(_pairs_label_float)),
    Case(PAIRS_CLI, "--validation_fraction (renamed)",
         lambda w, m: [*pairs(lambda _: str(PAIRS_CONLL))(w, m), "--validation_fraction", "0.15"]),
    Case(PAIRS_CLI, "--max_scope_words 1", lambda w, m: [*pairs(lambda _: str(PAIRS_CONLL))(w, m),
                                                         "--max_scope_words", "1"]),
    # The optimizer choice of the training core (Hugging Face's names; only those it offers)
    Case(PAIR_CLS_CLI, "--optim sgd (not offered)", pair_classifier(lambda w: str(PAIR_PAIRS), "--optim", "sgd")),
    # The one command (corefbert <command>)
    Case(ONE_CLI, "unknown command", lambda w, m: ["pretrian", "--output_dir", str(w)]),
    Case(ONE_CLI, "unknown finetune task", lambda w, m: ["finetune", "gleu", "--model_name_or_path", str(m)]),
]


# --- the filesystem refuses: an unwritable output directory, a disk that fills up during the first save ---

TRAINS = {  # the smallest valid training run of each CLI: 1 update, saved at once
    GLUE_CLI: ["--task_name", "rte", "--train_file", str(RTE), "--do_train", "--max_seq_length", "48"],
    QUOREF_CLI: ["--train_file", str(QUOREF), "--do_train", "--max_seq_length", "128", "--doc_stride", "32"],
    MRQA_CLI: ["--train_file", str(MRQA), "--do_train", "--max_seq_length", "128", "--doc_stride", "32"],
    DOCRED_CLI: ["--train_file", str(DOCRED), "--rel_info_file", str(REL_INFO), "--do_train", "--max_seq_length", "128"],
    FEVER_CLI: ["--train_file", str(FIXTURES / "fever" / "pairs.jsonl"), "--do_train"],
    COREF_CLI: ["--train_file", str(GAP), "--do_train"],
}
ONE_SAVE = ["--max_steps", "1", "--checkpointing_steps", "1", "--per_device_train_batch_size", "2"]
UNWRITABLE_ROOT = Path("/sys/corefbert_output")  # root writes anywhere chmod allows, but not under /sys


def _unwritable(work: Path) -> str:
    """A real directory this process cannot create: under /sys for root, under a 0o500 folder otherwise."""
    if os.geteuid() == 0:
        return str(UNWRITABLE_ROOT)
    locked = work / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    return str(locked / "out")


def _disk_full(monkeypatch) -> None:
    """The first checkpoint save writes part of its files and then finds the disk full."""
    import errno

    from accelerate import Accelerator

    def save_state(self, output_dir=None, **kwargs):
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        (Path(output_dir) / "model.safetensors").write_bytes(b"\0" * 1000)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Accelerator, "save_state", save_state)


def _model_out(argv_tail: list[str], out: Callable[[Path], str]):
    return lambda w, m: ["--model_name_or_path", str(m), "--output_dir", out(w), *argv_tail]


for _cli_path, _tail in TRAINS.items():
    CASES.append(Case(_cli_path, "output dir not writable", _model_out([*_tail, *ONE_SAVE], _unwritable)))
    CASES.append(Case(_cli_path, "disk full on save", _model_out([*_tail, *ONE_SAVE], lambda w: str(w / "out")),
                      fault=_disk_full))
_MRP_TRAIN = ["--train_file", str(FIXTURES / "tiny_corpus.txt"), "--max_steps", "2", "--checkpointing_steps", "1",
              "--per_device_train_batch_size", "2"]


def _disk_full_corpus(monkeypatch) -> None:
    """Saving the prepared corpus (a chunk or the final folder) finds the disk full after part of a file."""
    import errno

    import datasets

    def save_to_disk(self, dataset_path, *args, **kwargs):
        Path(dataset_path).mkdir(parents=True, exist_ok=True)
        (Path(dataset_path) / "data-00000-of-00001.arrow").write_bytes(b"\0" * 1000)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(datasets.Dataset, "save_to_disk", save_to_disk)
    monkeypatch.setattr(datasets.DatasetDict, "save_to_disk", save_to_disk)


_PREP = ["--train_file", str(FIXTURES / "tiny_corpus.txt"), "--max_seq_length", "128"]
CASES.append(Case(PREP_CLI, "output dir not writable", _model_out(_PREP, _unwritable)))
CASES.append(Case(PREP_CLI, "disk full on save", _model_out(_PREP, lambda w: str(w / "prepared")),
                  fault=_disk_full_corpus))
CASES.append(Case(MRP_CLI, "output dir not writable", _model_out(_MRP_TRAIN, _unwritable)))
CASES.append(Case(MRP_CLI, "disk full on save", _model_out(_MRP_TRAIN, lambda w: str(w / "run")), fault=_disk_full))



def _normalize(line: str, work: Path, model: Path) -> str:
    line = line.replace(str(work / "locked" / "out"), "<unwritable>").replace(str(UNWRITABLE_ROOT), "<unwritable>")
    for path, name in ((work, "<tmp>"), (model, "<model>"), (ROOT, "<repo>")):
        line = line.replace(os.path.realpath(path), name).replace(str(path), name)
    line = re.sub(r"\.tmp-\d+", ".tmp-<pid>", line)  # scratch folders carry the process id
    line = re.sub(r"\b[0-9a-f]{20}\b", "<fingerprint>", line)  # a corpus cache key: paths and sizes differ by clone
    return re.sub(r"\s+", " ", line).strip()


def _run(case: Case, work: Path, model: Path, capsys) -> tuple[int, str, list[str]]:
    argv = [a.replace("{work}", str(work)) for a in case.argv(work, model)]
    capsys.readouterr()
    try:
        load_cli(case.cli).main(argv)
        code = 0
    except SystemExit as exit_info:
        code = exit_info.code
    err = capsys.readouterr().err
    return code, err, [line for line in err.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, bert_tokenizer):
    """A tiny BERT with the conftest tokenizer: bad inputs that pass the readers die on data, not model."""
    import torch
    from helpers import tiny_config
    from transformers import BertModel

    out = tmp_path_factory.mktemp("bad_input_model")
    torch.manual_seed(0)
    BertModel(tiny_config("bert", bert_tokenizer)).save_pretrained(str(out))
    bert_tokenizer.save_pretrained(str(out))
    return out


OBSERVED: list[tuple[str, str, str]] = []


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{Path(c.cli).stem}:{c.bad}")
def test_bad_input_is_one_error_line(case, tmp_path, model_dir, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    work = tmp_path / "work"
    work.mkdir()
    if case.fault is not None:
        case.fault(monkeypatch)
    code, err, errors = _run(case, work, model_dir, capsys)
    assert code == 2, f"exit status {code}, stderr:\n{err[-3000:]}"
    assert len(errors) == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == errors[0], "the error line must be the last thing printed"
    message = _normalize(errors[0][len("error: "):], work, model_dir)
    OBSERVED.append((case.cli, case.bad, message))
    shutil.rmtree(work, ignore_errors=True)
    if not WRITING:
        # Row by row, so the check also holds under pytest-xdist, where cases run in several workers.
        documented = _documented_rows().get((case.cli, case.bad))
        assert documented == _row(case.cli, case.bad, message), (
            "docs/guides/hardening.md's bad-input table differs from what the CLI prints; regenerate it with "
            "COREFBERT_WRITE_BAD_INPUT_TABLE=1 pytest tests/system/test_bad_input.py")


WRITING = os.environ.get("COREFBERT_WRITE_BAD_INPUT_TABLE") == "1"
HEADER = ["| CLI | bad input | message (`error: ...`, exit status 2) |", "|---|---|---|"]


def _row(cli: str, bad: str, message: str) -> str:
    return f"| `{cli}` | {bad} | `{message.replace('|', '&#124;').replace('`', chr(39))}` |"


def _readme_table() -> tuple[str, str, str]:
    text = TABLE_DOC.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    table, tail = rest.split(END, 1)
    return head, table, tail


def _documented_rows() -> dict[tuple[str, str], str]:
    rows = {}
    for line in _readme_table()[1].strip().splitlines()[len(HEADER):]:
        cells = line.split(" | ")
        rows[(cells[0].strip("| `"), cells[1])] = line
    return rows


def test_readme_table_lists_exactly_the_cases():
    """The table has one row per case, in the cases' order (each case test checks its row's message)."""
    assert _readme_table()[1].strip().splitlines()[:len(HEADER)] == HEADER
    assert list(_documented_rows()) == [(case.cli, case.bad) for case in CASES]


@pytest.fixture(scope="module", autouse=True)
def _write_readme_table_when_asked():
    """With COREFBERT_WRITE_BAD_INPUT_TABLE=1, rewrite the table from what the CLIs printed, once every
    case of this module has run (module teardown); otherwise the cases only check their rows."""
    yield
    if not WRITING:
        return
    assert len(OBSERVED) == len(CASES), "write the table from a full run of this file without -k, -x or -n"
    head, _, tail = _readme_table()
    table = "\n".join(HEADER + [_row(*row) for row in OBSERVED])
    TABLE_DOC.write_text(f"{head}{START}\n{table}\n{END}{tail}", encoding="utf-8")
# Resolve's --output_dir naming a file and --input_file naming a folder (both before the model loads)
CASES += [
    Case(RESOLVE_CLI, "--output_dir an existing file",
         lambda w, m: ["--model", str(w), "--text", "Anna met Tom.", "--output_dir", _file(w, "taken.txt", "x")]),
    Case(RESOLVE_CLI, "--input_file a folder", lambda w, m: ["--model", str(w), "--input_file", str(w)]),
]
# Resolve's .jsonl input of many texts and its spaCy pipeline (all before the model loads)
CASES += [
    Case(RESOLVE_CLI, ".jsonl line not JSON",
         lambda w, m: ["--model", str(w), "--input_file", _file(w, "t.jsonl", '{"text": "Anna met Tom."}\n{"text": '),
                       "--output_dir", str(w / "out")]),
    Case(RESOLVE_CLI, ".jsonl line without a text",
         lambda w, m: ["--model", str(w), "--input_file", _file(w, "t.jsonl", '{"id": "a", "body": "Anna met Tom."}\n'),
                       "--output_dir", str(w / "out")]),
    Case(RESOLVE_CLI, ".jsonl id that cannot name a file",
         lambda w, m: ["--model", str(w), "--input_file", _file(w, "t.jsonl", '{"id": "../x", "text": "Anna met."}\n'),
                       "--output_dir", str(w / "out")]),
    Case(RESOLVE_CLI, ".jsonl without --output_dir",
         lambda w, m: ["--model", str(w), "--input_file", _file(w, "t.jsonl", '{"text": "Anna met Tom."}\n')]),
    Case(RESOLVE_CLI, "--spacy_model not installed",
         lambda w, m: ["--model", str(w), "--text", "Anna met Tom.", "--spacy_model", "no_such_pipeline"]),
    Case(RESOLVE_CLI, "--overlap_words negative",
         lambda w, m: ["--model", str(w), "--text", "Anna met Tom.", "--overlap_words", "-1"]),
]
# Resolve never writes onto its input; ids are unique names a file system takes (before the model loads)
CASES += [
    Case(RESOLVE_CLI, "--output_dir holding the input",
         lambda w, m: ["--model", str(w), "--input_file", _file(w, "t.jsonl", '{"text": "Anna met Tom."}\n'),
                       "--output_dir", str(w)]),
    Case(RESOLVE_CLI, ".jsonl ids that repeat",
         lambda w, m: ["--model", str(w), "--input_file", _file(w, "t.jsonl", '{"text": "Anna met."}\n'
                                                                             '{"id": 1, "text": "Tom met."}\n'),
                       "--output_dir", str(w / "out")]),
    Case(RESOLVE_CLI, ".jsonl id null",
         lambda w, m: ["--model", str(w), "--input_file", _file(w, "t.jsonl", '{"id": null, "text": "Anna met."}\n'),
                       "--output_dir", str(w / "out")]),
    Case(RESOLVE_CLI, "--input_file a device", lambda w, m: ["--model", str(w), "--input_file", "/dev/zero"]),
]
# Config values of the wrong shape, checked against their fields by the one config reader
SELF_ALIAS, NESTED_LISTS = "train_file: &a [*a]\n", "train_file: [[a.txt, b.txt], [c.txt]]\n"


def _config(text, *extra):
    return lambda w, m: ["--config", _file(w, "run.yaml", text), "--model_name_or_path", str(m), "--output_dir",
                         str(w / "out"), *extra]


CASES += [
    Case(MRP_CLI, "YAML train_file holds itself (&a [*a])", _config(SELF_ALIAS)),
    Case(MRP_CLI, "YAML train_file a list of lists", _config(NESTED_LISTS)),
    Case(PREP_CLI, "YAML train_file a list of lists", _config(NESTED_LISTS)),
    Case(GLUE_CLI, "YAML train_file holds itself (&a [*a])", _config(SELF_ALIAS, "--task_name", "rte", "--do_train")),
    Case(PAIR_CLS_CLI, "YAML model a list", lambda w, m: ["--config", _file(w, "run.yaml", "model: [da]\n"),
                                                         *pair_classifier(lambda _: str(PAIR_PAIRS))(w, m)]),
]
# The pronoun-pair builder checks its --output_dir before reading any file
CASES.append(Case(PAIRS_CLI, "output dir not writable", lambda w, m: ["--input", str(PAIRS_CONLL), "--output_dir",
                                                                      _unwritable(w)]))
# Resolve reads at most --max_input_mb of any input, standard input included (before the model loads)
CASES.append(Case(RESOLVE_CLI, "--input_file over --max_input_mb",
                  lambda w, m: ["--model", str(w), "--input_file", _file(w, "big.txt", "Anna met Tom. " * 80_000),
                                "--max_input_mb", "1"]))
