"""The typed configuration of an end-to-end coreference model: what rebuilds it, saved as ``coref_e2e_head.json``.

Filled from the task's arguments (:meth:`CorefE2ETask.model_config`); :func:`build_model` completes the span
ranker's input sizes once the encoder is known (a new config, never a mutated one).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar

from corefbert.errors import CorefBertError
from corefbert.tasks.coref_e2e.encoders import ASL_VARIANTS, ENCODERS, TRANSFORMER_ENCODERS
from corefbert.tasks.coref_e2e.span_ranking import SpanRankingConfig
from corefbert.tasks.scratch import ScratchConfig


@dataclass(frozen=True)
class CorefE2EConfig(ScratchConfig):
    """Encoder kind and sizes of the word representation; ``ranker`` the span ranker's (paper defaults)."""

    describes: ClassVar[str] = "an end-to-end coreference model config"
    advice: ClassVar[str] = "was it written by run_coref_e2e.py?"

    encoder: str
    ranker: SpanRankingConfig
    genres: list[str] = field(default_factory=lambda: [""])  # genre id = index; unknown genres read as 0
    embedding_dim: int = 300
    fixed_embeddings: bool = False  # GloVe vectors stay fixed, also when a saved model is trained further
    char_filters: int = 50
    lstm_size: int = 200
    attention_size: int = 150
    asl_variant: str = "recurrent"  # ASL: eqs. 1-6 (recurrent) or static (encoders.py)
    lexical_dropout: float = 0.5
    max_seq_length: int = 512  # transformer: tokens per window
    window_stride: int = 255  # transformer: content tokens between window starts
    max_sentence_words: int = 250  # longer sentences are read as pieces (resolve's default too)
    max_segment_words: int = 5000  # longer documents are read as segments (resolve's default too)

    @property
    def reads_subwords(self) -> bool:
        """Whether the encoder is a transformer over subword windows (else a recurrent one over word ids)."""
        return self.encoder in TRANSFORMER_ENCODERS

    def check(self) -> None:
        if self.encoder not in ENCODERS:
            raise ValueError(f"encoder {self.encoder!r}")
        if self.asl_variant not in ASL_VARIANTS:
            raise ValueError(f"asl_variant {self.asl_variant!r}")


# The flags of run_coref_e2e.py that a saved model fixes (its coref_e2e_head.json holds them), with the
# config's defaults for a new model. The flags default to None, so that a given value can be told from none:
# with a saved model, another value than the saved one is refused in one line (the model would use its own).
_CONFIG_DEFAULTS = {f.name: f.default for cls in (CorefE2EConfig, SpanRankingConfig) for f in fields(cls)}
MODEL_FLAG_DEFAULTS = {name: _CONFIG_DEFAULTS[name] for name in (
    "embedding_dim", "char_filters", "lstm_size", "attention_size", "asl_variant", "max_span_width",
    "top_span_ratio", "max_antecedents", "ffnn_size", "ffnn_depth", "head_ffnn_depth", "feature_size",
    "dropout", "lexical_dropout", "max_seq_length")}
# Switches (default False) cannot be None: argparse's bare ``--flag`` needs a default. Given (True) against a
# saved False they are refused; left False, a saved model's own value applies.
MODEL_SWITCHES = ("allow_crossing_spans",)


def model_flag(name: str, help: str):
    """The dataclass field of the model flag ``name``: None by default, its help naming the default."""
    return field(default=None, metadata={"help": f"{help} Unset (None): {MODEL_FLAG_DEFAULTS[name]} for a new "
                                                 "model, a saved one's own (--model_name_or_path)."})


def apply_model_settings(args, saved: CorefE2EConfig | None, path: str | None = None) -> None:
    """Fill the model flags of ``args`` (``CorefE2EArguments``) in place: for a new model (``saved`` None) the
    defaults where no value was given; for a saved model its own values, after refusing in one line every flag
    given with another value (``--embeddings_file`` too: the folder holds the vocabulary and vectors)."""
    if saved is None:
        for name, default in MODEL_FLAG_DEFAULTS.items():
            if getattr(args, name) is None:
                setattr(args, name, default)
        return
    settings = {**saved.to_dict(), **saved.ranker.to_dict()}
    values = {name: settings[name] for name in (*MODEL_FLAG_DEFAULTS, *MODEL_SWITCHES, "window_stride")}
    conflicts = [f"--{name} {values[name]} (given {getattr(args, name)})" for name in values
                 if getattr(args, name) not in (None, values[name]) and
                 not (name in MODEL_SWITCHES and getattr(args, name) is False)]
    if args.embeddings_file is not None:
        conflicts.append("its own vocabulary and vectors (given --embeddings_file)")
    if conflicts:
        raise CorefBertError(f"this model was trained with {', '.join(conflicts)}; a saved model keeps the settings "
                             "it was trained with: drop those flags or pass its values", path=path)
    for name in (*MODEL_FLAG_DEFAULTS, *MODEL_SWITCHES):
        setattr(args, name, values[name])
