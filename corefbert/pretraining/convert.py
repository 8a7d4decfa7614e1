"""Convert a released CorefBERT checkpoint into a corefbert pretraining checkpoint (safetensors).

The authors released CorefBERT-base/-large and CorefRoBERTa-base/-large as transformers-2.1.1
``save_pretrained`` folders of their pretraining classes ``BertForCopy`` / ``RobertaForCopy``:
``config.json`` without ``model_type``, ``pytorch_model.bin`` (a pickle), ``vocab.txt`` or ``vocab.json`` +
``merges.txt``, no ``tokenizer_config.json``. The copy vector ``V`` of the paper's eq. 2,
``Pr(x_j | x_i) = softmax_k((V ⊙ h_k)ᵀ h_i)``, is their parameter ``coef``; here it is ``mrp.copy_vector``.
Community mirrors (``nielsr/coref-bert-base`` ...) have the same files, some without ``coef``.

    python -m corefbert.pretraining.convert OFFICIAL_DIR OUTPUT_DIR            # or: corefbert-convert OFFICIAL_DIR OUTPUT_DIR
    python -m corefbert.pretraining.convert OFFICIAL_DIR OUTPUT_DIR --do_lower_case false --model_type bert
    python -m corefbert.pretraining.convert nielsr/coref-bert-base OUTPUT_DIR  # a Hub id: downloaded when online

What it writes: ``model_type`` set, ``coef`` -> ``mrp.copy_vector``, the MLM head and the pooler kept, the
tokenizer with the casing of its vocabulary (a default load of a folder without ``tokenizer_config.json``
would lower-case a cased WordPiece vocabulary), ``model.safetensors``. A part the source lacks (copy vector,
MLM head, pooler) is left out of the output too: every loader sees it missing and says so, as the summary.

This is the one place corefbert reads a pickle (``pytorch_model*.bin``), only when asked to convert, and only
with ``torch.load(..., weights_only=True)``, which unpickles tensors and plain containers but no code; a
folder with ``*.safetensors`` is read from those instead. The checks made before a model is built or a file
written are in :mod:`corefbert.pretraining.convert_checks`.
"""

from __future__ import annotations

import glob
import json
import os
import pickle
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from corefbert.argparser import parse_args
from corefbert.errors import CorefBertError, cli_entry
from corefbert.pretraining.convert_checks import (
    check_config_against_weights,
    check_config_values,
    check_output_location,
    check_weight_values,
    expected_shapes,
    resolve_source,
)
from corefbert.text.durable import remove_folder, replace_file, replace_folder, writing
from corefbert.text.jsonio import read_json
from corefbert.text.positions import max_positions

COPY_VECTOR = "mrp.copy_vector"
OFFICIAL_COPY_VECTOR = "coef"
MLM_HEAD_PREFIXES = {"bert": "cls.", "roberta": "lm_head."}
ENCODER_PARTS = ("embeddings.", "encoder.", "pooler.")
# transformers-2.x config entries that are run-time switches, not architecture: carried over they would
# change what a loaded model returns (torchscript unties the MLM decoder) or mean nothing any more.
RUNTIME_CONFIG_KEYS = ("output_attentions", "output_hidden_states", "output_past", "torchscript", "use_bfloat16",
                       "finetuning_task", "num_labels", "is_decoder", "pruned_heads")
CONVERSION_FILE = "conversion.json"


@dataclass
class ConvertArguments:
    """``python -m corefbert.pretraining.convert OFFICIAL_DIR OUTPUT_DIR [flags]``."""

    official_dir: str = field(metadata={"help": "The released folder: config.json, pytorch_model.bin (or "
                                                "*.safetensors), vocab.txt or vocab.json + merges.txt; or a Hub id "
                                                "(nielsr/coref-bert-base), downloaded when online."})
    output_dir: str = field(metadata={"help": "Where the corefbert checkpoint goes (model.safetensors, "
                                              "config.json, tokenizer files, conversion.json)."})
    model_type: str | None = field(default=None, metadata={"help": "bert | roberta (default: from the config, "
                                                                   "the weight names or the tokenizer files)."})
    do_lower_case: bool | None = field(
        default=None, metadata={"help": "Lower-case input in the WordPiece tokenizer (default: from the "
                                        "vocabulary: capitalised entries mean cased)."})
    overwrite_output_dir: bool = field(default=False, metadata={"help": "Replace a non-empty --output_dir."})
    allow_non_finite: bool = field(default=False, metadata={"help": "Convert weights that hold NaN or infinity "
                                                                    "(refused by default), with a warning."})


