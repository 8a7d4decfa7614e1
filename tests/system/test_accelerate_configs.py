"""Every shipped accelerate config parses and becomes the launch environment it promises."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import ROOT

CONFIGS = ROOT / "accelerate_configs"
EXPECTED = {
    "cpu.yaml": ("NO", "no"),
    "single_gpu.yaml": ("NO", "bf16"),
    "multi_gpu.yaml": ("MULTI_GPU", "bf16"),
    "multi_node.yaml": ("MULTI_GPU", "bf16"),
    "deepspeed_zero2.yaml": ("DEEPSPEED", "bf16"),
    "deepspeed_zero3.yaml": ("DEEPSPEED", "bf16"),
    "fsdp.yaml": ("FSDP", "bf16"),
}


def _launch_env(path: Path) -> dict[str, str]:
    """The environment ``accelerate launch --config_file path`` gives the training processes."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import launch as launch_utils

    args = launch_command_parser().parse_args(["--config_file", str(path), "pretrain/run_mrp.py"])
    args, defaults, _ = _validate_launch_command(args)
    if args.use_deepspeed:
        # What launch_command does before preparing a DeepSpeed launch.
        fields = list(defaults.deepspeed_config) + (["mixed_precision"] if defaults.mixed_precision else [])
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        return launch_utils.prepare_deepspeed_cmd_env(args)[1]
    if args.multi_gpu or args.use_fsdp:
        return launch_utils.prepare_multi_gpu_env(args)
    return launch_utils.prepare_simple_launcher_cmd_env(args)[1]


def test_the_shipped_set_is_complete():
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_config_loads_and_opens_with_its_launch_line(name):
    from accelerate.commands.config.config_args import load_config_from_file

    path = CONFIGS / name
    config = load_config_from_file(str(path))
    distributed, precision = EXPECTED[name]
    assert config.distributed_type.value == distributed
    assert config.mixed_precision == precision
    first = path.read_text().splitlines()[0]
    assert first.startswith("# accelerate launch --config_file accelerate_configs/" + name)
    env = _launch_env(path)
    assert env["ACCELERATE_MIXED_PRECISION"] == precision
    if name == "cpu.yaml":
        assert env["ACCELERATE_USE_CPU"] == "True"
    if name.startswith("deepspeed"):
        stage = "3" if "zero3" in name else "2"
        assert env["ACCELERATE_USE_DEEPSPEED"] == "true"
        assert env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == stage
        if stage == "3":
            assert env["ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"] == "true"
    if name == "fsdp.yaml":
        assert env["FSDP_VERSION"] == "2"
        assert env["FSDP_AUTO_WRAP_POLICY"] == "TRANSFORMER_BASED_WRAP"
        assert set(env["FSDP_TRANSFORMER_CLS_TO_WRAP"].split(",")) == {"BertLayer", "RobertaLayer"}


def test_fsdp_wrap_classes_exist_in_transformers():
    from transformers.models.bert.modeling_bert import BertLayer
    from transformers.models.roberta.modeling_roberta import RobertaLayer

    assert BertLayer.__name__ == "BertLayer" and RobertaLayer.__name__ == "RobertaLayer"
