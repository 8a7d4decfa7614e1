"""The longest sequence a model can embed, from its config: the one usable-positions rule."""

from __future__ import annotations

# Model types whose position ids start after the padding index (RoBERTa's ``padding_idx + 1``), so that
# ``max_position_embeddings`` counts ``pad_token_id + 1`` slots no token can use.
PADDING_OFFSET_MODELS = ("roberta", "xlm-roberta", "camembert", "longformer", "mpnet")


def max_positions(model_config) -> int | None:
    """The longest sequence a model of ``model_config`` (a ``PretrainedConfig`` or its dict) can embed, None
    when the config does not say: BERT's ``max_position_embeddings`` (512), RoBERTa's minus
    ``pad_token_id + 1`` (514 - 2)."""
    config = model_config if isinstance(model_config, dict) else model_config.to_dict()
    positions = config.get("max_position_embeddings")
    if not isinstance(positions, int):
        return None
    if config.get("model_type") in PADDING_OFFSET_MODELS:
        positions -= padding_offset(config)
    return positions


def padding_offset(config: dict) -> int:
    """The position slots before the first usable one (``pad_token_id + 1``; RoBERTa's default pad is 1)."""
    pad = config.get("pad_token_id")
    return (1 if pad is None else int(pad)) + 1


def positions_reason(model_config) -> str:
    """How :func:`max_positions` came to its number, for an error line: ``roberta with
    max_position_embeddings 514, of which pad_token_id + 1 = 2 are the padding offset``."""
    config = model_config if isinstance(model_config, dict) else model_config.to_dict()
    text = f"{config.get('model_type')} with max_position_embeddings {config.get('max_position_embeddings')}"
    if config.get("model_type") in PADDING_OFFSET_MODELS:
        text += f", of which pad_token_id + 1 = {padding_offset(config)} are the padding offset"
    return text
