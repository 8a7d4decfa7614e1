#!/usr/bin/env bash
# Prepare, on a CPU machine, what benchmarks/gpu_ablation_curve.sh needs on a bare GPU machine, in .abl_curve/
# (carried; the whole tree that travels must stay under 64 MiB):
#   .abl_curve/base/         the CPU curve's trained base (output_dir/base/final), weights rounded to fp16 for the
#                            trip (45.8 MB instead of 91.6; the device script widens them back to fp32)
#   .abl_curve/corpus.tgz    the curve's prepared corpus (--dataset_dir), gzipped
#   .abl_curve/pronoun/      the zero-shot pronoun files (DPR dev, GAP validation) and GAP development, the eq. 5
#                            fine-tuning probe's training file (GAP development -> validation)
#   .abl_curve/litbank.tgz   the coreference probes' split: train/, validation/ and test/ CoNLL files, as a split
#                            YAML lists them (default docs/guides/coref_e2e_litbank90.yaml)
# and .whl/ (the wheels of datasets for the device image; benchmarks/gpu_check_prepare.sh makes them).
# Usage (repository root, venv active):
#   bash benchmarks/gpu_ablation_curve_prepare.sh CURVE_DIR/base/final PREPARED_CORPUS_DIR \
#       [ZERO_SHOT_FILE ... [--finetune TRAIN_FILE] [--split SPLIT_YAML]]
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BASE_FINAL_DIR PREPARED_CORPUS_DIR [FILE ...] [--finetune FILE] [--split YAML]" >&2
                  exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
base=$1 corpus=$2; shift 2
pronoun=() finetune=../shared/data/gap/gap-development.tsv split=$here/../docs/guides/coref_e2e_litbank90.yaml
while [ $# -gt 0 ]; do
    case $1 in
        --finetune) finetune=$2; shift 2 ;;
        --split) split=$2; shift 2 ;;
        *) pronoun+=("$1"); shift ;;
    esac
done
[ ${#pronoun[@]} -gt 0 ] || pronoun=(../shared/data/dpr/dpr_dev_small.txt ../shared/data/gap/gap-validation.tsv)
rm -rf .abl_curve && mkdir -p .abl_curve/base .abl_curve/pronoun .abl_curve/finetune .abl_curve/litbank
python "$here/cast_weights.py" "$base" .abl_curve/base fp16
tar czf .abl_curve/corpus.tgz -C "$(dirname "$corpus")" --transform "s,^$(basename "$corpus"),corpus," \
    "$(basename "$corpus")"
cp "${pronoun[@]}" .abl_curve/pronoun/
cp "$finetune" .abl_curve/finetune/
# The split's files, by part; its paths are read from the split file's own checkout root when relative.
python - "$split" "$here/.." <<'PY'
import shutil, sys
from pathlib import Path
import yaml
split, root = Path(sys.argv[1]), Path(sys.argv[2])
config = yaml.safe_load(split.read_text(encoding="utf-8"))
for part in ("train_file", "validation_file", "test_file"):
    folder = Path(".abl_curve/litbank") / part.split("_")[0]
    folder.mkdir(parents=True, exist_ok=True)
    for name in config.get(part) or []:
        path = Path(name) if Path(name).is_absolute() or Path(name).exists() else root / name
        shutil.copy(path, folder / path.name)
PY
tar czf .abl_curve/litbank.tgz -C .abl_curve litbank && rm -r .abl_curve/litbank
du -sh .abl_curve .abl_curve/* .whl 2>/dev/null || true
