"""The ablation study (pretrain/run_ablation.py, corefbert/ablation*.py) on a tiny BERT and a synthetic corpus:
end to end, reproducible, resumable after a kill, and its bootstrap against a literal reference."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES, load_cli, save_corpus

from corefbert.ablation.probes import GAP_F1, RATIO, statistic

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")
COREF = FIXTURES / "coref"
ARMS = ("corefbert", "mrm", "wwm")
SEEDS = (7, 8)


def _argv(model_dir, corpus_dir, out, *extra) -> list[str]:
    return ["--model_name_or_path", str(model_dir), "--dataset_dir", str(corpus_dir), "--output_dir", str(out),
            "--arms", ",".join(ARMS), "--seeds", str(len(SEEDS)), "--seed", str(SEEDS[0]), "--max_steps", "3",
            "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "8", "--learning_rate", "1e-3",
            "--eval_steps", "2", "--checkpointing_steps", "1", "--logging_steps", "1", "--max_eval_samples", "6",
            "--probe_sequences", "6", "--bootstrap_samples", "200",
            "--base_mlm_steps", "0",  # the head-less start (test_base_and_repeated_mentions.py covers a base)
            "--zero_shot_file", str(COREF / "blocks.txt"), str(COREF / "gap.tsv"),
            "--finetune", f"{COREF / 'blocks.txt'}={COREF / 'blocks.txt'},{COREF / 'gap.tsv'}",
            "--finetune_max_steps", "2", "--finetune_batch_size", "2", "--finetune_learning_rate", "1e-3", *extra]


def _run(argv):
    return load_cli("pretrain/run_ablation.py").main(argv)


def _probes(out: Path) -> dict:
    return json.loads((out / "study.json").read_text())["probes"]


@pytest.fixture(scope="module")
def study(tmp_path_factory, tiny_bert_dir, corpus_dir):
    from accelerate.state import AcceleratorState, GradientState

    out = tmp_path_factory.mktemp("study") / "study"
    result = _run(_argv(tiny_bert_dir, corpus_dir, out))
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    return out, result


def test_the_study_writes_table_json_and_plot(study):
    out, result = study
    assert (out / "curves.png").stat().st_size > 10_000
    table = (out / "study.md").read_text()
    for arm in ARMS:
        for seed in SEEDS:
            assert (out / arm / f"seed_{seed}" / "final" / "model.safetensors").is_file()
    probes = result["probes"]
    expected = {"held-out MLM accuracy", "held-out MLM accuracy: repeated mentions",
                "held-out MLM accuracy: other masked words", "held-out MRP accuracy", "zero-shot: blocks accuracy",
                "zero-shot: gap F1",
                "same candidates, masked mentions recovered: MLM head",
                "same candidates, masked mentions recovered: copy head",
                "same candidates, masked mentions recovered: copy head, untrained V",
                "eq. 5 on blocks: blocks accuracy", "eq. 5 on blocks: gap F1"}
    assert set(probes) == expected and result["missing"] == []
    for name, entry in probes.items():
        assert name in table
        copy_trained_only = "MRP" in name or name.endswith(": copy head")  # only where the copy head trained
        arms = ["corefbert"] if copy_trained_only else ["backbone", *ARMS]
        assert sorted(entry["arms"]) == sorted(arms), name
        for arm in arms:
            per_seed = entry["arms"][arm]["per_seed"]
            assert sorted(map(int, per_seed)) == list(SEEDS)
            assert entry["arms"][arm]["mean"] == pytest.approx(np.mean(list(per_seed.values())))
            assert entry["arms"][arm]["std"] == pytest.approx(np.std(list(per_seed.values()), ddof=1))
        if not copy_trained_only:
            ci = entry["ci"]
            assert ci["ci_low"] <= ci["difference"] <= ci["ci_high"] and ci["seeds"] == len(SEEDS)
    assert probes["eq. 5 on blocks: gap F1"]["ci"]["examples"] == 4  # the GAP fixture's 4 rows
    models = (len(ARMS) + 1) * len(SEEDS)  # each arm's runs and the backbone, 4 probes each
    assert result["runs"] == {"trained": len(ARMS) * len(SEEDS), "resumed": 0, "finished_before": 0,
                              "probes_run": 4 * models, "probes_reused": 0}
    # The arms trained the same tokens (same data order and budget) and only the copy-trained arm has MRP mentions.
    tokens = {arm: {r["train_tokens"] for r in runs.values()} for arm, runs in result["pretraining"].items()}
    assert tokens["corefbert"] == tokens["mrm"] == tokens["wwm"]


def test_the_held_out_probe_record_names_the_rows_it_probed(study):
    """The record once said "6 train + 6 held-out rows" of rows that were the held-out split alone."""
    out, _ = study
    records = [json.loads(p.read_text())["settings"] for p in out.glob("*/seed_*/probes/heldout.json")]
    assert len(records) == len(ARMS) * len(SEEDS) + len(SEEDS)  # every run and the backbone of each seed
    for settings in records:
        assert settings["corpus"].startswith(f"{settings['sequences']} held-out rows, sha256 "), settings["corpus"]
        assert "train" not in settings["corpus"]


def test_probe_counts_give_the_task_reported_metrics(study):
    out, _ = study
    for path in out.glob("*/seed_*/probes/*_*.json"):
        for stem, probe in json.loads(path.read_text())["results"].items():
            counts = np.array(probe["counts"]).sum(axis=0)
            assert statistic(probe["kind"], counts) == pytest.approx(probe["reported"]), (path, stem)


def test_a_rerun_skips_everything_and_gives_the_same_study(study, tiny_bert_dir, corpus_dir):
    out, first = study
    again = _run(_argv(tiny_bert_dir, corpus_dir, out))
    assert again["runs"] == {"trained": 0, "resumed": 0, "finished_before": len(ARMS) * len(SEEDS),
                             "probes_run": 0, "probes_reused": 4 * (len(ARMS) + 1) * len(SEEDS)}
    assert again["probes"] == first["probes"]


def test_a_killed_study_resumes_where_it_stopped_and_reproduces_the_study(study, tmp_path, tiny_bert_dir,
                                                                           corpus_dir, monkeypatch):
    """Killed in the second run (corefbert seed 7 finished, mrm seed 7 at step 2 with a checkpoint): the rerun
    skips the first, resumes the second, trains the rest, and every figure equals the uninterrupted study's."""
    from corefbert.pretraining.run import PretrainingJob

    out = tmp_path / "study"
    calls = {"n": 0}
    step = PretrainingJob.training_step

    def crash_in_second_run(self, model, batch):
        calls["n"] += 1
        if calls["n"] == 3 + 2:  # run 1 takes 3 steps; die at step 2 of run 2, after its checkpoint of step 1
            raise RuntimeError("killed")
        return step(self, model, batch)

    monkeypatch.setattr(PretrainingJob, "training_step", crash_in_second_run)
    with pytest.raises(RuntimeError, match="killed"):
        _run(_argv(tiny_bert_dir, corpus_dir, out))
    first_final = out / "corefbert" / f"seed_{SEEDS[0]}" / "all_results.json"
    written = first_final.stat().st_mtime_ns
    assert (out / "mrm" / f"seed_{SEEDS[0]}" / "checkpoints").is_dir()
    assert not (out / "mrm" / f"seed_{SEEDS[0]}" / "final").exists()
    monkeypatch.setattr(PretrainingJob, "training_step", step)
    result = _run(_argv(tiny_bert_dir, corpus_dir, out))
    runs = {k: result["runs"][k] for k in ("trained", "resumed", "finished_before")}
    assert runs == {"trained": len(ARMS) * len(SEEDS) - 2, "resumed": 1, "finished_before": 1}
    assert result["runs"]["probes_reused"] == 4 + 4  # the backbone's and corefbert's of seed 7
    assert first_final.stat().st_mtime_ns == written
    assert result["probes"] == study[1]["probes"]


