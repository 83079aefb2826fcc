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

import importlib
from typing import TYPE_CHECKING, Any

#: public name -> (submodule, attribute or None for the submodule itself)
_LAZY: dict[str, tuple[str, str | None]] = {
    "TransformerConfig": (".model.config", "TransformerConfig"),
    "Transformer": (".model.transformer", "Transformer"),
    "AttentionMaps": (".model.maps", "AttentionMaps"),
    "Translator": (".translator", "Translator"),
    "Translation": (".translator", "Translation"),
    "interop": (".interop", None),
}

__all__ = ["TransformerConfig", "Transformer", "AttentionMaps", "Translator", "Translation", "interop"]
__version__ = "0.1.0"

if TYPE_CHECKING:  # for type checkers and IDEs; never executed
    from . import interop
    from .model.config import TransformerConfig
    from .model.maps import AttentionMaps
    from .model.transformer import Transformer
    from .translator import Translation, Translator


def __getattr__(name: str) -> Any:
    """Import a public name on first access and keep it in the module namespace.

    Raises:
        AttributeError: ``name`` is not a public name (submodules such as ``aiayn.data`` are then imported
            by the regular import machinery).
    """
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    module = importlib.import_module(module_name, __name__)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
