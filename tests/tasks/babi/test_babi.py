"""bAbI: the reader of the official format, coreference clusters, the GA reader, and run_babi.py end to end
(tiny models on tests/fixtures/babi, stories written for this project in the official format)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from helpers import FIXTURES, load_cli, shared_data
from references import reference_attention_sum

from corefbert.errors import CorefBertError
from corefbert.tasks.babi.data import (
    exact_match_clusters,
    find_task_file,
    read_babi_file,
    read_coref_file,
    spans_to_clusters,
    tokenize,
)
from corefbert.tasks.babi.ga_reader import GAReader, GAReaderConfig, attention_sum
from corefbert.tasks.babi.task import babi_table, load_babi_reader
from corefbert.text.vocabulary import Vocabulary

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")
BABI = FIXTURES / "babi"
TINY = ["--embedding_dim", "8", "--hidden_size", "8", "--disable_tqdm", "true", "--logging_steps", "1"]


def test_reader_sees_only_the_story_lines_before_each_question():
    examples = read_babi_file(str(BABI / "qa1_single-supporting-fact_train.txt"), 1)
    assert len(examples) == 42 and len({e.story for e in examples}) == 14
    first, second = examples[0], examples[1]
    assert first.line == 3 and first.question == "Where is John?" and first.answer == "garden"
    assert first.sentences == ["John journeyed to the garden.", "Daniel moved to the kitchen."]
    assert len(second.sentences) == 4 and "Where" not in second.document  # questions are not story lines
    lists = read_babi_file(str(BABI / "qa8_lists-sets_train.txt"), 8)
    assert {"nothing", "milk"} <= {e.answer for e in lists}


@pytest.mark.parametrize("text, where", [
    ("1 Mary went home.\nx John left.\n", ":2:"),
    ("1 Mary went home.\n3 John left.\n", ":2:"),
    ("1 Mary went home.\n2 Where is Mary?\thome\n", ":2:"),
    ("1 Mary went home.\n", "no question lines"),
])
def test_reader_names_file_and_line_of_bad_input(tmp_path, text, where):
    path = tmp_path / "qa1_bad_train.txt"
    path.write_text(text)
    with pytest.raises(CorefBertError, match=where):
        read_babi_file(str(path), 1)


STORY = "1 Mary went home.\n2 John left.\n3 Where is Mary?\thome\t1\n4 Mary went out.\n"


@pytest.mark.parametrize("question, message", [
    ("5 Where is John?\tout\t9", r":5: supporting fact 9 is not an earlier line of this story"),  # beyond the story
    ("5 Where is John?\tout\t5", r":5: supporting fact 5 is not an earlier line"),  # the question itself
    ("5 Where is John?\tout\t0", r":5: supporting fact 0 is not an earlier line"),
    ("5 Where is John?\tout\t3", r":5: supporting fact 3 is a question line"),
    ("5 Where is John?\tout\t2 x", r":5: supporting fact id 'x' is not a line number"),
    ("5 \tout\t4", r":5: empty question"),
    ("5    \tout\t4", r":5: empty question"),
])
def test_reader_refuses_supporting_facts_outside_the_story_and_empty_questions(tmp_path, question, message):
    path = tmp_path / "qa1_bad_train.txt"
    path.write_text(STORY + question + "\n")
    with pytest.raises(CorefBertError, match=message):
        read_babi_file(str(path), 1)
    path.write_text(STORY + "5 Where is John?\tout\t2 4\n1 Bill left.\n2 Where is Bill?\tout\t\n")
    assert [e.supporting for e in read_babi_file(str(path), 1)] == [[1], [2, 4], []]  # an earlier story line


def test_supporting_fact_of_an_earlier_story_is_refused(tmp_path):
    path = tmp_path / "qa1_bad_train.txt"  # line 4 exists in the first story, not in the second
    path.write_text(STORY + "1 Bill left.\n2 Where is Bill?\tout\t4\n")
    with pytest.raises(CorefBertError, match=r":6: supporting fact 4 is not an earlier line of this story"):
        read_babi_file(str(path), 1)


def test_exact_match_links_names_and_determined_nouns_within_a_story():
    text = "Mary moved to the kitchen. John went to the kitchen. Mary took the milk."
    tokens = tokenize(text)
    ids = exact_match_clusters(tokens, [text[s:e] for _, s, e in tokens], max_clusters=13)
    by_word = {}
    for (word, _, _), cluster in zip(tokens, ids):
        by_word.setdefault(word, set()).add(cluster)
    assert by_word["mary"] == {1} and by_word["kitchen"] == {2}
    assert by_word["john"] == {0} and by_word["milk"] == {0} and by_word["to"] == {0}  # single mentions, not entities
    assert max(exact_match_clusters(tokens, [text[s:e] for _, s, e in tokens], max_clusters=1)) == 1


def test_clusters_from_a_jsonl_file_of_character_spans(tmp_path):
    example = read_babi_file(str(BABI / "qa1_single-supporting-fact_train.txt"), 1)[1]
    doc = example.document
    daniel = [[doc.index("Daniel"), doc.index("Daniel") + 6], [doc.rindex("Daniel") + 1, doc.rindex("Daniel") + 2]]
    path = tmp_path / "coref.jsonl"
    path.write_text(json.dumps({"task": 1, "line": example.line, "clusters": [daniel]}) + "\n")
    records = read_coref_file(str(path))
    ids = spans_to_clusters(tokenize(doc), records[(1, example.line)], 13, str(path))
    assert [w for (w, _, _), c in zip(tokenize(doc), ids) if c] == ["daniel", "daniel"]  # a partial overlap counts
    path.write_text('{"task": 1}\n')
    with pytest.raises(CorefBertError, match=r"coref.jsonl:1"):
        read_coref_file(str(path))
    # Read by read_jsonl: a line that is not UTF-8 was a UnicodeDecodeError traceback.
    path.write_bytes(b'{"task": 1, "line": 2, "clusters": []}\n{"task": 1, "line": 5, "clusters": "\xff"}\n')
    with pytest.raises(CorefBertError, match=r"coref.jsonl:2: not UTF-8 text"):
        read_coref_file(str(path))
    path.write_text('{"task": 1, "line": 2, "clusters": []}\n{"task": 1, \n')
    with pytest.raises(CorefBertError, match=r"coref.jsonl:2:\d+: not valid JSON .*expected a JSON object"):
        read_coref_file(str(path))


def test_copy_head_puts_each_pronoun_in_its_top_scoring_antecedents_cluster(coref_checkpoint):
    from corefbert.tasks.babi.copy_scoring import CopyHeadLinker, copy_head_clusters
    from corefbert.tasks.coref.resolver import CopyResolver

    resolver = CopyResolver(str(coref_checkpoint))  # the user API gives the same scores as the linker
    linker = CopyHeadLinker(str(coref_checkpoint))
    text = "Mary moved to the kitchen. Daniel went to the office. She went to the garden."
    tokens = tokenize(text)
    ids = copy_head_clusters(linker, text, tokens, max_clusters=13)
    words = [w for w, _, _ in tokens]
    she = words.index("she")
    earlier = [i for i, w in enumerate(words) if w in ("mary", "kitchen", "daniel", "office")]
    scores = resolver.view(text, tokens[she][1:], [tokens[i][1:] for i in earlier]).scores
    assert scores == pytest.approx(linker.scores(text, tokens[she][1:], [tokens[i][1:] for i in earlier]))
    best = earlier[max(range(len(earlier)), key=lambda k: scores[k])]
    assert ids[she] > 0 and ids[she] == ids[best]  # a singleton entity becomes a cluster with its pronoun
    assert sum(1 for c in ids if c) == 2 and ids[words.index("garden")] == 0


def test_attention_sum_equals_literal_loop():
    torch.manual_seed(0)
    attention = torch.softmax(torch.randn(3, 7), -1)
    doc_ids = torch.randint(0, 5, (3, 7))
    torch.testing.assert_close(attention_sum(attention, doc_ids, 5), reference_attention_sum(attention, doc_ids, 5))


@pytest.mark.parametrize("recurrent, num_answers", [("cgru", 0), ("gru", 0), ("cgru", 4), ("gru", 4)])
def test_reader_trains_on_both_answer_kinds(recurrent, num_answers):
    torch.manual_seed(0)
    model = GAReader(GAReaderConfig(vocab_size=12, num_answers=num_answers, embedding_dim=8, hidden_size=8,
                                    recurrent=recurrent))
    doc_ids = torch.tensor([[2, 3, 4, 2, 5, 0], [6, 7, 2, 8, 0, 0]])
    batch = {"doc_ids": doc_ids, "doc_mask": doc_ids != 0, "clusters": torch.tensor([[1, 0, 0, 1, 0, 0],
                                                                                     [0, 0, 0, 0, 0, 0]]),
             "query_ids": torch.tensor([[9, 2], [10, 0]]), "query_mask": torch.tensor([[1, 1], [1, 0]]).bool(),
             "labels": torch.tensor([4, 7] if num_answers == 0 else [1, 3])}
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(15):
        out = model(**batch)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        losses.append(out.loss.item())
    assert losses[-1] < 0.5 * losses[0]
    if num_answers == 0:  # probabilities over the vocabulary, zero on words absent from the story
        assert torch.allclose(out.scores.sum(-1), torch.ones(2)) and out.scores[1, 3].item() == 0.0
    assert out.attention[1, 4:].abs().sum() == 0  # padding gets no attention


def test_table_counts_failed_tasks_by_mean_and_max():
    table = babi_table({2: [0.5, 0.97], 3: [0.99, 0.98]}, "ga_cgru")
    assert table["tasks"]["2"]["mean"] == pytest.approx(0.735) and table["tasks"]["2"]["max"] == 0.97
    assert table["failed_mean"] == 1 and table["failed_max"] == 0
    assert table["average_max"] == pytest.approx((0.97 + 0.99) / 2)


def test_step_decay_schedule_halves_every_120_updates():
    from corefbert.tasks.babi.task import BabiTask
    from corefbert.tasks.base import parse_task_arguments
    from corefbert.training.loop.optimization import build_scheduler

    task_args, args = parse_task_arguments(BabiTask, ["--data_dir", str(BABI), "--task_ids", "1", "--do_train",
                                                      "--output_dir", "unused"])
    assert args.lr_scheduler_type == "step" and (args.lr_decay_steps, args.lr_decay_factor) == (120, 0.5)
    assert args.learning_rate == 0.01 and args.per_device_train_batch_size == 32  # the paper's bAbI settings
    optimizer = torch.optim.AdamW(torch.nn.Linear(2, 2).parameters(), lr=args.learning_rate)
    scheduler = build_scheduler(optimizer, args, total_steps=1000)
    rates = []
    for _ in range(361):
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert rates[0] == rates[119] == pytest.approx(0.01)
    assert rates[120] == rates[239] == pytest.approx(0.005) and rates[360] == pytest.approx(0.00125)


def _main():
    return load_cli("finetune/run_babi.py").main


def test_cli_runs_tasks_and_seeds_and_writes_the_table(tmp_path):
    out = tmp_path / "out"
    results = _main()(["--data_dir", str(BABI), "--task_ids", "1", "8", "--seeds", "2", "--model", "ga_cgru",
                       "--do_train", "--do_eval", "--output_dir", str(out), "--num_train_epochs", "2",
                       "--validation_split_percentage", "25", *TINY])
    assert set(results) >= {"eval_accuracy_qa1", "eval_accuracy_qa8", "eval_accuracy", "failed_tasks_max"}
    for task in (1, 8):
        for seed in (0, 1):
            run = out / f"qa{task}" / f"seed_{seed}"
            saved = json.loads((run / "all_results.json").read_text())
            assert 0.0 <= saved["eval_accuracy"] <= 1.0 and saved["eval_samples"] > 0
            assert (run / "best" / "model.safetensors").is_file() and (run / "last" / "babi_reader.json").is_file()
    config = json.loads((out / "qa8" / "seed_0" / "last" / "babi_reader.json").read_text())
    assert config["extractive"] is False and "nothing" in config["answers"]  # lists are classes
    assert json.loads((out / "qa1" / "seed_0" / "last" / "babi_reader.json").read_text())["extractive"] is True
    table = json.loads((out / "babi_table.json").read_text())
    assert len(table["tasks"]["1"]["accuracies"]) == 2
    assert "| average |" in (out / "babi_table.md").read_text()
    assert table["split"].startswith("our own held-out split: 25% of the stories")  # which questions, in words
    reader, saved = load_babi_reader(str(out / "qa8" / "seed_0" / "best"))
    assert reader.classifier is not None and saved["answers"] == config["answers"]
    # the vocabulary comes back as the one Vocabulary, in the order and with the ids the run trained with
    assert saved["vocabulary"] == Vocabulary.from_dict(config["vocabulary"]) and saved["vocabulary"].get("nothing")
    # the two seeds are different runs
    a = (out / "qa1" / "seed_0" / "last" / "model.safetensors").read_bytes()
    assert a != (out / "qa1" / "seed_1" / "last" / "model.safetensors").read_bytes()


@pytest.mark.parametrize("argv, message", [
    (["--task_ids", "21"], "1-20"),
    (["--model", "lstm"], "ga_cgru"),
    (["--task_ids", "2"], "qa2"),
    (["--coref_source", "file"], "--coref_file"),
    (["--coref_source", "copy"], "--coref_model"),
    (["--task_ids", "1", "8", "--do_predict"], "qa8_*_test.txt"),
])
def test_cli_bad_arguments_exit_2_with_one_line(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        _main()(["--data_dir", str(BABI), "--do_train", "--output_dir", str(tmp_path / "o"), *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


# A test file that the training file never saw: a story word and an answer that are not in training, and an
# answer that is no word of its story. Such a file once switched qa1 to classification and grew the vocabulary.
OFF_STORY_TEST = ("1 Daniel journeyed to the kitchen.\n2 Mary travelled to the kitchen.\n"
                  "3 Where is Daniel? \tkitchen\t1\n4 Zorblat went to the attic.\n"
                  "5 Where is Zorblat? \tattic\t4\n6 Where is Mary? \tmoon\t2\n")


def test_a_test_file_never_changes_the_trained_model(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(BABI / "qa1_single-supporting-fact_train.txt", data)
    (data / "qa1_single-supporting-fact_test.txt").write_text(OFF_STORY_TEST)
    flags = ["--data_dir", str(data), "--task_ids", "1", "--do_train", "--do_eval", "--num_train_epochs", "1", *TINY]
    _main()([*flags, "--output_dir", str(tmp_path / "plain")])
    got = _main()([*flags, "--do_predict", "--output_dir", str(tmp_path / "predict")])
    plain, predict = (tmp_path / name / "qa1" / "seed_0" / "last" for name in ("plain", "predict"))
    saved = json.loads((predict / "babi_reader.json").read_text())
    assert saved == json.loads((plain / "babi_reader.json").read_text())  # mode, vocabulary, classes
    assert saved["extractive"] is True and not {"zorblat", "attic", "moon"} & set(saved["vocabulary"]["words"])
    assert (predict / "model.safetensors").read_bytes() == (plain / "model.safetensors").read_bytes()
    # the two answers the model cannot give are scored wrong and counted, in the run and in the summary
    assert got["predict_unanswerable_qa1"] == 2 and got["predict_accuracy_qa1"] <= 1 / 3
    run = json.loads((tmp_path / "predict" / "qa1" / "seed_0" / "all_results.json").read_text())
    assert run["predict_unanswerable"] == 2 and run["predict_samples"] == 3
    table = (tmp_path / "predict" / "babi_table.md").read_text()
    assert "Accuracy on our own held-out split: 10% of the stories" in table
    assert "Accuracy on the official test files (qaN_*_test.txt" in table
    test_table = json.loads((tmp_path / "predict" / "babi_test_table.json").read_text())
    assert test_table["tasks"]["1"]["accuracies"] == [got["predict_accuracy_qa1"]]


def test_training_answer_outside_its_story_of_an_extractive_task_is_one_line(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    text = (BABI / "qa1_single-supporting-fact_train.txt").read_text().replace("\tgarden\t2", "\tmoon\t2", 1)
    (data / "qa1_single-supporting-fact_train.txt").write_text(text)
    with pytest.raises(SystemExit) as exit_:
        _main()(["--data_dir", str(data), "--task_ids", "1", "--do_train", "--output_dir", str(tmp_path / "o")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "qa1_single-supporting-fact_train.txt:3: answer 'moon' is not a word of its story" in err[0]
    assert "task 1 is extractive" in err[0] and not (tmp_path / "o").exists()  # refused before any run


def test_classification_task_keeps_answers_outside_the_story():
    from corefbert.tasks.babi.task import BabiTask
    from corefbert.tasks.base import parse_task_arguments

    task_args, args = parse_task_arguments(BabiTask, ["--data_dir", str(BABI), "--task_ids", "8", "--do_train",
                                                      "--output_dir", "unused"])
    task = BabiTask(task_args, args)
    assert task.extractive is False and "nothing" in task.answers  # "nothing" is no story word: a class


@pytest.mark.shared_data
def test_extractive_tasks_are_those_whose_every_training_answer_is_a_story_word():
    from corefbert.tasks.babi.task import EXTRACTIVE_TASKS

    data = shared_data("babi", "en-1k")
    in_story = {task for task in range(1, 21) if all(
        "," not in e.answer and e.answer in {t for t, _, _ in tokenize(e.document)}
        for e in read_babi_file(find_task_file(str(data), task, "train"), task))}
    assert in_story == EXTRACTIVE_TASKS


def test_resumed_run_equals_uninterrupted(tmp_path):
    flags = ["--data_dir", str(BABI), "--task_ids", "1", "--model", "ga_cgru", "--do_train", "--do_eval",
             "--num_train_epochs", "2", "--checkpointing_steps", "1", "--save_total_limit", "0",
             "--per_device_train_batch_size", "16", "--do_predict", *TINY]
    full = tmp_path / "full"
    want = _main()([*flags, "--output_dir", str(full)])
    resumed = tmp_path / "resumed"
    run, copy = full / "qa1" / "seed_0", resumed / "qa1" / "seed_0"
    shutil.copytree(run, copy)
    k = 2  # killed right after checkpoint 2 (epoch 1 ends at step 3): later state removed
    for path in (copy / "checkpoints").iterdir():
        if int(path.name.split("_")[1]) > k:
            shutil.rmtree(path)
    for name in ("last", "best", "all_results.json", "eval_predictions.tsv", "predict_predictions.tsv",
                 "finetuning_args.json"):
        target = copy / name
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    lines = [line for line in (copy / "log.jsonl").read_text().splitlines() if json.loads(line).get("step", 99) <= k]
    (copy / "log.jsonl").write_text("".join(line + "\n" for line in lines))
    got = _main()([*flags, "--output_dir", str(resumed), "--resume_from_checkpoint", "latest"])
    from safetensors.torch import load_file

    a, b = load_file(str(run / "last" / "model.safetensors")), load_file(str(copy / "last" / "model.safetensors"))
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=1e-6, atol=1e-7)
    assert got["eval_accuracy"] == want["eval_accuracy"] and got["predict_accuracy_qa1"] == want["predict_accuracy_qa1"]
    assert json.loads((copy / "all_results.json").read_text())["train_loss"] == pytest.approx(
        json.loads((run / "all_results.json").read_text())["train_loss"], rel=1e-6)


def test_find_task_file_and_shared_data_parse():
    assert find_task_file(str(BABI), 1, "test").endswith("qa1_single-supporting-fact_test.txt")
    assert find_task_file(str(BABI), 5, "train") is None


@pytest.mark.shared_data
def test_every_shared_babi_file_parses():
    data = shared_data("babi", "en-1k")
    for task in range(1, 21):
        examples = read_babi_file(find_task_file(str(data), task, "train"), task)
        assert len(examples) == 1000


def _interrupt_after_first_checkpoint(run) -> int:
    """Make ``run`` look killed right after its first checkpoint: later checkpoints and final files removed,
    the log cut back to that step; returns the step."""
    steps = sorted(int(path.name.split("_")[1]) for path in (run / "checkpoints").iterdir())
    for step in steps[1:]:
        shutil.rmtree(run / "checkpoints" / f"step_{step}")
    for name in ("last", "best", "all_results.json", "eval_predictions.tsv", "finetuning_args.json"):
        target = run / name
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    lines = [line for line in (run / "log.jsonl").read_text().splitlines()
             if json.loads(line).get("step", 10**9) <= steps[0]]
    (run / "log.jsonl").write_text("".join(line + "\n" for line in lines))
    return steps[0]


def test_a_rerun_keeps_finished_tasks_resumes_the_interrupted_one_and_refuses_changed_settings(tmp_path, capsys):
    # checkpoints once per epoch by default: no --checkpointing_steps here
    flags = ["--data_dir", str(BABI), "--task_ids", "1", "8", "--model", "ga_cgru", "--do_train", "--do_eval",
             "--num_train_epochs", "2", "--per_device_train_batch_size", "16", "--validation_split_percentage", "25",
             "--save_total_limit", "0", "--output_dir", str(tmp_path / "out"), *TINY]
    want = _main()(flags)
    kept, interrupted = tmp_path / "out" / "qa1" / "seed_0", tmp_path / "out" / "qa8" / "seed_0"
    assert len(list((kept / "checkpoints").iterdir())) == 2  # one per epoch
    step = _interrupt_after_first_checkpoint(interrupted)
    before = {path: path.stat().st_mtime_ns for path in kept.rglob("*") if path.is_file()}
    capsys.readouterr()
    got = _main()([*flags, "--resume_from_checkpoint", "latest"])
    printed = capsys.readouterr().out
    assert "bAbI task 1, seed 42: finished in" in printed and "task 8" not in printed.split("[2/2]")[0]
    assert {path: path.stat().st_mtime_ns for path in kept.rglob("*") if path.is_file()} == before  # not touched
    resumed = [json.loads(line) for line in (interrupted / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in resumed if r.get("split") == "resume"] == [step]  # continued, not restarted
    assert got["eval_accuracy_qa1"] == want["eval_accuracy_qa1"]
    assert got["eval_accuracy_qa8"] == want["eval_accuracy_qa8"]
    table = json.loads((tmp_path / "out" / "babi_table.json").read_text())
    assert set(table["tasks"]) == {"1", "8"} and "missing_tasks" not in table
    # a changed setting is refused for a finished task too (it would otherwise be kept under the new name)
    for changed, name in ((["--learning_rate", "0.02"], "learning_rate"), (["--hidden_size", "4"], "task_args.hidden_size")):
        with pytest.raises(SystemExit) as exit_:
            _main()([*flags, "--resume_from_checkpoint", "latest", *changed])
        assert exit_.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and f"cannot resume: {name} was" in error[0] and "qa1" in error[0]


def test_table_of_an_unfinished_run_names_the_missing_tasks(tmp_path):
    from corefbert.tasks.babi.task import BabiArguments, write_tables

    task_args = BabiArguments(data_dir=str(BABI), task_ids=[1, 8, 16])

    class Args:
        output_dir = str(tmp_path)

    tables = write_tables(task_args, Args, {1: [1.0], 16: [0.5]}, {})
    assert tables[0]["missing_tasks"] == [8] and tables[0]["average_mean"] == 0.75
    text = (tmp_path / "babi_table.md").read_text()
    assert "Not finished yet: tasks 8; the average and the failed count are over the 2 finished tasks only." in text
    assert "missing_tasks" not in write_tables(task_args, Args, {1: [1.0], 8: [1.0], 16: [0.5]}, {})[0]


@pytest.mark.shared_data
def test_exact_match_clusters_of_the_shared_stories_never_exceed_the_papers_13():
    """Appendix B: "the maximum number of coreference clusters across all tasks was C = 13". Our exact match
    reaches exactly that maximum (tasks 2, 3, 5) and never more, so --max_clusters 13 never drops a cluster."""
    data = shared_data("babi", "en-1k")
    most = {}
    for task in range(1, 21):
        for e in read_babi_file(find_task_file(str(data), task, "train"), task):
            tokens = tokenize(e.document)
            clusters = exact_match_clusters(tokens, [e.document[s:x] for _, s, x in tokens], 1000)
            most[task] = max(most.get(task, 0), max(clusters, default=0))
    assert max(most.values()) == 13 and {t for t, n in most.items() if n == 13} == {2, 3, 5}


def test_a_table_trained_without_do_eval_is_evaluated_when_a_rerun_asks(tmp_path, capsys):
    """Trained without --do_eval, then rerun with --do_eval --resume_from_checkpoint latest: every finished run is
    evaluated with the reader it trained (it was kept with no results, and no table was written)."""
    flags = ["--data_dir", str(BABI), "--task_ids", "1", "--seeds", "2", "--model", "ga_cgru",
             "--num_train_epochs", "2", "--validation_split_percentage", "25", *TINY]
    want = _main()([*flags, "--do_train", "--do_eval", "--output_dir", str(tmp_path / "together")])
    out = tmp_path / "apart"
    _main()([*flags, "--do_train", "--output_dir", str(out)])
    assert not (out / "babi_table.md").exists()
    capsys.readouterr()
    got = _main()([*flags, "--do_eval", "--resume_from_checkpoint", "latest", "--output_dir", str(out)])
    printed = capsys.readouterr().out
    assert printed.count("without eval_accuracy, evaluated") == 2 and ", kept" not in printed
    assert got["eval_accuracy_qa1"] == want["eval_accuracy_qa1"] and "| 1 |" in (out / "babi_table.md").read_text()
    for seed in (0, 1):
        run, together = out / "qa1" / f"seed_{seed}", tmp_path / "together" / "qa1" / f"seed_{seed}"
        assert (run / "eval_predictions.tsv").read_text() == (together / "eval_predictions.tsv").read_text()
        saved = json.loads((run / "all_results.json").read_text())
        assert "train_loss" in saved and saved["eval_samples"] > 0  # the training's results kept beside
    # evaluated once: a second rerun keeps them
    _main()([*flags, "--do_eval", "--resume_from_checkpoint", "latest", "--output_dir", str(out)])
    assert capsys.readouterr().out.count(", kept") == 2


def test_evaluation_without_a_trained_reader_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        _main()(["--data_dir", str(BABI), "--task_ids", "1", "--do_eval", "--output_dir", str(tmp_path / "o"), *TINY])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no trained reader here to evaluate" in err[0] and "--do_train" in err[0]


def test_table_header_counts_the_seeds_it_averages(tmp_path):
    from corefbert.tasks.babi.task import BabiArguments, write_tables

    task_args = BabiArguments(data_dir=str(BABI), task_ids=[1, 8], seeds=2)

    class Args:
        output_dir = str(tmp_path)

    table = write_tables(task_args, Args, {1: [1.0, 0.5], 8: [1.0]}, {})[0]
    assert table["short_tasks"] == {"8": 1}
    text = (tmp_path / "babi_table.md").read_text()
    assert "| task (ga_cgru, 1-2 seeds) |" in text and "ga_cgru, 2 seeds" not in text
    assert "Seeds with results (task 8: 1 of 2); those tasks' mean and max are over these seeds only." in text
    write_tables(task_args, Args, {1: [1.0], 8: [1.0]}, {})
    assert "| task (ga_cgru, 1 seed) |" in (tmp_path / "babi_table.md").read_text()
