"""The Hub round trip without network: ``--push_to_hub`` stages a complete repository (weights, tokenizer, a
model card with metadata and ``model-index``) and hands it to ``HfApi``, replaced here by a local stand-in
that records what would be uploaded."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import (
    FIXTURES,
    assert_card_links_the_project,
    card_code_blocks,
    card_commands,
    card_spacy_config,
    load_cli,
    synthetic_corpus,
)
from huggingface_hub import ModelCard

from corefbert.errors import CorefBertError
from corefbert.training import hub
from corefbert.training.outputs import cards

TOKEN = "hf_secret_token_never_on_disk"


class RecordingHub:
    """Stands in for ``huggingface_hub.HfApi``: records the token, the repository and every uploaded file."""

    calls: list = []

    def __init__(self, token=None):
        self.token = token

    def create_repo(self, repo_id, private=None, exist_ok=False, repo_type=None):
        RecordingHub.calls.append(("create_repo", repo_id, private, exist_ok, self.token))
        full = repo_id if "/" in repo_id else f"me/{repo_id}"  # the Hub puts a bare name under the token's user
        return type("RepoUrl", (), {"repo_id": full})()

    def upload_folder(self, *, repo_id, folder_path, repo_type=None, commit_message=None):
        files = {str(p.relative_to(folder_path)): p.read_bytes() for p in Path(folder_path).rglob("*") if p.is_file()}
        RecordingHub.calls.append(("upload_folder", repo_id, files))


@pytest.fixture
def recording_hub(monkeypatch):
    RecordingHub.calls = []
    monkeypatch.setattr(hub, "HfApi", RecordingHub)
    return RecordingHub.calls


def _uploaded(calls) -> tuple[str, dict]:
    uploads = [c for c in calls if c[0] == "upload_folder"]
    assert len(uploads) == 1
    return uploads[0][1], uploads[0][2]


def _no_local_path_or_token(files: dict, *local_dirs) -> None:
    for name, content in files.items():
        text = content.decode("utf-8", errors="ignore")
        assert TOKEN not in text, name
        for folder in local_dirs:
            assert str(folder) not in text, f"{name} names the local folder {folder}"


def _glue_argv(model_dir, out, *extra) -> list[str]:
    return ["--model_name_or_path", str(model_dir), "--task_name", "rte", "--data_dir", str(FIXTURES / "glue" / "RTE"),
            "--output_dir", str(out), "--do_train", "--do_eval", "--max_steps", "2", "--per_device_train_batch_size",
            "4", "--max_seq_length", "48", "--disable_tqdm", "true", *extra]


def test_fine_tuned_run_stages_and_uploads_a_complete_repository(tmp_path, tiny_bert_dir, recording_hub,
                                                                  fresh_accelerate_state):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from corefbert.tasks.base import parse_task_arguments
    from corefbert.tasks.glue import GlueTask

    out = tmp_path / "rte"
    # The run, then the push its last line makes (called here, so the test holds before and after wiring).
    results = load_cli("finetune/run_glue.py").main(_glue_argv(tiny_bert_dir, out))
    task_args, args = parse_task_arguments(GlueTask, _glue_argv(tiny_bert_dir, out, "--push_to_hub", "--hub_model_id",
                                                                "me/rte-tiny", "--hub_token", TOKEN))
    staged = hub.push_finetuned(GlueTask(task_args, args), args, results)

    assert ("create_repo", "me/rte-tiny", False, True, TOKEN) in recording_hub
    repo_id, files = _uploaded(recording_hub)
    assert repo_id == "me/rte-tiny" and staged == out / "hub"
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md", "all_results.json"} <= set(files)
    _no_local_path_or_token(files, tmp_path, tiny_bert_dir)
    card = ModelCard.load(staged / "README.md")
    assert card.data.license == "apache-2.0" and card.data.pipeline_tag == "text-classification"
    assert card.data.datasets == ["nyu-mll/glue"] and card.data.base_model is None  # a local base has no Hub id
    scores = {r.metric_type: r.metric_value for r in card.data.eval_results}
    assert scores["accuracy"] == pytest.approx(results["eval_accuracy"], abs=1e-4)
    assert all(r.dataset_config == "rte" and r.dataset_split == "validation" for r in card.data.eval_results)
    assert "learning_rate" in card.text and "AutoModelForSequenceClassification.from_pretrained(\"me/rte-tiny\")" in card.text
    model, info = AutoModelForSequenceClassification.from_pretrained(staged, output_loading_info=True)
    assert not info["missing_keys"] and AutoTokenizer.from_pretrained(staged).is_fast
    assert json.loads(files["all_results.json"]) == pytest.approx(results, nan_ok=True)


def test_pretraining_final_card_and_push(tmp_path, tiny_bert_dir, recording_hub, fresh_accelerate_state):
    """final/README.md is the card (written by every pretraining run); the push stages final/ as is."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from corefbert.pretraining.pretraining_args import PretrainingArguments
    from corefbert.pretraining.run import run_pretraining

    corpus = synthetic_corpus(AutoTokenizer.from_pretrained(tiny_bert_dir), n_train=8, n_eval=4)
    args = PretrainingArguments(model_name_or_path=str(tiny_bert_dir), output_dir=str(tmp_path / "pre"), max_steps=2,
                                per_device_train_batch_size=4, per_device_eval_batch_size=4, mixed_precision="no")
    metrics = run_pretraining(args, splits=corpus)
    # The push as run_pretraining's last line makes it (called here, so the test holds before and after wiring).
    staged = hub.push_pretrained(replace(args, push_to_hub=True, hub_token=TOKEN), tmp_path / "pre" / "final")

    assert ("create_repo", "pre", False, True, TOKEN) in recording_hub  # default: the output folder's name
    repo_id, files = _uploaded(recording_hub)
    assert repo_id == "me/pre"
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md", "all_results.json"} <= set(files)
    _no_local_path_or_token(files, tmp_path, tiny_bert_dir)
    card = ModelCard.load(staged / "README.md")
    assert card.data.pipeline_tag == "fill-mask" and card.data.license == "apache-2.0"
    scores = {r.metric_type: r.metric_value for r in card.data.eval_results}
    assert scores["mrp_accuracy"] == pytest.approx(metrics["mrp_accuracy"], abs=1e-4)
    assert "mrp_ratio" in card.text and "AutoModel.from_pretrained" in card.text
    _, info = AutoModelForMaskedLM.from_pretrained(staged, output_loading_info=True)
    assert not info["missing_keys"]


