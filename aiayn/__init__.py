"""aiayn: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017), instrumented.

Public API::

    cfg = aiayn.TransformerConfig.preset("base", vocab_size=37000)
    model = aiayn.Transformer(cfg)
    logits, maps = model(src, tgt, return_attention=True)   # maps: aiayn.AttentionMaps
    tr = aiayn.Translator.load("checkpoints/en-de")
    t = tr.translate("The cat sat on the mat.", beam_size=4, length_penalty=0.6)
"""
from __future__ import annotations

from . import interop
from .config import TransformerConfig
from .maps import AttentionMaps
from .model import Transformer
from .translator import Translation, Translator

__all__ = ["TransformerConfig", "Transformer", "AttentionMaps", "Translator", "Translation", "interop"]
__version__ = "0.1.0"