def test_collect_only_counts_what_is_missing(study, tmp_path, tiny_bert_dir, corpus_dir):
    out = tmp_path / "copy"
    shutil.copytree(study[0], out)
    shutil.rmtree(out / "wwm" / f"seed_{SEEDS[1]}")
    result = _run(_argv(tiny_bert_dir, corpus_dir, out, "--collect_only", "--arms", "corefbert,wwm,official_loss"))
    assert f"wwm/seed_{SEEDS[1]}: no probe results" in result["missing"]
    assert f"official_loss/seed_{SEEDS[0]}: no probe results" in result["missing"]
    assert result["probes"]["zero-shot: blocks accuracy"]["ci"]["seeds"] == 1  # only seed 7 has both arms
    assert "Missing (" in (out / "study.md").read_text()


def test_a_finished_run_with_other_settings_is_refused(study, tmp_path, tiny_bert_dir, corpus_dir, capsys):
    out = tmp_path / "copy"
    shutil.copytree(study[0], out)
    with pytest.raises(SystemExit) as exit_info:
        _run(_argv(tiny_bert_dir, corpus_dir, out, "--max_steps", "4"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "trained with other settings (max_steps: 3 then, 4 now)" in err and "Traceback" not in err


@pytest.mark.parametrize("extra, message", [
    (["--arms", "corefbert,nsp"], "unknown arm(s) nsp"),
    (["--finetune", str(COREF / "blocks.txt")], "is not TRAIN=DEV"),
    (["--zero_shot_file", "nowhere.txt"], "probe file not found"),
    (["--seeds", "0"], "--seeds must be at least 1"),
    (["--preset", "tpu"], "--preset 'tpu' is not one of cpu, gpu"),
])
def test_bad_study_flags_are_one_line(tmp_path, tiny_bert_dir, corpus_dir, capsys, extra, message):
    with pytest.raises(SystemExit) as exit_info:
        _run(_argv(tiny_bert_dir, corpus_dir, tmp_path / "out", *extra))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and message in err[-1], err


def test_gap_f1_of_summed_counts():
    # GAP F1 = 2tp / (2tp + fp + fn) in percent: tp 2, fp 1, fn 1 -> 66.7
    assert statistic(GAP_F1, np.array([2, 1, 1])) == pytest.approx(200 / 3)
    assert statistic(RATIO, np.array([[3, 4], [0, 0]])).tolist() == [75.0, 0.0]  # nothing counted: 0


def test_a_run_marker_lacking_or_changing_a_setting_is_refused(study, tmp_path, tiny_bert_dir, corpus_dir):
    """A finished run is kept only under the settings it records: a marker without one (not written by this
    version) or with another value is refused in one line, exit status 2, and nothing is trained."""
    for edit in (lambda saved: saved.pop("optim"), lambda saved: saved.update(optim="adagrad")):
        out = tmp_path / f"copy_{len(list(tmp_path.iterdir()))}"
        shutil.copytree(study[0], out)
        marker = out / "wwm" / f"seed_{SEEDS[0]}" / "ablation_run.json"
        saved = json.loads(marker.read_text())
        edit(saved)
        marker.write_text(json.dumps(saved))
        with pytest.raises(SystemExit) as exit_info:
            _run(_argv(tiny_bert_dir, corpus_dir, out))
        assert exit_info.value.code == 2


@pytest.mark.parametrize("family", ["distilbert", "modernbert"])
def test_the_study_takes_a_checkpoint_of_another_family(tmp_path, family):
    """--model_name_or_path of a non-BERT family: the tiny study (two arms, one seed, two steps, its
    zero-shot probes and fine-tuning) runs on a DistilBERT or ModernBERT checkpoint and reports every arm."""
    from helpers import save_tiny_family, synthetic_corpus
    from transformers import AutoConfig, AutoTokenizer

    model_dir = save_tiny_family(family, tmp_path / family)
    model_type = AutoConfig.from_pretrained(model_dir).model_type
    corpus_dir = tmp_path / "corpus"
    save_corpus(synthetic_corpus(AutoTokenizer.from_pretrained(model_dir), n_train=8, n_eval=6), corpus_dir)
    out = tmp_path / "study"
    argv = _argv(model_dir, corpus_dir, out, "--arms", "corefbert,mrm", "--seeds", "1", "--max_steps", "2")
    _run(argv)
    study = json.loads((out / "study.json").read_text())
    assert study["missing"] == [] and study["arms"] == ["corefbert", "mrm"]
    runs = study["pretraining"]
    assert {arm: runs[arm]["7"]["train_steps"] for arm in runs} == {"corefbert": 2, "mrm": 2}
    assert runs["corefbert"]["7"]["copy_trained"] and not runs["mrm"]["7"]["copy_trained"]
    assert runs["corefbert"]["7"]["eval_mrp_mentions"] > 0
    for probe in ("zero-shot: blocks accuracy", "eq. 5 on blocks: gap F1", "held-out MRP accuracy"):
        for arm, result in study["probes"][probe]["arms"].items():
            assert np.isfinite(result["per_seed"]["7"]), (probe, arm)
    final = json.loads((out / "corefbert" / "seed_7" / "final" / "config.json").read_text())
    assert final["model_type"] == model_type and final["architectures"][0].startswith("Coref")
