"""Tiny models shared by the unit tests (imported as ``from tiny_models import perturbed_tiny_model``: pytest puts
``tests/`` on ``sys.path``)."""
from __future__ import annotations

from pathlib import Path

import torch

from aiayn import Transformer, TransformerConfig


def perturbed_tiny_model(seed: int = 0, *, vocab_size: int = 40, max_len: int = 32, noise: float = 0.05,
                         **overrides) -> Transformer:
    """The ``"tiny"`` preset in eval mode, seeded, with every parameter (LayerNorm gains, biases...) perturbed by
    ``noise * N(0, 1)`` so that a missed copy, a swapped tensor or an unused parameter shows in the outputs."""
    cfg = TransformerConfig.preset("tiny", vocab_size=vocab_size, max_len=max_len, **overrides)
    torch.manual_seed(seed)
    model = Transformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(noise * torch.randn_like(p))
    return model.eval()


def make_tiny_checkpoint(directory: Path, spm_path: Path, direction: str, seed: int = 0, **overrides) -> Path:
    """A randomly initialised tiny model saved as a checkpoint directory (fp16, like the shipped ones)."""
    from aiayn import Transformer, TransformerConfig
    from aiayn.checkpoint import save_checkpoint
    from aiayn.tokenizer import Tokenizer

    tok = Tokenizer.load(spm_path)
    cfg = TransformerConfig.preset("tiny", vocab_size=tok.vocab_size, max_len=64, **overrides)
    torch.manual_seed(seed)
    model = Transformer(cfg)
    src, tgt = direction.split("-")
    return save_checkpoint(directory, model, spm_model=spm_path, dtype="float16",
                           meta={"direction": direction, "src_lang": src, "tgt_lang": tgt, "note": "tiny random test model"})