def test_run_glue_push_to_hub_end_to_end(tmp_path, tiny_bert_dir, recording_hub, fresh_accelerate_state,
                                         monkeypatch):
    """The CLI flag itself: the run pushes at its end, and the token reaches no file the run writes."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the stand-in replaces the network; the offline check must pass
    out = tmp_path / "rte"
    load_cli("finetune/run_glue.py").main(_glue_argv(tiny_bert_dir, out, "--push_to_hub", "--hub_model_id",
                                                     "me/rte-tiny", "--hub_token", TOKEN))
    repo_id, files = _uploaded(recording_hub)
    assert repo_id == "me/rte-tiny" and {"model.safetensors", "README.md"} <= set(files)
    written = [p for p in out.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".md", ".txt", ".yaml")]
    assert written and not [p for p in written if TOKEN in p.read_text(encoding="utf-8", errors="replace")]


def test_run_pretraining_push_to_hub_end_to_end(tmp_path, tiny_bert_dir, recording_hub, fresh_accelerate_state,
                                                monkeypatch):
    from transformers import AutoTokenizer

    from corefbert.pretraining.pretraining_args import PretrainingArguments
    from corefbert.pretraining.run import run_pretraining

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    corpus = synthetic_corpus(AutoTokenizer.from_pretrained(tiny_bert_dir), n_train=8, n_eval=4)
    args = PretrainingArguments(model_name_or_path=str(tiny_bert_dir), output_dir=str(tmp_path / "pre"), max_steps=2,
                                per_device_train_batch_size=4, per_device_eval_batch_size=4, mixed_precision="no",
                                push_to_hub=True, hub_model_id="me/corefbert-tiny", hub_token=TOKEN)
    run_pretraining(args, splits=corpus)
    repo_id, files = _uploaded(recording_hub)
    assert repo_id == "me/corefbert-tiny" and {"model.safetensors", "README.md", "all_results.json"} <= set(files)
    _no_local_path_or_token(files, tmp_path, tiny_bert_dir)


def test_a_pushed_coreference_model_resolves_text_as_its_card_says(tmp_path, recording_hub, fresh_accelerate_state,
                                                                    monkeypatch, capsys):
    """An end-to-end coreference run with --push_to_hub: the uploaded card links this project and says how to
    download and use the model; its `hf download` and `corefbert resolve` lines, run on the uploaded files,
    resolve the card's example text."""
    import shlex

    from corefbert.tasks.coref_e2e.resolve import main as resolve

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(cards, "project_url", lambda: "https://example.org/corefbert-project")
    load_cli("finetune/run_coref_e2e.py").main([
        "--encoder", "lsl", "--train_file", str(FIXTURES / "coref_e2e" / "two_docs.conll"), "--do_train",
        "--max_steps", "2", "--embedding_dim", "16", "--lstm_size", "16", "--ffnn_size", "16", "--char_filters",
        "4", "--max_span_width", "3", "--disable_tqdm", "true", "--output_dir", str(tmp_path / "lsl"),
        "--push_to_hub", "--hub_model_id", "me/lsl-tiny", "--hub_token", TOKEN])
    repo_id, files = _uploaded(recording_hub)
    assert repo_id == "me/lsl-tiny" and {"model.safetensors", "coref_e2e_head.json", "README.md"} <= set(files)
    _no_local_path_or_token(files, tmp_path)
    text = files["README.md"].decode("utf-8")
    assert_card_links_the_project(text, "https://example.org/corefbert-project")
    assert "transformers import" not in text  # a recurrent encoder: no transformers class loads it
    (snippet,) = [b for b in card_code_blocks(text, "python") if "RECURRENT_FOLDER.from_pretrained" in b]
    assert '"lsl-tiny"' in snippet  # corefbert's one loader of models trained from scratch, on the download
    assert card_spacy_config(text) == {"model": "lsl-tiny"}
    # `hf download`, done with the uploaded files, then the card's own resolve line in that folder's parent.
    (download,) = [shlex.split(b) for b in card_code_blocks(text, "bash") if b.startswith("hf download")]
    assert download == ["hf", "download", "me/lsl-tiny", "--local-dir", "lsl-tiny"]
    for name, content in files.items():
        (tmp_path / "lsl-tiny" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "lsl-tiny" / name).write_bytes(content)
    monkeypatch.chdir(tmp_path)
    (resolve_argv,) = card_commands(text, "resolve")
    result = resolve(resolve_argv + ["--output_dir", "resolved"])
    capsys.readouterr()
    assert result["text"] == cards.EXAMPLE_TEXT and (tmp_path / "resolved" / "text.html").is_file()


