"""corefbert.pretraining.convert: released CorefBERT folders (transformers-2.1.1 BertForCopy/RobertaForCopy, and Hub mirrors)
become corefbert pretraining checkpoints that every loader and CLI of the toolkit takes.

The released folders are rebuilt here at tiny size: a 2.x-style config.json without model_type, a pickled
pytorch_model.bin with the official parameter names (``coef``, ``cls.predictions.*`` / ``lm_head.*``, no
``decoder.bias``), vocab.txt (cased or uncased) or vocab.json + merges.txt, no tokenizer_config.json.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
import torch
from helpers import (
    FIXTURES,
    assert_card_links_the_project,
    card_code_blocks,
    card_commands,
    card_spacy_config,
    load_cli,
    training_text,
)

from corefbert.errors import CorefBertError
from corefbert.pretraining.convert import convert_checkpoint, main, official_name, vocabulary_casing

ROOT = Path(__file__).resolve().parents[2]
TEXT = "Marta rowed out to the fishing boat because she saw that the boat was sinking near the harbour."
CAPITALISED = "Marta Paris London"


@pytest.fixture(scope="module")
def cased_vocab(tmp_path_factory) -> Path:
    """A cased WordPiece vocab.txt trained on the fixture text (it keeps 'Marta', 'The', ...)."""
    from tokenizers import BertWordPieceTokenizer

    out = tmp_path_factory.mktemp("cased_vocab")
    trainer = BertWordPieceTokenizer(lowercase=False, strip_accents=False)
    trainer.train_from_iterator(training_text() + [CAPITALISED], vocab_size=700, min_frequency=1)
    trainer.save_model(str(out))
    return out / "vocab.txt"


def _source_model(model_type: str, vocab_size: int, pad_id: int, seed: int):
    """A tiny CorefBERT pretraining model with a copy vector that is not its initial value."""
    from transformers import BertConfig, RobertaConfig

    from corefbert.pretraining.families import PRETRAINING_CLASSES

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=64, max_position_embeddings=258,
                  pad_token_id=pad_id)
    config = BertConfig(**common) if model_type == "bert" else RobertaConfig(**common)
    model = PRETRAINING_CLASSES[model_type](config).eval()
    with torch.no_grad():
        model.mrp.copy_vector.copy_(torch.linspace(-1.0, 2.0, 32))
        head_bias = model.cls.predictions.bias if model_type == "bert" else model.lm_head.bias
        head_bias.normal_()  # a bias that differs from its zero init, so a lost bias shows in the logits
    return model


def official_state(model, model_type: str, coef: bool = True, mlm_head: bool = True, bare: bool = False) -> dict:
    """The state dict a transformers-2.1.1 ``BertForCopy``/``RobertaForCopy`` (or a mirror) saved."""
    head = "cls." if model_type == "bert" else "lm_head."
    state = {}
    for name, tensor in model.state_dict().items():
        if name.endswith("decoder.bias"):
            continue  # 2.x kept the decoder bias as cls.predictions.bias / lm_head.bias only
        if name == "mrp.copy_vector":
            if coef:
                state["coef"] = tensor.clone()
            continue
        if name.startswith(head) and not mlm_head:
            continue
        if bare and name.startswith(f"{model_type}."):
            name = name[len(model_type) + 1:]  # a mirror saved from BertModel: no prefix
        state[name] = tensor.clone()
    if model_type == "bert" and mlm_head:
        state["cls.seq_relationship.weight"] = torch.zeros(2, 32)  # a stray NSP head: dropped, counted
    return state


def official_config(model) -> dict:
    """config.json as transformers 2.1.1 wrote it: no model_type, run-time switches included."""
    c = model.config
    config = {k: getattr(c, k) for k in ("attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob",
                                          "hidden_size", "initializer_range", "intermediate_size", "layer_norm_eps",
                                          "max_position_embeddings", "num_attention_heads", "num_hidden_layers",
                                          "type_vocab_size", "vocab_size")}
    return {**config, "finetuning_task": None, "is_decoder": False, "num_labels": 2, "output_attentions": False,
            "output_hidden_states": False, "output_past": True, "pruned_heads": {}, "torchscript": False,
            "use_bfloat16": False}


def make_official(root: Path, kind: str, vocab: Path | None = None, roberta_dir: Path | None = None,
                  seed: int = 0, **parts):
    """An official-format folder at ``root`` and the model it holds. ``kind``: bert or roberta."""
    root.mkdir(parents=True)
    if kind == "bert":
        (root / "vocab.txt").write_text(vocab.read_text(encoding="utf-8"), encoding="utf-8")
        entries = vocab.read_text(encoding="utf-8").splitlines()
        model = _source_model("bert", len(entries), entries.index("[PAD]"), seed)
    else:
        for name in ("vocab.json", "merges.txt"):
            (root / name).write_bytes((roberta_dir / name).read_bytes())
        model = _source_model("roberta", len(json.loads((root / "vocab.json").read_text())), 1, seed)
    (root / "config.json").write_text(json.dumps(official_config(model), indent=2))
    torch.save(official_state(model, kind, **parts), root / "pytorch_model.bin")
    return model


@pytest.fixture(scope="module")
def uncased_vocab(bert_tokenizer) -> Path:
    return Path(bert_tokenizer.name_or_path) / "vocab.txt"  # conftest trained it lower-cased


@pytest.fixture(scope="module")
def roberta_files(roberta_tokenizer) -> Path:
    return Path(roberta_tokenizer.name_or_path)  # vocab.json + merges.txt as the BPE trainer wrote them


VARIANTS = ["bert-cased", "bert-uncased", "roberta"]


@pytest.fixture(scope="module")
def converted(request, tmp_path_factory, cased_vocab, uncased_vocab, roberta_files):
    """``{(variant, coef): (source model, official dir, converted dir, report)}``, built once per module."""
    made = {}
    root = tmp_path_factory.mktemp("converted")
    for variant in VARIANTS:
        for coef in (True, False):
            kind = variant.split("-")[0]
            vocab = cased_vocab if variant == "bert-cased" else uncased_vocab
            official = root / f"{variant}-{coef}-official"
            model = make_official(official, kind, vocab=vocab, roberta_dir=roberta_files, coef=coef)
            out = root / f"{variant}-{coef}-converted"
            made[variant, coef] = (model, official, out, convert_checkpoint(official, out))
    return made


CASES = [(variant, coef) for variant in VARIANTS for coef in (True, False)]


def test_official_names_are_mapped():
    assert official_name("coef", "bert") == "mrp.copy_vector"
    assert official_name("module.bert.encoder.layer.0.output.LayerNorm.gamma", "bert") == \
        "bert.encoder.layer.0.output.LayerNorm.weight"
    assert official_name("embeddings.word_embeddings.weight", "roberta") == "roberta.embeddings.word_embeddings.weight"
    assert official_name("lm_head.bias", "roberta") == "lm_head.bias"


def test_vocabulary_casing(cased_vocab, uncased_vocab):
    cased, capitalised, _ = vocabulary_casing(cased_vocab)
    assert cased and capitalised > 10
    assert vocabulary_casing(uncased_vocab)[:2] == (False, 0)


@pytest.mark.parametrize("variant,coef", CASES)
def test_converted_folder_loads_everywhere(converted, variant, coef):
    """AutoModel and AutoModelForMaskedLM load with no weight missing, outputs equal the source model's, the
    config has model_type, the tokenizer keeps the vocabulary's casing, the copy vector is coef or absent."""
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoTokenizer

    from corefbert.pretraining.families import load_pretraining_model
    from corefbert.tasks.coref.copy_scoring import read_copy_vector

    source, _, out, report = converted[variant, coef]
    kind = variant.split("-")[0]
    assert AutoConfig.from_pretrained(out).model_type == kind == report.model_type
    assert not list(out.glob("*.bin")) and (out / "model.safetensors").is_file()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.is_fast
    ids = tokenizer(TEXT, return_tensors="pt")
    if variant == "bert-cased":
        assert not report.do_lower_case and "Marta" in tokenizer.tokenize("Marta")
    elif variant == "bert-uncased":
        assert report.do_lower_case and tokenizer.tokenize("MARTA") == tokenizer.tokenize("marta")

    encoder, info = AutoModel.from_pretrained(out, output_loading_info=True)
    assert info["missing_keys"] == [] or set(info["missing_keys"]) == set()
    with torch.no_grad():
        expected = source.base_model(**ids).last_hidden_state
        assert torch.allclose(encoder.eval()(**ids).last_hidden_state, expected, atol=1e-5)
        mlm, info = AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
        assert not set(info["missing_keys"])
        assert torch.allclose(mlm.eval()(**ids).logits, source(**ids).logits, atol=1e-4)
        pretraining = load_pretraining_model(out).eval()
        assert torch.allclose(pretraining(**ids).logits, source(**ids).logits, atol=1e-4)
    vector = read_copy_vector(str(out))
    if coef:
        assert report.copy_head_trained and torch.equal(vector, source.mrp.copy_vector.detach())
        assert torch.equal(pretraining.mrp.copy_vector.detach(), vector)
    else:
        assert vector is None and not report.copy_head_trained
        assert any("UNTRAINED" in note for note in report.notes)
        assert torch.allclose(pretraining.mrp.copy_vector.detach(), torch.full((32,), 1 / 32))
    record = json.loads((out / "conversion.json").read_text())
    assert record["copy_head_trained"] is coef and record["model_type"] == kind
    assert not any(str(value).startswith("/") for value in record.values())  # no local absolute path
    from huggingface_hub import ModelCard

    card = ModelCard.load(out / "README.md")
    assert card.data.license == "apache-2.0" and card.data.pipeline_tag == "fill-mask"
    assert f"trained: {str(coef).lower()}" in card.text and str(out.parent) not in card.text
    if kind == "bert":
        assert report.dropped == ["cls.seq_relationship.weight"]