@dataclass
class ConversionReport:
    """What :func:`convert_checkpoint` did; ``notes`` are the lines worth a user's attention."""

    model_type: str
    do_lower_case: bool | None
    copy_head_trained: bool
    mlm_head: bool
    pooler: bool
    weights_file: str
    converted: int = 0
    dropped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def read_config(folder: Path) -> dict:
    """``config.json`` as a dict; one line when it is missing or not a JSON object."""
    path = folder / "config.json"
    if not path.is_file():
        raise CorefBertError("no config.json here; pass the released checkpoint folder", path=folder)
    config = read_json(str(path))
    if not isinstance(config, dict):
        raise CorefBertError("config.json is not a JSON object", path=path)
    return config


def read_official_weights(folder: Path) -> tuple[dict, str]:
    """``({name: tensor}, file names)`` of the folder's weights: ``*.safetensors`` when present, else
    ``pytorch_model*.bin`` through ``torch.load(weights_only=True)`` (tensors and containers, never code)."""
    import torch
    from safetensors.torch import load_file

    safetensors = sorted(glob.glob(str(folder / "*.safetensors")))
    pickles = sorted(glob.glob(str(folder / "pytorch_model*.bin")))
    if not safetensors and not pickles:
        raise CorefBertError("no weights here (neither *.safetensors nor pytorch_model.bin); pass the released "
                             "checkpoint folder", path=folder)
    state: dict = {}
    for path in safetensors or pickles:
        try:
            part = load_file(path) if safetensors else torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as err:
            found = re.search(r"unsupported GLOBAL ([\w.]+)", str(err))
            what = f" ({found.group(1)})" if found else ""
            raise CorefBertError(f"the pickle holds more than tensors{what}: loading it would run code, and "
                                 "weights_only loading refuses it; use the authors' original file", path=path) from None
        except Exception as err:  # noqa: BLE001 - any unreadable file is the user's input, said in one line
            reason = " ".join(str(err).split())[:200]
            raise CorefBertError(f"cannot read the weights ({type(err).__name__}: {reason}); the file is damaged or "
                                 "not a state dict (weights_only loading refuses pickled code)", path=path) from None
        if not isinstance(part, dict) or not all(isinstance(v, torch.Tensor) for v in part.values()):
            raise CorefBertError("not a state dict of tensors (a training checkpoint or another object?)", path=path)
        state.update(part)
    return state, ", ".join(os.path.basename(p) for p in safetensors or pickles)


def check_released_family(config: dict, where: Path) -> None:
    """The authors released BERT and RoBERTa checkpoints only: a ``config.json`` naming another model type
    (ModernBERT, DeBERTa, ELECTRA, DistilBERT: checkpoints of transformers today) is one line saying that such a
    folder needs no conversion, before any weight is read."""
    declared = config.get("model_type")
    if isinstance(declared, str) and declared.lower() not in MLM_HEAD_PREFIXES:
        raise CorefBertError(f"model_type {declared!r}: convert reads the authors' CorefBERT/CorefRoBERTa release "
                             f"(bert, roberta) only; checkpoints of that type need no conversion: give the folder to "
                             "pretraining or fine-tuning as --model_name_or_path", path=where)


