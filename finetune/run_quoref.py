"""Fine-tune and evaluate a BERT/RoBERTa/CorefBERT encoder on QUOREF (official SQuAD-style JSON).

The paper's model: the encoder, one extra Transformer layer ("reasoning layer"), start/end and
answer-count heads; ``--no_reasoning_layer --no_count_head`` is plain BERT QA. Paper defaults: LR 2e-5,
6 epochs, batch 32, windows of 512 tokens with a stride of 128.

One CPU (or one GPU)::

    python finetune/run_quoref.py --model_name_or_path CKPT --train_file quoref-train-v0.1.json \
        --validation_file quoref-dev-v0.1.json --do_train --do_eval --output_dir out/quoref

N GPUs: ``accelerate launch --num_processes N finetune/run_quoref.py ...`` (the same flags).
Writes ``all_results.json`` (EM/F1 by the official DROP-style metric), ``eval_predictions.json``
``{question_id: [answer strings]}`` and, with ``--do_predict --test_file``, ``predict_predictions.json``.
"""

from __future__ import annotations

import logging

from corefbert.arguments import parse_args
from corefbert.errors import cli_entry
from corefbert.finetuning import FinetuningArguments, report_results, run_finetuning
from corefbert.tasks.quoref import QUOREF_DEFAULTS, QuorefArguments, QuorefTask


@cli_entry
def main(argv: list[str] | None = None) -> dict[str, float]:
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.INFO)
    data_args, args = parse_args([QuorefArguments, FinetuningArguments], argv, prog="run_quoref.py",
                                 defaults=QUOREF_DEFAULTS)
    return report_results(run_finetuning(QuorefTask(data_args, args), args))


if __name__ == "__main__":
    main()