@pytest.mark.parametrize("coef", [True, False])
def test_the_converted_card_says_how_to_use_the_folder(converted, coef, monkeypatch, tmp_path):
    """The card written into the folder: made with this project, the AutoModelForMaskedLM lines and the fine-tuning
    command on the folder (which load and parse), the spaCy copy scorer only where the copy head is trained."""
    from huggingface_hub import ModelCard

    from corefbert.tasks.base import parse_task_arguments
    from corefbert.tasks.glue import GlueTask
    from corefbert.training.outputs.cards import made_with

    _, _, out, _ = converted["bert-cased", coef]
    card = ModelCard.load(out / "README.md")
    assert made_with() in card.text.splitlines() and card.data.base_model is None  # converted from a local folder
    monkeypatch.chdir(out.parent)
    (transformers_code,) = [b for b in card_code_blocks(card.text, "python") if "from transformers" in b]
    assert f'AutoModelForMaskedLM.from_pretrained("{out.name}")' in transformers_code
    scope = {}
    exec(transformers_code, scope)
    assert scope["model"].config.model_type == "bert" and scope["tokenizer"].is_fast
    (finetune,) = card_commands(card.text, "finetune")
    assert parse_task_arguments(GlueTask, finetune[1:])[1].model_name_or_path == out.name
    expected = {"scorer": "copy", "model": out.name} if coef else None
    assert card_spacy_config(card.text) == expected and ("copy head is untrained" in card.text) is not coef