# A run of each family trained from scratch, as its CLI runs it with --push_to_hub: (script, argv, the run's model
# folder under output_dir, the files its upload must hold besides README.md and all_results.json).
SCRATCH_RUNS = {
    "babi": ("finetune/run_babi.py", ["--data_dir", str(FIXTURES / "babi"), "--task_ids", "1", "--do_train",
                                      "--embedding_dim", "8", "--hidden_size", "8"],
             "qa1/seed_0/last", {"model.safetensors", "babi_reader.json"}),
    "pronoun_pairs": ("finetune/run_pronoun_pairs.py", ["--model", "bilstm", "--train_file",
                                                        str(FIXTURES / "pronoun_pairs" / "pairs16.jsonl"),
                                                        "--do_train", "--embedding_dim", "8", "--hidden_size", "6"],
                      "last", {"model.safetensors", "pair_model.json", "vocab.json"}),
}


@pytest.mark.parametrize("family", sorted(SCRATCH_RUNS))
def test_a_model_trained_from_scratch_is_pushed_and_its_card_loads_it(tmp_path, recording_hub, family,
                                                                      fresh_accelerate_state, monkeypatch):
    """--push_to_hub uploads a folder trained from scratch by the same path as a Hugging Face one
    (staged, carded, uploaded); the card's download line and its Python, run on the uploaded files, give the
    model the run saved."""
    import shlex

    import torch

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    script, argv, model_dir, files_wanted = SCRATCH_RUNS[family]
    out = tmp_path / family
    load_cli(script).main([*argv, "--max_steps", "2", "--disable_tqdm", "true", "--output_dir", str(out),
                           "--push_to_hub", "--hub_model_id", "me/scratch-tiny", "--hub_token", TOKEN])
    repo_id, files = _uploaded(recording_hub)
    assert repo_id == "me/scratch-tiny" and files_wanted | {"README.md", "all_results.json"} <= set(files)
    assert "config.json" not in files and not [f for f in files if f.endswith((".bin", ".pt", ".pkl"))]
    _no_local_path_or_token(files, tmp_path)
    text = files["README.md"].decode("utf-8")
    assert "not a transformers checkpoint" in text and "transformers import" not in text
    (download,) = [shlex.split(b) for b in card_code_blocks(text, "bash") if b.startswith("hf download")]
    assert download == ["hf", "download", "me/scratch-tiny", "--local-dir", "scratch-tiny"]
    for name, content in files.items():
        (tmp_path / "scratch-tiny" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "scratch-tiny" / name).write_bytes(content)
    monkeypatch.chdir(tmp_path)
    (snippet,) = [b for b in card_code_blocks(text, "python") if ".from_pretrained(" in b]
    namespace: dict = {}
    exec(snippet, namespace)  # the card's own lines, on the downloaded folder
    from safetensors.torch import load_file

    saved = load_file(str(out / model_dir / "model.safetensors"))
    loaded = namespace["model"].state_dict()
    assert set(loaded) == set(saved) and all(torch.equal(loaded[k], saved[k]) for k in saved)
    assert namespace["vocabulary"] is not None and not namespace["model"].training


