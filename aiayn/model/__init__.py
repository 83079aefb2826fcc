"""The Transformer itself (Sections 3.1-3.5): configuration, attention, positions, layers and the model.

* :mod:`~aiayn.model.config`: :class:`TransformerConfig` and the presets of Table 3 (a plain dataclass, no torch).
* :mod:`~aiayn.model.attention`: scaled dot-product attention (Eq. 1) and multi-head attention (Section 3.2.2),
  with a fused SDPA fast path and an exact capture path that returns every weight and pre-softmax score.
* :mod:`~aiayn.model.positional`: sinusoidal (Section 3.5) and learned position encodings.
* :mod:`~aiayn.model.layers`: the position-wise feed-forward network (Section 3.3) and the encoder and
  decoder layers (Section 3.1).
* :mod:`~aiayn.model.transformer`: embeddings scaled by sqrt(d_model), weight tying (Section 3.4), the
  encoder and decoder stacks and :class:`Transformer`.
* :mod:`~aiayn.model.maps`: :class:`AttentionMaps`, every map of a forward pass as a value.

The names below are imported lazily (PEP 562), so ``aiayn.model.config`` stays importable without torch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

#: public name -> submodule that defines it
_LAZY: dict[str, str] = {
    "TransformerConfig": ".config",
    "MultiHeadAttention": ".attention",
    "scaled_dot_product_attention": ".attention",
    "PositionwiseFeedForward": ".layers",
    "EncoderLayer": ".layers",
    "DecoderLayer": ".layers",
    "Transformer": ".transformer",
    "EncoderOutput": ".transformer",
    "DecoderOutput": ".transformer",
    "DecoderCache": ".transformer",
    "causal_mask": ".transformer",
    "AttentionMaps": ".maps",
    "KINDS": ".config",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # for type checkers and IDEs; never executed
    from .attention import MultiHeadAttention, scaled_dot_product_attention
    from .config import KINDS, TransformerConfig
    from .layers import DecoderLayer, EncoderLayer, PositionwiseFeedForward
    from .maps import AttentionMaps
    from .transformer import DecoderCache, DecoderOutput, EncoderOutput, Transformer, causal_mask


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