def test_a_card_converted_from_the_hub_names_it_as_base_and_links_the_project(monkeypatch):
    from corefbert.training.outputs import cards

    monkeypatch.setattr(cards, "project_url", lambda: "https://example.org/corefbert-project")
    record = {"source": "nielsr/coref-bert-base", "model_type": "bert", "copy_head_trained": True, "notes": []}
    card = cards.conversion_card(record, "corefbert-base")
    assert card.data.base_model == "nielsr/coref-bert-base"
    assert "[nielsr/coref-bert-base](https://huggingface.co/nielsr/coref-bert-base)" in card.text
    assert_card_links_the_project(card.text, "https://example.org/corefbert-project")
    assert card_spacy_config(card.text) == {"scorer": "copy", "model": "corefbert-base"}


@pytest.mark.parametrize("variant", VARIANTS)
def test_resolver_scores_as_the_source_model(converted, variant, tmp_path):
    """The copy-head resolver on the converted folder gives the scores of the same weights saved by corefbert
    itself; without coef it refuses unless told allow_untrained."""
    from corefbert.tasks.coref.resolver import CopyResolver

    source, _, out, _ = converted[variant, True]
    reference = tmp_path / "reference"
    source.save_pretrained(reference)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out)
    pronoun = re.search(r"\bshe\b", TEXT).span()
    scores = CopyResolver(str(out)).resolve(TEXT, pronoun, ["Marta", "the boat"])
    expected = CopyResolver(str(reference), tokenizer=tokenizer).resolve(TEXT, pronoun, ["Marta", "the boat"])
    assert all(math.isfinite(v) for v in scores.values())
    assert scores == pytest.approx(expected, abs=1e-5)
    untrained = converted[variant, False][2]
    with pytest.raises(CorefBertError, match="no mrp.copy_vector"):
        CopyResolver(str(untrained))
    assert len(CopyResolver(str(untrained), allow_untrained=True).resolve(TEXT, pronoun, ["Marta"])) == 1