def detect_model_type(folder: Path, config: dict, names, requested: str | None = None) -> str:
    """``bert`` or ``roberta``: the flag, else ``config["model_type"]``, else ``architectures``, else the weight
    names' prefix, else the tokenizer files; one line when the evidence disagrees with the flag or is absent."""
    evidence = []
    if config.get("model_type"):
        evidence.append(("config.json model_type", str(config["model_type"]).lower()))
    for arch in config.get("architectures") or []:
        kind = "roberta" if "roberta" in arch.lower() else "bert" if "bert" in arch.lower() else None
        if kind:
            evidence.append((f"architectures {arch}", kind))
    prefixes = {name.split(".", 1)[0] for name in names}
    for kind in ("roberta", "bert"):
        if kind in prefixes:
            evidence.append((f"weight names {kind}.*", kind))
    if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
        evidence.append(("vocab.json + merges.txt", "roberta"))
    elif (folder / "vocab.txt").is_file():
        evidence.append(("vocab.txt", "bert"))
    if requested is not None:
        if requested not in MLM_HEAD_PREFIXES:
            raise CorefBertError(f"--model_type {requested!r} is not one of bert, roberta")
        against = [what for what, kind in evidence if kind != requested]
        if against:
            raise CorefBertError(f"--model_type {requested} contradicts {against[0]}; drop --model_type or check "
                                 "the folder", path=folder)
        return requested
    kinds = {kind for _, kind in evidence}
    if len(kinds) == 1 and kinds <= set(MLM_HEAD_PREFIXES):
        return kinds.pop()
    if not kinds:
        raise CorefBertError("cannot tell BERT from RoBERTa (no model_type, no bert./roberta. weights, no tokenizer "
                             "files); pass --model_type bert or roberta", path=folder)
    said = "; ".join(f"{what} says {kind}" for what, kind in evidence)
    raise CorefBertError(f"the folder disagrees with itself about the model type ({said}); pass --model_type",
                         path=folder)


def vocabulary_casing(vocab_path: Path) -> tuple[bool, int, int]:
    """``(cased, capitalised entries, entries)`` of a WordPiece ``vocab.txt``.

    An uncased vocabulary is built from lower-cased text, so none of its entries has a capital letter
    (bert-base-uncased: 0 of 30,522); a cased one has thousands (bert-base-cased: about a third of 28,996).
    Bracketed specials ([CLS], [unused0]) are not words and are not counted.
    """
    try:
        entries = vocab_path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise CorefBertError(f"vocabulary is not readable UTF-8 text ({type(err).__name__})", path=vocab_path) from None
    # The package's one family-specific string: a released BERT vocab.txt is WordPiece by definition, and this
    # reads its entries, not a tokenization (tests/system/test_word_rules.py allows it here only).
    words = [e.removeprefix("##") for e in entries if e and not (e.startswith("[") and e.endswith("]"))]
    capitalised = sum(1 for w in words if w != w.lower())
    return capitalised > 0, capitalised, len(entries)


def build_tokenizer(folder: Path, model_type: str, do_lower_case: bool | None, notes: list[str]):
    """The fast tokenizer of the released vocabulary, cased as the vocabulary is unless ``do_lower_case``."""
    from transformers import BertTokenizerFast, RobertaTokenizerFast

    if model_type == "roberta":
        vocab, merges = folder / "vocab.json", folder / "merges.txt"
        if not (vocab.is_file() and merges.is_file()):
            raise CorefBertError("a RoBERTa checkpoint needs vocab.json and merges.txt beside config.json",
                                 path=folder)
        if do_lower_case is not None:
            raise CorefBertError("--do_lower_case applies to BERT's WordPiece vocabularies; RoBERTa's byte-level "
                                 "BPE keeps case by construction: drop the flag")
        return RobertaTokenizerFast(vocab=str(vocab), merges=str(merges)), None
    vocab = folder / "vocab.txt"
    if not vocab.is_file():
        raise CorefBertError("a BERT checkpoint needs vocab.txt beside config.json", path=folder)
    cased, capitalised, size = vocabulary_casing(vocab)
    lower = (not cased) if do_lower_case is None else do_lower_case
    source = "--do_lower_case" if do_lower_case is not None else "the vocabulary"
    notes.append(f"tokenizer: {'uncased' if lower else 'cased'} (do_lower_case {str(lower).lower()}, from {source}: "
                 f"{capitalised} of {size} entries have capitals)")
    declared = _declared_lower_case(folder)
    if declared is not None and declared != lower:
        notes.append(f"note: tokenizer_config.json says do_lower_case {str(declared).lower()}; the converted "
                     f"tokenizer follows {source} (pass --do_lower_case {str(declared).lower()} to follow the file)")
    return BertTokenizerFast(vocab=str(vocab), do_lower_case=lower), lower


