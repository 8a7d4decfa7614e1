"""End-to-end coreference's two recipes are two task classes, picked from the arguments wherever they are given."""

import pytest

from corefbert.errors import CorefBertError
from corefbert.tasks.base import parse_task_arguments
from corefbert.tasks.coref_e2e.task import CorefE2ETask, RecurrentCorefE2ETask, TransformerCorefE2ETask

BERT_RECIPE = {"learning_rate": 2e-5, "warmup_ratio": 0.1, "lr_scheduler_type": "linear", "num_train_epochs": 20.0}
# Luo & Glass (2018), 4.1: Adam at 0.001 with a slow decay every 100 steps (factor: docs/guides/coref_e2e.md).
RECURRENT_RECIPE = {"learning_rate": 1e-3, "warmup_ratio": 0.0, "lr_scheduler_type": "step",
                    "num_train_epochs": 150.0}
RECURRENT_DECAY = {"lr_decay_steps": 100, "lr_decay_factor": 0.999}


def _recipe(args) -> dict:
    return {key: getattr(args, key) for key in BERT_RECIPE}


def _decay(args) -> dict:
    return {key: getattr(args, key) for key in RECURRENT_DECAY}


def _base(tmp_path) -> list[str]:
    return ["--model_name_or_path", "m", "--output_dir", str(tmp_path / "out")]


def test_encoder_bert_in_a_yaml_config_gives_the_bert_recipe_as_the_command_line_does(tmp_path):
    config = tmp_path / "bert.yaml"
    config.write_text("encoder: bert\n")
    from_yaml, yaml_args = parse_task_arguments(CorefE2ETask, ["--config", str(config), *_base(tmp_path)])
    _, flag_args = parse_task_arguments(CorefE2ETask, [*_base(tmp_path), "--encoder", "bert"])
    _, equals_args = parse_task_arguments(CorefE2ETask, [*_base(tmp_path), "--encoder=bert"])
    assert from_yaml.encoder == "bert"
    assert _recipe(yaml_args) == _recipe(flag_args) == _recipe(equals_args) == BERT_RECIPE


@pytest.mark.parametrize("encoder", ["bilstm", "lsl", "asl"])
def test_a_recurrent_encoder_gets_its_own_recipe_from_either_place(encoder, tmp_path):
    config = tmp_path / "rnn.yaml"
    config.write_text(f"encoder: {encoder}\n")
    _, yaml_args = parse_task_arguments(CorefE2ETask, ["--config", str(config), *_base(tmp_path)])
    _, flag_args = parse_task_arguments(CorefE2ETask, [*_base(tmp_path), "--encoder", encoder])
    assert _recipe(yaml_args) == _recipe(flag_args) == RECURRENT_RECIPE
    assert _decay(yaml_args) == _decay(flag_args) == RECURRENT_DECAY
    assert CorefE2ETask.variant_for(["--encoder", encoder]) is RecurrentCorefE2ETask


def test_the_command_line_overrides_the_yaml_encoder_and_a_flag_the_recipe(tmp_path):
    config = tmp_path / "bert.yaml"
    config.write_text("encoder: bert\nlearning_rate: 3.0e-5\n")
    task_args, args = parse_task_arguments(CorefE2ETask, ["--config", str(config), *_base(tmp_path),
                                                          "--encoder", "asl"])
    assert task_args.encoder == "asl" and args.lr_scheduler_type == "step" and args.learning_rate == 3e-5
    assert CorefE2ETask.variant_for(["--config", str(config)]) is TransformerCorefE2ETask
    assert CorefE2ETask.variant_for([]) is RecurrentCorefE2ETask  # the default encoder, bilstm


def test_an_unknown_encoder_is_one_line_and_a_variant_refuses_the_other_recipes_encoder(tmp_path):
    with pytest.raises(CorefBertError, match="--encoder 'gru' is not one of bilstm, lsl, asl, bert"):
        parse_task_arguments(CorefE2ETask, [*_base(tmp_path), "--encoder", "gru"])
    task_args, args = parse_task_arguments(CorefE2ETask, [*_base(tmp_path), "--encoder", "lsl"])
    with pytest.raises(CorefBertError, match="--encoder lsl is not run by TransformerCorefE2ETask"):
        TransformerCorefE2ETask(task_args, args)


def test_only_the_transformer_recipe_trains_its_scorers_at_their_own_rate():
    assert RecurrentCorefE2ETask.learning_rates is CorefE2ETask.learning_rates  # one rate for every weight
    assert TransformerCorefE2ETask.uses_model_folder and not RecurrentCorefE2ETask.uses_model_folder