def test_a_babi_table_of_several_runs_refuses_push_to_hub_before_training(tmp_path, monkeypatch, capsys,
                                                                          fresh_accelerate_state):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    out = tmp_path / "table"
    with pytest.raises(SystemExit) as exit_info:
        load_cli("finetune/run_babi.py").main(["--data_dir", str(FIXTURES / "babi"), "--task_ids", "1", "8",
                                               "--do_train", "--output_dir", str(out), "--push_to_hub"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and "--push_to_hub uploads one model" in err[0], err
    assert not (out / "qa1").exists()


def test_push_to_hub_offline_is_refused_before_training(tmp_path, tiny_bert_dir, monkeypatch, capsys,
                                                        fresh_accelerate_state):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "rte"
    with pytest.raises(SystemExit) as exit_info:
        load_cli("finetune/run_glue.py").main(_glue_argv(tiny_bert_dir, out, "--push_to_hub"))
    assert exit_info.value.code == 2 and "HF_HUB_OFFLINE" in capsys.readouterr().err
    assert not (out / "last").exists()


def test_a_failed_upload_is_one_line_and_keeps_the_staging(tmp_path, recording_hub, monkeypatch):
    class Unreachable(RecordingHub):
        def create_repo(self, *args, **kwargs):
            raise ConnectionError("Name or service not known")

    monkeypatch.setattr(hub, "HfApi", Unreachable)
    staging = tmp_path / "out" / "hub"
    staging.mkdir(parents=True)
    (staging / "config.json").write_text("{}")
    args = type("Args", (), {"hub_model_id": "me/x", "hub_token": None, "hub_private_repo": True,
                             "output_dir": str(tmp_path / "out")})()
    with pytest.raises(CorefBertError, match=r"upload to the Hub failed \(ConnectionError.*hf upload me/x") as err:
        hub.upload_staged(staging, args)
    assert "\n" not in str(err.value) and (staging / "config.json").is_file()


def _training_args(**values):
    from corefbert.tasks.base import FinetuningArguments

    return FinetuningArguments(output_dir="out", do_train=True, **values)


def test_hub_arguments_are_checked_before_training(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CorefBertError, match="HF_HUB_OFFLINE=1"):
        hub.check_hub_arguments(_training_args(push_to_hub=True))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    hub.check_hub_arguments(_training_args(push_to_hub=True, hub_model_id="me/name"))
    with pytest.raises(CorefBertError, match="not a Hub repository name"):
        hub.check_hub_arguments(_training_args(push_to_hub=True, hub_model_id="me/a/b"))
    with pytest.raises(CorefBertError, match="--hub_model_id given without --push_to_hub"):
        hub.check_hub_arguments(_training_args(hub_model_id="me/name"))
    from corefbert.tasks.base import FinetuningArguments

    with pytest.raises(CorefBertError, match="add --do_train"):
        hub.check_hub_arguments(FinetuningArguments(output_dir="out", do_eval=True, push_to_hub=True))


def test_cards_name_no_local_path(tmp_path):
    assert cards.model_reference("bert-base-cased") == ("bert-base-cased", "[bert-base-cased](https://huggingface.co/bert-base-cased)")
    (tmp_path / "runs" / "base" / "final").mkdir(parents=True)
    base, text = cards.model_reference(str(tmp_path / "runs" / "base" / "final"))
    assert base is None and "base/final" in text and str(tmp_path) not in text
    settings = hub.public_settings(_training_args(push_to_hub=True, hub_token=TOKEN))
    assert settings["hub_token"] == "<redacted>" and TOKEN not in json.dumps(settings)


# --- no message shows a token --------------------------------------------------------------------------------

SECRET = "hf_SECRETwB7xQ2mZ9kLp4vR8tY1nC5dF3gH6jK"  # the shape of a real access token: hf_ and 34 letters/digits


def _yaml(text):
    def write(w):
        (w / "run.yaml").write_text(text.replace("SECRET", SECRET), encoding="utf-8")
        return str(w / "run.yaml")
    return write


def test_a_token_of_the_wrong_type_is_one_line():
    args = _training_args(push_to_hub=True, hub_token=[SECRET])
    with pytest.raises(CorefBertError, match="--hub_token must be a string") as err:
        args.validate()
    assert SECRET not in str(err.value) and "not shown" in str(err.value)


def test_a_failed_upload_that_quotes_the_token_does_not_show_it(tmp_path, monkeypatch):
    class Refused(RecordingHub):
        def create_repo(self, *args, **kwargs):
            raise PermissionError(f"401 Unauthorized: invalid token {SECRET} for https://huggingface.co/api/repos")

    monkeypatch.setattr(hub, "HfApi", Refused)
    staging = tmp_path / "out" / "hub"
    staging.mkdir(parents=True)
    args = type("Args", (), {"hub_model_id": "me/x", "hub_token": SECRET, "hub_private_repo": False,
                             "output_dir": str(tmp_path / "out")})()
    with pytest.raises(CorefBertError, match=r"upload to the Hub failed \(PermissionError: 401") as err:
        hub.upload_staged(staging, args)
    assert SECRET not in str(err.value) and "<redacted>" in str(err.value)