def test_mirror_without_prefix_head_or_coef(tmp_path, uncased_vocab, capsys):
    """A mirror saved from a bare BertModel (no bert. prefix, no MLM head, no coef) converts, and says what
    is missing; load_pretraining_model then starts the MLM head and V fresh."""
    from transformers import AutoModel

    from corefbert.pretraining.families import load_pretraining_model

    source = make_official(tmp_path / "mirror", "bert", vocab=uncased_vocab, coef=False, mlm_head=False, bare=True)
    report = main([str(tmp_path / "mirror"), str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert "untrained (no coef)" in printed and "no MLM head" in printed
    assert not report.mlm_head and report.pooler
    encoder = AutoModel.from_pretrained(tmp_path / "out").eval()
    ids = torch.tensor([[2, 7, 9, 3]])
    with torch.no_grad():
        assert torch.allclose(encoder(ids).last_hidden_state, source.bert(ids).last_hidden_state, atol=1e-5)
    assert load_pretraining_model(tmp_path / "out").config.model_type == "bert"


def test_do_lower_case_flag_overrides_the_vocabulary(tmp_path, cased_vocab):
    from transformers import AutoTokenizer

    make_official(tmp_path / "cased", "bert", vocab=cased_vocab)
    report = convert_checkpoint(tmp_path / "cased", tmp_path / "out", do_lower_case=True)
    assert report.do_lower_case is True
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert tokenizer.tokenize("MARTA") == tokenizer.tokenize("marta")


def test_fine_tunes_with_run_glue(converted, tmp_path):
    """A converted cased BERT fine-tunes with a benchmark CLI on its fixture."""
    out = converted["bert-cased", True][2]
    results = load_cli("finetune/run_glue.py").main([
        "--model_name_or_path", str(out), "--task_name", "rte", "--data_dir", str(FIXTURES / "glue" / "RTE"),
        "--output_dir", str(tmp_path / "rte"), "--do_train", "--do_eval", "--max_steps", "2",
        "--per_device_train_batch_size", "4", "--max_seq_length", "48", "--disable_tqdm", "true"])
    assert results["train_steps"] == 2 and math.isfinite(results["train_loss"]) and "eval_accuracy" in results


def _refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    return err


def test_bad_input_is_one_line(tmp_path, uncased_vocab, roberta_files, capsys):
    assert "no such folder" in _refused([str(tmp_path / "nowhere"), str(tmp_path / "out")], capsys)
    official = tmp_path / "official"
    make_official(official, "bert", vocab=uncased_vocab)
    assert "contradicts" in _refused([str(official), str(tmp_path / "o1"), "--model_type", "roberta"], capsys)
    assert "not one of bert, roberta" in _refused([str(official), str(tmp_path / "o2"), "--model_type", "gpt2"], capsys)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert "not empty" in _refused([str(official), str(tmp_path / "full")], capsys)
    config = json.loads((official / "config.json").read_text())
    (official / "config.json").write_text(json.dumps({**config, "hidden_size": 64}))
    assert "shape" in _refused([str(official), str(tmp_path / "o3")], capsys)
    (official / "pytorch_model.bin").unlink()
    assert "no weights" in _refused([str(official), str(tmp_path / "o4")], capsys)
    assert not any(p.name.startswith("o") for p in tmp_path.iterdir() if p.name != "official")


class _RunsCode:
    """An object whose unpickling would call os.system: weights_only loading must refuse it."""

    def __reduce__(self):
        import os

        return os.system, ("touch PWNED",)


def test_pickled_code_never_runs(tmp_path, uncased_vocab, capsys, monkeypatch):
    official = tmp_path / "official"
    make_official(official, "bert", vocab=uncased_vocab)
    torch.save({"coef": _RunsCode()}, official / "pytorch_model.bin")
    monkeypatch.chdir(tmp_path)
    assert "holds more than tensors (posix.system): loading it would run code" in _refused(
        [str(official), str(tmp_path / "out")], capsys)
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("cli", ["run_coref", "run_docred", "run_fever", "run_mrqa", "run_quoref"])
def test_fine_tunes_with_every_cli(converted, cli, tmp_path):
    """The other benchmark CLIs on their fixtures (the arguments of the pretraining-checkpoint contract test)."""
    from test_every_cli_takes_a_pretraining_checkpoint import CASES

    quoref = FIXTURES / "quoref" / "quoref_tiny.json"
    cli_args = {**CASES, "run_quoref": lambda: ["--train_file", str(quoref), "--validation_file", str(quoref),
                                                   "--do_train", "--do_eval", "--max_seq_length", "64",
                                                   "--doc_stride", "32"]}
    results = load_cli(f"finetune/{cli}.py").main([
        "--model_name_or_path", str(converted["bert-uncased", True][2]), *cli_args[cli](), "--max_steps", "2",
        "--per_device_train_batch_size", "4", "--output_dir", str(tmp_path / "out"), "--disable_tqdm", "true"])
    assert results["train_steps"] == 2 and math.isfinite(results["train_loss"])
    assert any(key.startswith("eval_") for key in results)


# --- OUTPUT_DIR that equals, contains or lies inside the source, links resolved ----------------------------

def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _layout(tmp_path: Path, case: str) -> tuple[Path, list[str]]:
    """(the released folder, the convert arguments after OFFICIAL_DIR) of each way OUTPUT_DIR can hit it."""
    parent = tmp_path / "parent"
    official = parent / ("x.converting" if case == "scratch folder is the source" else "official")
    if case == "parent of the source":
        return official, [str(parent), "--overwrite_output_dir"]
    if case == "inside the source":
        return official, [str(official / "converted")]
    if case == "link to a folder inside the source":
        (tmp_path / "out_link").symlink_to(official / "converted")
        return official, [str(tmp_path / "out_link"), "--overwrite_output_dir"]
    if case == "link to the source":
        (tmp_path / "out_link").symlink_to(official)
        return official, [str(tmp_path / "out_link"), "--overwrite_output_dir"]
    if case == "self-referencing link":
        (tmp_path / "loop").symlink_to(tmp_path / "loop")
        return official, [str(tmp_path / "loop")]
    if case == "scratch folder is the source":  # OUTPUT_DIR x writes x.converting, which it deletes first
        return official, [str(parent / "x"), "--overwrite_output_dir"]
    raise ValueError(case)


OUTPUT_CASES = {"parent of the source": "OUTPUT_DIR {parent} contains the released folder",
                "inside the source": "OUTPUT_DIR {official}/converted lies inside the released folder",
                "link to a folder inside the source": "OUTPUT_DIR {official}/converted lies inside the released "
                                                      "folder (the link {tmp}/out_link leads to",
                "link to the source": "OUTPUT_DIR {official} is the released folder (the link",
                "self-referencing link": "OUTPUT_DIR is a symlink that points back at itself",
                "scratch folder is the source": "the conversion's scratch folder {official} is the released folder"}


@pytest.mark.parametrize("case", list(OUTPUT_CASES))
def test_output_dir_around_or_inside_the_source_is_refused_and_the_source_stays(tmp_path, uncased_vocab, capsys,
                                                                               case):
    official, rest = _layout(tmp_path, case)
    make_official(official, "bert", vocab=uncased_vocab)
    before = _files(official)
    line = _refused([str(official), *rest], capsys)
    real = tmp_path.resolve()
    assert OUTPUT_CASES[case].format(parent=real / "parent", official=official.resolve(), tmp=tmp_path) in line, line
    assert _files(official) == before  # every released file still there, byte for byte
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith((".deleting", ".converting")) and p != official]
    assert not (official / "converted").exists()


def test_an_output_link_to_a_folder_elsewhere_is_written_through(tmp_path, uncased_vocab):
    """A link that leads outside the source is what its user meant: the folder it names receives the checkpoint
    and the link keeps naming it (no "out.deleting" left behind)."""
    make_official(tmp_path / "official", "bert", vocab=uncased_vocab)
    (tmp_path / "real_out").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "real_out")
    convert_checkpoint(tmp_path / "official", tmp_path / "out")
    assert (tmp_path / "out").is_symlink() and (tmp_path / "real_out" / "model.safetensors").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith((".deleting", ".converting"))]