def _declared_lower_case(folder: Path) -> bool | None:
    path = folder / "tokenizer_config.json"
    try:
        value = read_json(str(path)).get("do_lower_case") if path.is_file() else None
    except (CorefBertError, AttributeError):
        return None
    return value if isinstance(value, bool) else None


def official_name(name: str, model_type: str) -> str:
    """The corefbert parameter name of an official/mirror one: ``coef`` -> ``mrp.copy_vector``; a DDP
    ``module.`` prefix dropped; TF-era ``LayerNorm.gamma/beta`` -> ``weight/bias``; a bare encoder
    (``embeddings.*``, saved from ``BertModel``) under ``bert.`` / ``roberta.``."""
    name = name.removeprefix("module.")
    if name == OFFICIAL_COPY_VECTOR:
        return COPY_VECTOR
    name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
    if name.startswith(ENCODER_PARTS):
        name = f"{model_type}.{name}"
    return name


def model_config(config: dict, model_type: str, tokenizer, notes: list[str], where=None):
    """The transformers-5 config of the released ``config.json``: ``model_type`` set, the 2.x run-time switches
    dropped, special-token ids from the tokenizer where the old config has none."""
    from transformers import BertConfig, RobertaConfig

    values = {k: v for k, v in config.items() if k not in RUNTIME_CONFIG_KEYS and k != "model_type"}
    dropped = sorted(set(config) & set(RUNTIME_CONFIG_KEYS))
    if dropped:
        notes.append(f"config: dropped the transformers-2.x run-time entries {', '.join(dropped)}")
    for key, token in (("pad_token_id", "pad_token"), ("bos_token_id", "bos_token"), ("eos_token_id", "eos_token")):
        if key not in values and getattr(tokenizer, token, None) is not None and (model_type == "roberta"
                                                                                 or key == "pad_token_id"):
            values[key] = tokenizer.convert_tokens_to_ids(getattr(tokenizer, token))
    result = (BertConfig if model_type == "bert" else RobertaConfig).from_dict(values)
    if not isinstance(result.vocab_size, int) or len(tokenizer) > result.vocab_size:
        raise CorefBertError(f"the tokenizer has {len(tokenizer)} entries but config.json's vocab_size is "
                             f"{result.vocab_size}: the vocabulary file belongs to another model", path=where)
    return result


def _tied_sources(model_type: str) -> dict[str, str]:
    """``{tied copy: parameter it is tied to}`` of the MLM head's decoder: never loaded on their own."""
    from corefbert.pretraining.families import PRETRAINING_CLASSES

    return PRETRAINING_CLASSES[model_type]._tied_weights_keys


def renamed_state(state: dict, expected: dict, model_type: str, report: ConversionReport, where=None) -> dict:
    """The official tensors under corefbert names, shapes checked against the model; unknown names (a
    next-sentence head, buffers) are dropped into ``report.dropped``; tied decoder copies folded into
    what they are tied to."""
    renamed = {}
    for name, tensor in state.items():
        new = official_name(name, model_type)
        if new not in expected:
            report.dropped.append(name)
            continue
        if tuple(tensor.shape) != tuple(expected[new].shape):
            raise CorefBertError(f"weight {name} has shape {tuple(tensor.shape)} but config.json gives "
                                 f"{tuple(expected[new].shape)}: config and weights are of different models", path=where)
        renamed[new] = tensor
    for copy, source in _tied_sources(model_type).items():
        value = renamed.pop(copy, None)
        if value is None:
            continue
        if source not in renamed:
            renamed[source] = value
        elif not value.float().equal(renamed[source].float()):
            report.notes.append(f"note: {copy} differs from {source}; the tied model keeps {source}")
    return renamed


