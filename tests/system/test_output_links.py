"""Issue 33.3: links planted in an output folder are never written through, by a pretraining resume or a
fine-tuning CLI; every file a run writes goes through ``corefbert.text.durable`` (``test_one_home`` checks the
source for writes by hand)."""

from __future__ import annotations

import json
import shutil

import pytest
import test_crash_safety
from helpers import FIXTURES, load_cli
from test_crash_safety import _glue_args, _mrp_args

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")
model_dir, corpus_dir = test_crash_safety.model_dir, test_crash_safety.corpus_dir
DOCRED = FIXTURES / "docred"


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "elsewhere" / "victim.txt"
    path.parent.mkdir()
    path.write_text("precious", encoding="utf-8")
    return path


def test_a_pretraining_resume_replaces_linked_outputs_and_writes_through_none(tmp_path, model_dir, corpus_dir,
                                                                             victim):
    from accelerate.state import AcceleratorState, GradientState

    out = tmp_path / "run"
    run = load_cli("pretrain/run_mrp.py").main
    run([*_mrp_args(model_dir, corpus_dir, 2), "--output_dir", str(out)])
    (out / "all_results.json").unlink()
    (out / "all_results.json").symlink_to(victim)
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    run([*_mrp_args(model_dir, corpus_dir, 3), "--output_dir", str(out), "--resume_from_checkpoint", "latest"])
    assert victim.read_text(encoding="utf-8") == "precious"
    assert not (out / "all_results.json").is_symlink() and "eval_mlm_loss" in json.loads(
        (out / "all_results.json").read_text(encoding="utf-8"))

    # The resume rewrites the log up to its checkpoint (in place of the link), then appends to its own file;
    # a link planted while the run appends is refused (tests/text/test_durable.py).
    records = (out / "log.jsonl").read_text(encoding="utf-8")
    (out / "log.jsonl").unlink()
    (out / "log.jsonl").symlink_to(victim)
    victim.write_text(records, encoding="utf-8")
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    run([*_mrp_args(model_dir, corpus_dir, 4), "--output_dir", str(out), "--resume_from_checkpoint", "latest"])
    assert victim.read_text(encoding="utf-8") == records
    assert not (out / "log.jsonl").is_symlink() and '"step": 4' in (out / "log.jsonl").read_text(encoding="utf-8")


def test_a_finetuning_cli_never_writes_through_links_at_its_output_names(tmp_path, model_dir, victim):
    out = tmp_path / "glue"
    names = ("all_results.json", "finetuning_args.json", "eval_predictions.tsv")
    out.mkdir()
    for name in names:
        (out / name).symlink_to(victim)
    (out / "all_results.json.tmp").symlink_to(victim)  # the temporary name writes once went through
    args = [*_glue_args(model_dir, out), "--do_eval", "--overwrite_output_dir"]
    args[args.index("--num_train_epochs") + 1] = "1"
    load_cli("finetune/run_glue.py").main(args)
    assert victim.read_text(encoding="utf-8") == "precious"
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim.txt"]
    assert not [p.name for p in out.iterdir() if p.name.endswith(".partial")], "no scratch folder left"
    for name in names[:2]:
        assert (out / name).is_file() and not (out / name).is_symlink(), name


def test_a_finetuning_cli_never_replaces_one_of_its_inputs(tmp_path, tiny_bert_dir, capsys):
    """Issue 33.1: DocRED's predictions are ``result.json``; a test file of that name in --output_dir is refused
    when the predictions would replace it (every JSON, JSON Lines and CoNLL input is remembered by its reader)."""
    out = tmp_path / "out"
    out.mkdir()
    test_file = out / "result.json"
    shutil.copy(DOCRED / "dev.json", test_file)
    before = test_file.read_bytes()
    with pytest.raises(SystemExit) as exit_info:
        load_cli("finetune/run_docred.py").main([
            "--model_name_or_path", str(tiny_bert_dir), "--rel_info_file", str(DOCRED / "rel_info.json"),
            "--test_file", str(test_file), "--do_predict", "--max_seq_length", "256", "--output_dir", str(out),
            "--overwrite_output_dir", "--disable_tqdm", "true"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_info.value.code == 2
    assert err == (f"error: {test_file}: writing here would replace the input {test_file}; choose another output "
                   "folder (no command writes onto one of its inputs)")
    assert test_file.read_bytes() == before
