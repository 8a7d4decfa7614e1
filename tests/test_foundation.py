from dataclasses import dataclass, field

import pytest

from corefbert.argparser import parse_args, peek_argument
from corefbert.errors import CorefBertError


@dataclass
class _Args:
    model_name_or_path: str = field(metadata={"help": "checkpoint"})
    learning_rate: float = 5e-5
    do_train: bool = False
    train_file: list[str] = field(default_factory=list)


def test_config_values_are_defaults_and_flags_override(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model_name_or_path: m\nlearning_rate: 0.5\ntrain_file: [a.txt, b.txt]\n")
    (args,) = parse_args([_Args], ["--config", str(cfg), "--learning_rate", "0.1"])
    assert args == _Args("m", 0.1, False, ["a.txt", "b.txt"])
    (args,) = parse_args([_Args], ["--config", str(cfg), "--do_train"])
    assert args.learning_rate == 0.5 and args.do_train


def test_unknown_config_key_is_one_line(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model_name_or_path: m\nlearnin_rate: 0.5\n")
    with pytest.raises(CorefBertError, match=r"c\.yaml: unknown argument\(s\) learnin_rate"):
        parse_args([_Args], ["--config", str(cfg)])


def test_unreadable_config_names_position(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model_name_or_path: [unclosed\n")
    with pytest.raises(CorefBertError, match=r"c\.yaml:\d+:\d+: not valid YAML"):
        parse_args([_Args], ["--config", str(cfg)])


def test_tokenizer_fixtures(bert_tokenizer, roberta_tokenizer):
    for tok in (bert_tokenizer, roberta_tokenizer):
        assert tok.is_fast and tok.mask_token_id is not None
        assert len(tok) > 300, "the trained vocabulary was not loaded"
        enc = tok("Marta kept a lighthouse", return_offsets_mapping=True)
        ids = enc["input_ids"]
        assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
        assert tok.unk_token_id not in ids and len(ids) >= 6
        # A round trip through the vocabulary gives the text back (lower-cased for the uncased WordPiece).
        assert tok.decode(ids, skip_special_tokens=True).strip().lower() == "marta kept a lighthouse"


def test_cli_defaults_sit_between_dataclass_and_config(tmp_path):
    (args,) = parse_args([_Args], ["--model_name_or_path", "m"], defaults={"learning_rate": 2e-5})
    assert args.learning_rate == 2e-5
    cfg = tmp_path / "c.yaml"
    cfg.write_text("learning_rate: 0.25\n")
    (args,) = parse_args([_Args], ["--config", str(cfg), "--model_name_or_path", "m"], defaults={"learning_rate": 2e-5})
    assert args.learning_rate == 0.25


def test_public_api_resolves():
    import corefbert

    names = [name for name in corefbert.__all__ if name != "__version__"]
    assert {"DataCollatorForMentionReferencePrediction", "CorefBertForPreTraining", "run_finetuning"} <= set(names)
    for name in names:
        assert getattr(corefbert, name) is not None
    with pytest.raises(AttributeError):
        corefbert.not_a_name  # noqa: B018


# A config's values are checked against their fields before any code uses them; its load is bounded.


@pytest.mark.parametrize(("text", "line"), [("model_name_or_path: m\ntrain_file: &a [*a]\n", 2),
                                           ("model_name_or_path: m\nl0: &l0 [a, a]\ntrain_file: [*l0, *l0]\n", 3),
                                           ("&a {train_file: *a, model_name_or_path: m}\n", 1)])
def test_anchors_and_aliases_are_refused_in_one_line_naming_the_line(tmp_path, text, line):
    """An alias can make a value that holds itself (``&a [*a]``: every walk over it recursed until a RecursionError)
    or a small file of aliases of aliases 10^9 strings; no config needs one."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(CorefBertError) as error:
        parse_args([_Args], ["--config", str(cfg)])
    assert str(error.value) == (f"{cfg}:{line}: anchors and aliases (&name, *name) are not read in a config; write "
                                "the values out")


def test_a_config_larger_than_any_config_is_one_line(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model_name_or_path: m\n" + "# padding\n" * 200_000)
    with pytest.raises(CorefBertError, match=r"c\.yaml: 2,000,022 bytes: larger than a config"):
        parse_args([_Args], ["--config", str(cfg)])


def test_nested_lists_and_mappings_are_refused_where_a_list_of_strings_belongs(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model_name_or_path: m\ntrain_file: [[a.txt, b.txt], [c.txt]]\n")
    with pytest.raises(CorefBertError) as error:
        parse_args([_Args], ["--config", str(cfg)])
    assert str(error.value) == (f"{cfg}:2: --train_file must be a string or a list of strings (got [['a.txt', "
                                "'b.txt'], ['c.txt']]); fix the value in the config")
    cfg.write_text("model_name_or_path: {a: 1}\n")
    with pytest.raises(CorefBertError, match=r"c\.yaml:1: --model_name_or_path must be a string \(got \{'a': 1\}\)"):
        parse_args([_Args], ["--config", str(cfg)])
    cfg.write_text("model_name_or_path: m\nlearning_rate: [0.1]\n")
    with pytest.raises(CorefBertError, match=r"c\.yaml:2: --learning_rate must be a number \(got \[0\.1\]\)"):
        parse_args([_Args], ["--config", str(cfg)])
    cfg.write_text("model_name_or_path: m\ndo_train: [true]\n")
    with pytest.raises(CorefBertError, match=r"c\.yaml:2: --do_train must be true or false \(got \[True\]\)"):
        parse_args([_Args], ["--config", str(cfg)])


def test_deeply_nested_yaml_is_one_line(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("train_file: " + "[" * 1000 + "]" * 1000 + "\n")
    with pytest.raises(CorefBertError, match=r"c\.yaml: values nested too deeply"):
        parse_args([_Args], ["--config", str(cfg)])


def test_yaml_spellings_a_flag_would_take_are_read_as_meant(tmp_path):
    """One value for a list flag is a list of one (it reached ``glob`` as a string before), ``4.0`` an integer
    field's 4, ``500`` a string field's "500"; a bare ``no`` (false to YAML) for a string says to quote it."""

    @dataclass
    class Typed:
        train_file: list[str] = field(default_factory=list)
        max_steps: int = -1
        checkpointing_steps: str | None = None
        report_to: str = "tensorboard"

    cfg = tmp_path / "c.yaml"
    cfg.write_text("train_file: a.txt\nmax_steps: 4.0\ncheckpointing_steps: 500\n")
    (args,) = parse_args([Typed], ["--config", str(cfg)])
    assert (args.train_file, args.max_steps, args.checkpointing_steps) == (["a.txt"], 4, "500")
    cfg.write_text("report_to: no\n")
    with pytest.raises(CorefBertError, match=r"c\.yaml:1: --report_to must be a string \(got False\) \(YAML reads a "
                                             r"bare yes, no, on or off as true/false: quote it\)"):
        parse_args([Typed], ["--config", str(cfg)])


def test_a_setting_read_ahead_of_the_parse_is_checked_too(tmp_path):
    """``peek_argument`` (the recipe a ``--model`` or ``--encoder`` picks) saw ``model: [da]`` as a list, and a
    dictionary lookup raised ``TypeError: unhashable type``."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: [da]\n")
    with pytest.raises(CorefBertError, match=r"c\.yaml:1: --model must be a string \(got \['da'\]\); fix the value"):
        peek_argument(["--config", str(cfg)], "model")
    cfg.write_text("model: 7\n")
    assert peek_argument(["--config", str(cfg)], "model") == "7"


def test_a_failed_allocation_is_one_line_naming_the_flag_and_other_errors_pass():
    import torch

    from corefbert.errors import out_of_memory_as_error

    def failing(make):
        with pytest.raises(CorefBertError) as caught, out_of_memory_as_error("in step 3", "lower --max_words"):
            make()
        return str(caught.value)

    # torch's CPU allocator, for real (4 EiB), Python's MemoryError, and the GPU allocator's error type.
    assert failing(lambda: torch.empty(2 ** 62, dtype=torch.uint8)) == \
        "out of memory in step 3 (an allocation of 4294967296.0 GiB failed); lower --max_words"

    def python_memory_error():
        raise MemoryError

    def cuda_out_of_memory():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                                     "of 79.11 GiB of which 1.2 GiB is free.")

    assert failing(python_memory_error) == "out of memory in step 3; lower --max_words"
    assert failing(cuda_out_of_memory) == "out of memory in step 3 (an allocation of 2.00 GiB failed); lower --max_words"
    for other in (ValueError("bad value"), RuntimeError("shape '[2, 3]' is invalid for input of size 5")):
        with pytest.raises(type(other)), out_of_memory_as_error("in step 3", "lower --max_words"):
            raise other


def test_the_ways_a_loader_worker_dies_read_as_one_line_and_other_errors_pass():
    from corefbert.errors import dataloader_worker_died

    killed = RuntimeError("DataLoader worker (pid 4242) is killed by signal: Killed. ")
    line = dataloader_worker_died(killed)
    assert line.startswith("a data loader worker process (pid 4242) was killed by signal Killed (the system's "
                           "out-of-memory killer, most often); rerun with --num_workers 0")
    gone = RuntimeError("DataLoader worker (pid(s) 17, 18) exited unexpectedly")
    gone.__cause__ = killed
    assert dataloader_worker_died(gone).startswith("a data loader worker process (pid 4242) was killed")
    bus = RuntimeError("DataLoader worker (pid 7) is killed by signal: Bus error. It is possible that dataloader's "
                       "workers are out of shared memory. Please try to raise your shared memory limit.")
    assert "(out of shared memory: raise /dev/shm)" in dataloader_worker_died(bus)
    assert "exited with code 3" in dataloader_worker_died(RuntimeError(
        "DataLoader worker (pid 9) exited unexpectedly with exit code 3. Details are lost due to multiprocessing."))
    assert dataloader_worker_died(RuntimeError("shape mismatch")) is None
    assert dataloader_worker_died(ValueError("DataLoader worker (pid 1) is killed by signal: Killed.")) is None