def check_parts(renamed: dict, expected: dict, model_type: str, report: ConversionReport, where=None) -> None:
    """Refuse a checkpoint missing encoder weights; note a missing copy vector, MLM head or pooler."""
    tied = set(_tied_sources(model_type))
    missing = [k for k in expected if k not in renamed and k not in tied]
    encoder = [k for k in missing if k.startswith(f"{model_type}.") and ".pooler." not in k]
    if encoder:
        raise CorefBertError(f"the weights lack {len(encoder)} encoder tensor(s) (first: {encoder[0]}); this is not a "
                             f"complete {model_type} checkpoint", path=where)
    head = MLM_HEAD_PREFIXES[model_type]
    report.copy_head_trained = COPY_VECTOR in renamed
    report.mlm_head = any(k.startswith(head) for k in renamed)
    report.pooler = any(".pooler." in k for k in renamed)
    if not report.copy_head_trained:
        report.notes.append(f"note: no '{OFFICIAL_COPY_VECTOR}' in the weights: the copy head is UNTRAINED. "
                            f"{COPY_VECTOR} is left out, so load_pretraining_model starts V at 1/hidden and the "
                            "zero-shot copy resolver refuses the folder unless told allow_untrained "
                            "(--allow_untrained_copy_head); fine-tuning is unaffected")
    if not report.mlm_head:
        report.notes.append(f"note: no MLM head ({head}*) in the weights: loaders initialise a fresh one")
    elif [k for k in missing if k.startswith(head)]:
        report.notes.append(f"note: the MLM head lacks {', '.join(k for k in missing if k.startswith(head))}")
    if not report.pooler:
        report.notes.append("note: no pooler in the weights: sequence classification starts from a random one")


def convert_checkpoint(official_dir, output_dir, model_type: str | None = None, do_lower_case: bool | None = None,
                       overwrite_output_dir: bool = False, allow_non_finite: bool = False) -> ConversionReport:
    """Convert the released folder (or Hub id) ``official_dir`` into a corefbert pretraining checkpoint in
    ``output_dir``, written beside it and renamed into place (an interrupted run leaves nothing half-done).
    Every check of :mod:`corefbert.pretraining.convert_checks` runs before a model is built."""
    from corefbert.pretraining.families import PRETRAINING_CLASSES
    from corefbert.training.outputs.cards import conversion_card

    source, target = resolve_source(str(official_dir)), Path(output_dir)
    if not source.is_dir():
        raise CorefBertError("no such folder; pass the released checkpoint folder (config.json, pytorch_model.bin, "
                             "vocabulary) or its Hub id", path=source)
    target = check_output_location(source, target)  # the real path: never the source, inside it or around it
    if target.is_file() or (target.is_dir() and any(target.iterdir()) and not overwrite_output_dir):
        raise CorefBertError("output folder exists and is not empty; pass --overwrite_output_dir or another folder",
                             path=output_dir)
    config = read_config(source)
    check_released_family(config, source / "config.json")
    check_config_values(config, source / "config.json")
    state, files = read_official_weights(source)
    kind = detect_model_type(source, config, state.keys(), model_type)
    check_config_against_weights(config, {official_name(name, kind): tuple(t.shape) for name, t in state.items()},
                                 kind, where=source)
    report = ConversionReport(kind, None, False, False, False, files)
    tokenizer, report.do_lower_case = build_tokenizer(source, kind, do_lower_case, report.notes)
    hf_config = model_config(config, kind, tokenizer, report.notes, where=source)
    expected = expected_shapes(PRETRAINING_CLASSES[kind], hf_config)  # meta tensors: no memory yet
    renamed = renamed_state(state, expected, kind, report, where=source)
    check_parts(renamed, expected, kind, report, where=source)
    check_weight_values(renamed, allow_non_finite, report.notes, where=source)
    model = PRETRAINING_CLASSES[kind](hf_config)  # only now, its every shape checked against the weights
    model.load_state_dict(renamed, strict=False)
    report.converted = len(renamed)
    # Only what the source had (plus the tied decoder when the head is there): a missing part stays missing.
    keep = set(renamed) | (set(_tied_sources(kind)) if report.mlm_head else set())
    tokenizer.model_max_length = max_positions(model.config)
    tmp = target.with_name(target.name + ".converting")
    remove_folder(tmp)
    with writing(tmp, "the converted checkpoint", "the released folder is untouched", then="run the conversion again"):
        model.save_pretrained(tmp, state_dict={k: v for k, v in model.state_dict().items() if k in keep})
        tokenizer.save_pretrained(tmp)
        record = {"source": str(official_dir) if source != Path(official_dir) else source.resolve().name, "weights_file": files, "model_type": kind,
                  "do_lower_case": report.do_lower_case, "copy_head_trained": report.copy_head_trained,
                  "mlm_head": report.mlm_head, "pooler": report.pooler, "converted_tensors": report.converted,
                  "dropped_tensors": report.dropped, "notes": report.notes}
        replace_file(tmp / CONVERSION_FILE, json.dumps(record, indent=2) + "\n")
        conversion_card(record, target.name).save(tmp / "README.md")  # a card to publish with: `hf upload user/name OUTPUT_DIR`
        replace_folder(tmp, target)
    return report


