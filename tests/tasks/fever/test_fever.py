"""FEVER: readers and bad input, KGAT kernels and model, the CLI."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from helpers import FIXTURES, ROOT, shared_data

from corefbert.errors import CorefBertError
from corefbert.tasks.fever.kgat import KgatModel, kernel_features, kernel_mus, kernel_sigmas
from corefbert.tasks.fever.task import attach_retrieved, attach_wiki_evidence, clean_text, read_claims

FEVER = FIXTURES / "fever"


def test_readers_recognize_the_three_forms():
    official, form = read_claims(str(FEVER / "train.jsonl"))
    assert form == "fever" and [c.label for c in official][:3] == ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"]
    assert attach_wiki_evidence(official, str(FEVER / "wiki-pages"), "train.jsonl") == 0
    assert [e.text for e in official[0].candidates] == ["She was born in Oslo in 1950 ."]
    assert [(e.page, e.sentence) for e in official[3].candidates] == [("Lake_Tana", 0), ("Lake_Tana", 1)]
    assert official[2].candidates == []  # NOT ENOUGH INFO: no gold sentence
    retrieved, form = read_claims(str(FEVER / "retrieved_dev.jsonl"))
    assert form == "retrieved" and len(retrieved[2].candidates) == 3 and retrieved[2].candidates[0].score == 0.8
    dev, form = read_claims(str(FEVER / "dev.jsonl"))
    attach_retrieved(dev, str(FEVER / "retrieved_dev.jsonl"))
    assert dev[1].candidates[1].page == "Bergen_-LRB-city-RRB-" and dev[1].evidence_sets is not None
    pairs, form = read_claims(str(FEVER / "pairs.jsonl"))
    assert form == "pairs" and pairs[0].id == "101" and pairs[0].candidates[0].text.startswith("Oslo is")
    assert clean_text("Bergen_-LRB-city-RRB-") == "Bergen (city)"


def test_bad_label_is_one_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    rows = (FEVER / "pairs.jsonl").read_text().splitlines()
    rows[2] = rows[2].replace('"gold_label": "SUPPORTS"', '"gold_label": "MAYBE"')
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(CorefBertError, match=r"bad.jsonl:3: label 'MAYBE' is not one of SUPPORTS, REFUTES"):
        read_claims(str(path))


def test_missing_wiki_page_is_skipped_and_counted(tmp_path, capsys):
    claims, _ = read_claims(str(FEVER / "train.jsonl"))
    claims[0].evidence_sets = [[[1, 2, "No_Such_Page", 0], [1, 3, "Anna_Berg", 1]]]
    assert attach_wiki_evidence(claims, str(FEVER / "wiki-pages"), "train.jsonl") == 1
    assert [e.page for e in claims[0].candidates] == ["Anna_Berg"]
    err = capsys.readouterr().err
    assert "skipped 1 evidence references" in err and "No_Such_Page" in err


def test_kernels_as_published():
    mus, sigmas = kernel_mus(21), kernel_sigmas(21)
    assert len(mus) == len(sigmas) == 21
    assert mus[0] == 1.0 and mus[1] == pytest.approx(0.95) and mus[-1] == pytest.approx(-0.95)
    assert all(a - b == pytest.approx(0.1) for a, b in zip(mus[1:], mus[2:]))
    assert sigmas[0] == 1e-3 and set(sigmas[1:]) == {0.1}


def test_kernel_features_values_and_masking():
    mus, sigmas = torch.tensor(kernel_mus(21)), torch.tensor(kernel_sigmas(21))
    query = torch.tensor([[[1.0, 0.0]]])  # [1, 1, 2]
    doc = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # an exact match and an orthogonal token
    features = kernel_features(query, doc, torch.tensor([[1.0, 0.0]]), mus, sigmas)  # orthogonal masked
    assert features.shape == (1, 1, 21)
    assert features[0, 0, 0] == pytest.approx(0.0, abs=1e-6)  # exact-match kernel: log(1)
    assert features[0, 0, 1] == pytest.approx(-0.05**2 / (2 * 0.1**2), abs=1e-5)  # mu 0.95
    assert features[0, 0, 10] == pytest.approx(torch.log(torch.tensor(1e-10)).item(), abs=1e-3)  # mu 0.05, masked
    unmasked = kernel_features(query, doc, torch.ones(1, 2), mus, sigmas)
    assert unmasked[0, 0, 10] == pytest.approx(-0.05**2 / (2 * 0.1**2), abs=1e-5)  # cos 0 meets mu 0.05


def _task(tiny_bert_dir, **kwargs):
    from corefbert.tasks.base import FinetuningArguments
    from corefbert.tasks.fever.task import FeverArguments, FeverTask

    options = dict(train_file=str(FEVER / "train.jsonl"), wiki_pages_dir=str(FEVER / "wiki-pages"),
                   model_type="kgat", max_seq_length=32) | kwargs
    return FeverTask.variant_for(["--model_type", options["model_type"]])(
        FeverArguments(**options), FinetuningArguments(model_name_or_path=str(tiny_bert_dir), output_dir="unused",
                                                       do_train=True))


def test_kgat_masks_padded_nodes(tiny_bert_dir):
    task = _task(tiny_bert_dir)
    features = task.train_dataset()
    torch.manual_seed(0)
    model = task.build_model().eval()
    assert isinstance(model, KgatModel)
    single, mixed = task.collate([features[0]]), task.collate([features[0], features[3]])
    assert mixed["node_mask"].tolist() == [[True, False], [True, True]] and mixed["input_ids"].shape[0] == 3
    with torch.no_grad():
        alone, together = model(**single), model(**mixed)
    assert together.logits.shape == (2, 3) and torch.isfinite(together.loss)
    assert together.select_prob[0].tolist() == pytest.approx([1.0, 0.0])
    assert torch.allclose(alone.logits[0], together.logits[0], atol=1e-5)
    assert together.logits.exp().sum(-1).tolist() == pytest.approx([1.0, 1.0], abs=1e-5)
    model.train()
    model(**mixed).loss.backward()  # every trained parameter is used: no DDP "unused parameter" error
    assert [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None] == []
    # The pooler is kept (the saved folder is a whole encoder checkpoint) but frozen, so DDP ignores it.
    assert [n for n, p in model.named_parameters() if not p.requires_grad] == [
        "encoder.pooler.dense.weight", "encoder.pooler.dense.bias"]


def _run_fever(argv):
    spec = importlib.util.spec_from_file_location("run_fever", ROOT / "finetune" / "run_fever.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


@pytest.mark.slow
def test_cli_kgat_end_to_end_with_wiki_pages_and_retrieved_evidence(tiny_bert_dir, tmp_path):
    out = tmp_path / "out"
    results = _run_fever([
        "--model_name_or_path", str(tiny_bert_dir), "--model_type", "kgat", "--max_seq_length", "32",
        "--train_file", str(FEVER / "train.jsonl"), "--wiki_pages_dir", str(FEVER / "wiki-pages"),
        "--validation_file", str(FEVER / "dev.jsonl"), "--validation_evidence_file", str(FEVER / "retrieved_dev.jsonl"),
        "--test_file", str(FEVER / "retrieved_dev.jsonl"), "--do_train", "--do_eval", "--do_predict",
        "--output_dir", str(out), "--max_steps", "2", "--per_device_train_batch_size", "2",
        "--gradient_accumulation_steps", "1", "--disable_tqdm", "true",
    ])
    for key in ("eval_accuracy", "eval_macro_f1", "eval_fever_score", "predict_accuracy", "train_loss"):
        assert key in results
    assert "predict_fever_score" not in results  # a retrieved file alone has no gold evidence sets
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [5, 6, 7]
    assert rows[2]["predicted_evidence"] == [["Lake_Tana", 0], ["Lake_Tana", 1], ["Oslo", 0]]
    assert all(r["predicted_label"] in ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO") for r in rows)
    again = _run_fever(["--model_name_or_path", str(out / "best"), "--test_file", str(FEVER / "retrieved_dev.jsonl"),
                        "--do_predict", "--output_dir", str(tmp_path / "again"), "--max_seq_length", "32"])
    assert again["predict_accuracy"] == pytest.approx(results["eval_accuracy"])  # same claims, best model


@pytest.mark.slow
def test_cli_concat_on_pairs_with_a_seeded_split(tiny_bert_dir, tmp_path):
    results = _run_fever([
        "--model_name_or_path", str(tiny_bert_dir), "--train_file", str(FEVER / "pairs.jsonl"), "--split_seed", "3",
        "--validation_split_percentage", "25", "--do_train", "--do_eval", "--output_dir", str(tmp_path / "out"),
        "--max_steps", "2", "--per_device_train_batch_size", "4", "--disable_tqdm", "true",
    ])
    assert results["train_steps"] == 2 and "eval_fever_score" not in results
    rows = (tmp_path / "out" / "eval_predictions.jsonl").read_text().splitlines()
    assert len(rows) == 2 and json.loads(rows[0])["predicted_evidence"] == []


def test_cli_official_file_without_evidence_text_is_one_line(tiny_bert_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        _run_fever(["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(FEVER / "train.jsonl"),
                    "--do_train", "--output_dir", str(tmp_path / "out")])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "train.jsonl" in err and "--wiki_pages_dir" in err and "\n" not in err


@pytest.mark.slow
@pytest.mark.shared_data
def test_real_fever_files_read_and_train_a_few_steps(tiny_bert_dir, tmp_path):
    claims, form = read_claims(str(shared_data("fever", "paper_dev.jsonl")))
    assert form == "fever" and len(claims) == 9999
    assert {c.label for c in claims} == {"SUPPORTS", "REFUTES", "NOT ENOUGH INFO"}
    symmetric = shared_data("fever", "fever_symmetric_v0.2_dev.no_paper_test.jsonl")
    pairs, form = read_claims(str(symmetric))
    assert form == "pairs" and len(pairs) == 681
    results = _run_fever([
        "--model_name_or_path", str(tiny_bert_dir), "--model_type", "kgat", "--max_seq_length", "48",
        "--train_file", str(symmetric), "--split_seed", "1", "--validation_split_percentage", "20", "--do_train", "--do_eval",
        "--output_dir", str(tmp_path / "out"), "--max_steps", "2", "--per_device_train_batch_size", "4",
        "--gradient_accumulation_steps", "1", "--max_eval_samples", "16", "--disable_tqdm", "true",
    ])
    assert 0 <= results["eval_accuracy"] <= 100


@pytest.mark.parametrize("model_type", ["concat", "kgat"])
def test_each_model_type_is_a_class_whose_defaults_a_flag_and_a_config_give_alike(model_type, tmp_path):
    """A variant that changes the recipe is a class with its own ``training_defaults``; the command
    line and a ``--config`` YAML pick it alike."""
    import dataclasses

    from corefbert.tasks.base import parse_task_arguments
    from corefbert.tasks.fever.task import FeverTask

    variant = FeverTask.variant_for(["--model_type", model_type])
    assert variant.model_type == model_type and variant.training_defaults
    config = tmp_path / "fever.yaml"
    config.write_text(f"model_type: {model_type}\n")
    base = ["--model_name_or_path", "m", "--output_dir", str(tmp_path)]
    parsed = [parse_task_arguments(FeverTask, [*base, "--model_type", model_type]),
              parse_task_arguments(FeverTask, [*base, "--config", str(config)]),
              parse_task_arguments(variant, [*base, "--model_type", model_type])]
    flags, yaml_file, direct = [dataclasses.asdict(args) for _, args in parsed]
    assert flags == yaml_file == direct
    assert {key: flags[key] for key in variant.training_defaults} == variant.training_defaults
    assert FeverTask.variant_for([]).training_defaults != FeverTask.variant_for(["--model_type", "kgat"]).training_defaults


def test_a_model_fine_tuned_here_picks_its_own_variant_and_defaults(tmp_path):
    from corefbert.tasks.base import FinetuningArguments
    from corefbert.tasks.fever.task import ConcatFeverTask, FeverArguments, FeverTask, KgatFeverTask
    from corefbert.tasks.heads import write_head_config

    write_head_config(str(tmp_path), "fever", {"model_type": "kgat", "num_kernels": 21})
    assert FeverTask.variant_for(["--model_type", "concat", "--model_name_or_path", str(tmp_path)]) is KgatFeverTask
    assert FeverTask.variant_for(["--model_name_or_path", str(tmp_path)]) is KgatFeverTask
    args = FinetuningArguments(model_name_or_path=str(tmp_path), output_dir="unused", do_train=True)
    with pytest.raises(CorefBertError, match="holds a kgat model, not a concat one"):
        ConcatFeverTask(FeverArguments(train_file=str(FEVER / "pairs.jsonl")), args)
    with pytest.raises(TypeError, match="FeverTask is a family of variants"):
        FeverTask(FeverArguments(train_file=str(FEVER / "pairs.jsonl")), args)


def test_cli_kgat_fine_tunes_two_steps_with_every_family(family_dir, tmp_path):
    """KGAT (claim-evidence pairs in each tokenizer's pair framing, token states of any encoder) on a
    tiny random checkpoint of each encoder family: 2 steps and evaluation; the encoder saved loads whole."""
    from transformers import AutoModel

    out = tmp_path / "out"
    results = _run_fever([
        "--model_name_or_path", str(family_dir), "--model_type", "kgat", "--max_seq_length", "32",
        "--train_file", str(FEVER / "train.jsonl"), "--wiki_pages_dir", str(FEVER / "wiki-pages"),
        "--validation_file", str(FEVER / "dev.jsonl"), "--validation_evidence_file", str(FEVER / "retrieved_dev.jsonl"),
        "--do_train", "--do_eval", "--output_dir", str(out), "--max_steps", "2", "--per_device_train_batch_size", "2",
        "--disable_tqdm", "true",
    ])
    assert results["train_steps"] == 2 and 0.0 <= results["eval_accuracy"] <= 100.0
    _, info = AutoModel.from_pretrained(str(out / "best"), output_loading_info=True)
    assert not info["missing_keys"]