# --- config.json checked (types, then sizes against the weights) before any model is built ------------------------

def _official_with_config(tmp_path, vocab, **changes) -> Path:
    official = tmp_path / "official"
    make_official(official, "bert", vocab=vocab)
    config = json.loads((official / "config.json").read_text())
    (official / "config.json").write_text(json.dumps({**config, **changes}))
    return official


CAP = 3 << 30  # bytes of address space: torch and transformers load in it; a 51 GB model does not


@pytest.mark.parametrize("change,said", [
    ({"vocab_size": 400_000_000}, "config.json vocab_size is 400000000 but the weight "
                                  "bert.embeddings.word_embeddings.weight has shape"),
    ({"max_position_embeddings": 400_000_000}, "config.json max_position_embeddings is 400000000 but the weight "
                                               "bert.embeddings.position_embeddings.weight has shape"),
])
def test_a_config_sizing_a_huge_model_is_refused_under_a_memory_cap(tmp_path, uncased_vocab, change, said):
    """Before: the model was built from config.json first (400M x 32 floats: 51 GB) and died allocating it."""
    import subprocess
    import sys

    official = _official_with_config(tmp_path, uncased_vocab, **change)
    code = (f"import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, ({CAP}, {CAP})); "
            "sys.argv = ['convert', *sys.argv[1:]]; runpy.run_module('corefbert.pretraining.convert', run_name='__main__')")
    root = ROOT
    done = subprocess.run([sys.executable, "-c", code, str(official), str(tmp_path / "out")], cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {official}: {said} ("), lines
    assert "config and weights are of different models" in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("change,said", [
    ({"hidden_size": "32"}, "config.json hidden_size must be a positive integer, got '32' (str)"),
    ({"vocab_size": 600.0}, "config.json vocab_size must be a positive integer, got 600.0 (float)"),
    ({"num_attention_heads": True}, "config.json num_attention_heads must be a positive integer, got True (bool)"),
    ({"num_hidden_layers": 0}, "config.json num_hidden_layers must be a positive integer, got 0 (int)"),
    ({"hidden_dropout_prob": "0.1"}, "config.json hidden_dropout_prob must be a number in [0, 1), got '0.1' (str)"),
    ({"layer_norm_eps": -1}, "config.json layer_norm_eps must be a positive number, got -1 (int)"),
    ({"pad_token_id": "0"}, "config.json pad_token_id must be a non-negative integer or null, got '0' (str)"),
    ({"hidden_act": 3}, "config.json hidden_act must be a name such as \"gelu\", got 3 (int)"),
    ({"num_attention_heads": 5}, "config.json hidden_size 32 is not a multiple of num_attention_heads 5"),
    ({"num_hidden_layers": 3}, "config.json num_hidden_layers is 3 but the weights hold 2 layer(s)"),
    ({"intermediate_size": 65}, "config.json intermediate_size is 65 but the weight "
                                "bert.encoder.layer.0.intermediate.dense.weight has shape (64, 32)"),
])
def test_config_values_of_the_wrong_type_or_size_are_one_line(tmp_path, uncased_vocab, capsys, change, said):
    official = _official_with_config(tmp_path, uncased_vocab, **change)
    line = _refused([str(official), str(tmp_path / "out")], capsys)
    assert said in line, line
    assert not (tmp_path / "out").exists()


# --- NaN/inf refused unless asked; float64 and integer weights converted with a warning ---------------------

def _official_with_weights(tmp_path, vocab, change) -> Path:
    official = tmp_path / "official"
    make_official(official, "bert", vocab=vocab)
    state = torch.load(official / "pytorch_model.bin", weights_only=True)
    change(state)
    torch.save(state, official / "pytorch_model.bin")
    return official


def _poison(state):
    state["bert.encoder.layer.1.output.dense.weight"][3, 4] = float("nan")
    state["bert.pooler.dense.bias"][0] = float("inf")


def test_non_finite_weights_are_refused_unless_allowed(tmp_path, uncased_vocab, capsys):
    from safetensors.torch import load_file

    official = _official_with_weights(tmp_path, uncased_vocab, _poison)
    line = _refused([str(official), str(tmp_path / "out")], capsys)
    assert "2 tensor(s) hold NaN or infinity (first: bert.encoder.layer.1.output.dense.weight (1 of 2048 " \
           "values))" in line and "--allow_non_finite" in line
    assert not (tmp_path / "out").exists()
    main([str(official), str(tmp_path / "out"), "--allow_non_finite"])
    printed = capsys.readouterr().out
    assert "warning: 2 tensor(s) hold NaN or infinity, written as they are (--allow_non_finite)" in printed
    written = load_file(tmp_path / "out" / "model.safetensors")
    assert torch.isnan(written["bert.encoder.layer.1.output.dense.weight"][3, 4])
    assert "NaN or infinity" in json.loads((tmp_path / "out" / "conversion.json").read_text())["notes"][-1]


def test_float64_and_integer_weights_are_converted_with_a_warning(tmp_path, uncased_vocab, capsys):
    from safetensors.torch import load_file

    def widen(state):
        for name in list(state):
            state[name] = state[name].double()
        state["bert.embeddings.token_type_embeddings.weight"] = torch.ones(2, 32, dtype=torch.int64)

    official = _official_with_weights(tmp_path, uncased_vocab, widen)
    main([str(official), str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert re.search(r"warning: \d+ float64 tensor\(s\) written as float32", printed), printed
    assert "warning: 1 integer tensor(s) written as float32 weights" in printed
    assert "bert.embeddings.token_type_embeddings.weight (int64)" in printed
    written = load_file(tmp_path / "out" / "model.safetensors")
    assert {t.dtype for t in written.values()} == {torch.float32}
    assert written["bert.embeddings.token_type_embeddings.weight"].eq(1).all()


# --- a Hub id is downloaded when online; offline, one line with the download command --------------------------

def test_a_hub_id_is_downloaded_and_converted(tmp_path, uncased_vocab, capsys, monkeypatch):
    """``snapshot_download`` is replaced by a local stand-in that hands over a released folder, as the Hub would."""
    import huggingface_hub

    released = tmp_path / "hub_cache" / "snapshots" / "abc123"
    make_official(released, "bert", vocab=uncased_vocab)
    calls = []

    def snapshot_download(repo_id, **kwargs):
        calls.append((repo_id, kwargs))
        return str(released)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    report = main(["someone/coref-bert-tiny", str(tmp_path / "out")])
    assert calls[0][0] == "someone/coref-bert-tiny" and "config.json" in calls[0][1]["allow_patterns"]
    assert report.copy_head_trained and (tmp_path / "out" / "model.safetensors").is_file()
    assert json.loads((tmp_path / "out" / "conversion.json").read_text())["source"] == "someone/coref-bert-tiny"
    assert "downloading someone/coref-bert-tiny from the Hub" in capsys.readouterr().out


def test_a_hub_id_offline_or_unreachable_is_one_line_showing_the_download(tmp_path, capsys, monkeypatch):
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    line = _refused(["nielsr/coref-bert-base", str(tmp_path / "out")], capsys)
    assert line == ("error: nielsr/coref-bert-base: not a local folder, and HF_HUB_OFFLINE=1 keeps the Hub id "
                    "nielsr/coref-bert-base from being downloaded; download it first where the network is reachable: "
                    "hf download nielsr/coref-bert-base --local-dir coref-bert-base, then python -m corefbert.pretraining.convert "
                    "coref-bert-base OUTPUT_DIR")

    def unreachable(repo_id, **kwargs):
        raise OSError("Network is unreachable")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    line = _refused(["nielsr/coref-bert-base", str(tmp_path / "out")], capsys)
    assert "downloading the Hub id failed (OSError: Network is unreachable)" in line and "hf download" in line


@pytest.mark.parametrize("family_dir", ["modernbert", "deberta", "electra", "distilbert"], indirect=True)
def test_a_checkpoint_of_another_encoder_family_is_refused_in_one_line(family_dir, tmp_path, capsys):
    """Convert reads the authors' BERT/RoBERTa release only; a checkpoint of another family (which
    loads as it is) is one line naming its model type, not a guess at BERT from its class name."""
    import json

    declared = json.loads((family_dir / "config.json").read_text())["model_type"]
    err = _refused([str(family_dir), str(tmp_path / "out")], capsys)
    assert f"config.json: model_type '{declared}': convert reads the authors'" in err and "no conversion" in err
    assert not (tmp_path / "out").exists()
