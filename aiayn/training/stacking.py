"""Progressive stacking (Gong et al. 2019, "Efficient Training of BERT by Progressively Stacking", Section 4):
a deeper model is started from a trained shallower one by copying its trained layers on top of themselves, layer
``j`` of the deep stack taking the weights of layer ``j mod N`` of the shallow one (N = 3 -> 6: layers 1-3 are
copied to 4-6). Here it applies to both stacks of the encoder-decoder, the encoder's ``encoder_layers.*`` and the
decoder's ``decoder_layers.*``; every other tensor (embeddings, the output projection, positional tables) is
kept as it is. Not part of "Attention Is All You Need": a way to reach the paper's N = 6 (Table 3, base) from the
N = 3 model that two CPU cores can train (``aiayn train --init-from DIR --init-stack --set n_layers=6``).

The stacked model is *not* the same function as the shallow one (every layer runs twice over a post-LN residual
stream): it needs training to recover, which is why it is a warm start, never a checkpoint of its own.
"""
from __future__ import annotations

import re

import torch

#: the per-layer tensors of the two stacks: ``encoder_layers.<i>.<rest>`` / ``decoder_layers.<i>.<rest>``
LAYER_KEY = re.compile(r"^(encoder_layers|decoder_layers)\.(\d+)\.(.+)$")


def count_layers(state: dict[str, torch.Tensor]) -> dict[str, int]:
    """The number of layers of each stack in a state dict: ``{"encoder_layers": N_enc, "decoder_layers": N_dec}``
    (0 for a stack without tensors).

    Raises:
        ValueError: a stack's layer indices are not 0..N-1 (a gap: a foreign or damaged weights file).
    """
    seen: dict[str, set[int]] = {"encoder_layers": set(), "decoder_layers": set()}
    for key in state:
        m = LAYER_KEY.match(key)
        if m:
            seen[m.group(1)].add(int(m.group(2)))
    for stack, idx in seen.items():
        if idx and idx != set(range(len(idx))):
            raise ValueError(f"{stack}: layer indices {sorted(idx)} are not 0..{len(idx) - 1}")
    return {stack: len(idx) for stack, idx in seen.items()}


def stack_layers(state: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    """``state`` (a trained model of N layers per stack) grown to ``n_layers`` per stack by progressive stacking:
    layer ``j`` of the result is a copy of layer ``j mod N`` (Gong et al. 2019). Tensors keep their dtypes and
    shapes; the non-layer tensors are shared with ``state`` (not copied).

    Args:
        state: tensor name -> tensor, as read from a ``model.safetensors`` of this project.
        n_layers: layers per stack of the result; a multiple of N (``n_layers == N`` returns ``state``'s tensors).

    Returns:
        a new dict with ``n_layers`` layers in each stack.

    Raises:
        ValueError: ``state`` has no layers, its two stacks differ in depth, or ``n_layers`` is not a positive
            multiple of N.
    """
    depth = count_layers(state)
    n = depth["encoder_layers"]
    if n == 0 or depth["decoder_layers"] != n:
        raise ValueError(f"progressive stacking needs an encoder and a decoder of the same depth, got {depth}")
    if not isinstance(n_layers, int) or isinstance(n_layers, bool) or n_layers < n or n_layers % n:
        raise ValueError(f"progressive stacking grows N = {n} layers to a multiple of {n}, not to {n_layers!r}")
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        m = LAYER_KEY.match(key)
        if not m:
            out[key] = value
            continue
        stack, i, rest = m.group(1), int(m.group(2)), m.group(3)
        for j in range(i, n_layers, n):
            out[f"{stack}.{j}.{rest}"] = value.clone()
    return out
