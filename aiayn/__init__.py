"""aiayn: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017), instrumented.

Public API::

    cfg = aiayn.TransformerConfig.preset("base", vocab_size=37000)
    model = aiayn.Transformer(cfg)
    logits, maps = model(src, tgt, return_attention=True)   # maps: aiayn.AttentionMaps
    tr = aiayn.Translator.load("checkpoints/en-de")
    t = tr.translate("The cat sat on the mat.", beam_size=4, length_penalty=0.6)

The public names are imported lazily, on first access (PEP 562 module ``__getattr__``): ``import aiayn``
(and ``from aiayn import app``) does not import torch, so the app's first page renders before torch is
loaded. ``from aiayn import Transformer`` and ``aiayn.Transformer`` work as usual.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_exports

#: public name -> submodule that defines it (``interop`` is the submodule itself)
_LAZY: dict[str, str] = {
    "TransformerConfig": ".model.config",
    "Transformer": ".model.transformer",
    "AttentionMaps": ".model.maps",
    "Translator": ".translator",
    "Translation": ".translation",
    "interop": ".interop",
}

__all__ = ["TransformerConfig", "Transformer", "AttentionMaps", "Translator", "Translation", "interop"]
__version__ = "0.1.0"

if TYPE_CHECKING:  # for type checkers and IDEs; never executed
    from . import interop
    from .model.config import TransformerConfig
    from .model.maps import AttentionMaps
    from .model.transformer import Transformer
    from .translation import Translation
    from .translator import Translator

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