def summary(report: ConversionReport, output_dir) -> str:
    """The lines the CLI prints: what was converted, what was dropped and why, what is missing."""
    dropped = ""
    if report.dropped:
        dropped = f"; dropped {len(report.dropped)} tensor(s) the pretraining model has no place for " \
                  f"({', '.join(report.dropped[:3])}{', ...' if len(report.dropped) > 3 else ''})"
    lines = [f"converted {report.converted} tensor(s) from {report.weights_file} ({report.model_type}){dropped}",
             f"copy head: {'coef -> ' + COPY_VECTOR if report.copy_head_trained else 'untrained (no coef)'}; "
             f"MLM head: {'kept' if report.mlm_head else 'absent'}; pooler: {'kept (frozen in pretraining)' if report.pooler else 'absent'}",
             *report.notes, f"saved to {output_dir}"]
    return "\n".join(lines)


#: Both forms: the two folders first (the README's), or named; argparse's own line showed only the flags.
USAGE = ("%(prog)s [-h] OFFICIAL_DIR OUTPUT_DIR [options]\n"
         "       %(prog)s [-h] --official_dir OFFICIAL_DIR --output_dir OUTPUT_DIR [options]\n\n"
         "  OFFICIAL_DIR   the released folder (or a Hub id), as --official_dir below\n"
         "  OUTPUT_DIR     where the corefbert checkpoint goes, as --output_dir below\n"
         "  options        --model_type, --do_lower_case, --overwrite_output_dir, --allow_non_finite, --config")


@cli_entry
def main(argv: list[str] | None = None) -> ConversionReport:
    """``python -m corefbert.pretraining.convert OFFICIAL_DIR OUTPUT_DIR``: bad input is one line and exit status 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    (args,) = parse_args([ConvertArguments], argv, prog="python -m corefbert.pretraining.convert", usage=USAGE,
                         positionals=("official_dir", "output_dir"))
    print(f"reading {args.official_dir} (pickled weights are read with torch.load(weights_only=True))", flush=True)
    report = convert_checkpoint(args.official_dir, args.output_dir, args.model_type, args.do_lower_case,
                                args.overwrite_output_dir, args.allow_non_finite)
    print(summary(report, args.output_dir))
    return report


def console_script() -> None:
    """The ``corefbert-convert`` command: returns nothing (``main``'s report would become exit status 1)."""
    main()


if __name__ == "__main__":
    main()
