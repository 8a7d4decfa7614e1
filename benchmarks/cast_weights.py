"""Copy a model folder with its floating-point weights cast to fp16 or fp32 (the ablation's base travels to the
device machine in fp16 and is widened back there): python benchmarks/cast_weights.py SOURCE TARGET fp16|fp32"""

import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

source, target, dtype = Path(sys.argv[1]), Path(sys.argv[2]), {"fp16": torch.float16, "fp32": torch.float32}[sys.argv[3]]
target.mkdir(parents=True, exist_ok=True)
weights = load_file(source / "model.safetensors")
save_file({k: v.to(dtype) if v.is_floating_point() else v for k, v in weights.items()}, target / "model.safetensors",
          metadata={"format": "pt"})
for path in source.iterdir():
    if path.name != "model.safetensors" and path.is_file():
        shutil.copy(path, target / path.name)
