"""Attention rollout: how attention flows across layers (Abnar and Zuidema 2020, Section 3).

The job of this module is :func:`rollout`, which turns the per-layer, per-head maps of an
:class:`~aiayn.model.maps.AttentionMaps` into one map per layer saying how much each position at that
layer's output draws, through every layer below it, from each input position. Abnar and Zuidema
("Quantifying Attention Flow in Transformers", ACL 2020, Section 3) average the heads, account for the
residual connection (Section 3.1 of Vaswani et al. 2017: ``x + Sublayer(x)``) by adding the identity,
``A' = 0.5 W_att + 0.5 I``, renormalise the rows and multiply the layers' matrices. Here the weight of the
identity is the keyword ``residual``: ``A' = residual * I + (1 - residual) * mean_h A``, so the paper's
choice is ``residual=0.5``. The encoder-decoder ("cross") rollout, which the paper does not cover, carries
the decoder's self-attention rollout through each decoder layer's cross-attention onto the source (see
:func:`rollout`). Rollout assumes that attention mixes information linearly and that every head counts
equally; it ignores the values, the feed-forward layers and the LayerNorms. Their max-flow variant
("attention flow") is not implemented: it needs a max-flow problem per (query, key) pair. Torch is
imported inside the functions, so that ``import aiayn.analysis`` stays light.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # annotations only: torch and aiayn.model.maps are heavy imports
    from torch import Tensor

    from ..model.maps import AttentionMaps

#: the kinds :func:`rollout` knows (those of Section 3.2.3 of Vaswani et al. 2017)
from ..model.config import KINDS as ROLLOUT_KINDS  # noqa: E402 - the one tuple, torch-free


def _lengths(lengths: Sequence[int] | None, B: int, n: int, what: str) -> list[int]:
    """Per-item unpadded lengths, ``n`` for every item when unknown; checked against the batch."""
    if lengths is None:
        return [n] * B
    if len(lengths) != B:
        raise ValueError(f"{what} has {len(lengths)} entries for a batch of {B}")
    out = [int(x) for x in lengths]
    if any(not 0 <= x <= n for x in out):
        raise ValueError(f"{what} {out} outside [0, {n}]")
    return out


def _valid(lengths: list[int], n: int):
    """``(B, n)`` boolean mask, True at unpadded positions."""
    import torch  # function-level: keeps ``import aiayn.analysis`` free of torch

    return torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]


def _row_normalise(x: "Tensor") -> "Tensor":
    """Rows divided by their sums; all-zero rows (padding) stay zero."""
    s = x.sum(-1, keepdim=True)
    return x / s.clamp_min(1e-30) * (s > 0)


def _mixing(weights: "Tensor", q_valid: "Tensor", k_valid: "Tensor", residual: float | None) -> "Tensor":
    """Head-averaged, padding-masked, row-normalised matrices ``(L, B, Q, K)`` from ``(L, B, H, Q, K)``;
    with ``residual`` (self-attention only, Q = K) the identity is mixed in first."""
    import torch  # function-level: keeps ``import aiayn.analysis`` free of torch

    a = weights.detach().cpu().float().mean(dim=2).double()  # head mean in float32 (a float64 one is much slower)
    mask = (q_valid[:, :, None] & k_valid[:, None, :]).to(a.dtype)  # (B, Q, K)
    a = _row_normalise(a * mask)
    if residual is not None:
        eye = torch.diag_embed(q_valid.to(a.dtype))  # (B, Q, Q): 1 on unpadded diagonal positions
        a = _row_normalise(residual * eye + (1.0 - residual) * a)
    return a


def _roll(mix: "Tensor") -> "Tensor":
    """Cumulative products ``R_l = A'_l @ R_{l-1}``, ``R_0 = A'_0``: ``(L, B, Q, Q)``."""
    import torch  # function-level: keeps ``import aiayn.analysis`` free of torch

    out, r = [], None
    for a in mix:
        r = a if r is None else a @ r
        out.append(r)
    return torch.stack(out)


def rollout(maps: "AttentionMaps", kind: str = "encoder", residual: float = 0.5, *,
            through_encoder: bool = True) -> "Tensor":
    """Attention rollout (Abnar and Zuidema 2020, Section 3) of one kind of attention, layer by layer.

    For each layer l (0-based), the head-averaged map ``A_l = mean_h maps.<kind>[l]`` gets the residual
    connection as an identity, ``A'_l = residual * I + (1 - residual) * A_l`` (rows renormalised; the paper's
    ``0.5 A + 0.5 I`` is ``residual=0.5``), and the rollout multiplies through the layers, later layers on the
    left: ``R_0 = A'_0``, ``R_l = A'_l R_{l-1}``. Row q of ``R_l`` is how much the output of layer l at
    position q draws, through layers 0..l, from each input position (the embeddings of the pieces).

    * ``"encoder"``: self-attention of the encoder, ``(L, B, S, S)``, keys = source pieces.
    * ``"decoder"``: masked self-attention of the decoder alone (the cross-attention sublayers are left out),
      ``(L, B, T, T)``, keys = pieces fed to the decoder; lower-triangular like the maps, because products of
      lower-triangular matrices are.
    * ``"cross"``: the flow from the source into each decoder position, ``(L, B, T, S)``. Each decoder layer
      l first mixes the decoder positions by its self-attention (``A'_l``, as above), then its cross-attention
      ``C_l`` (head mean, ``(T, S)``) adds source information next to the residual stream (weights
      ``1 - residual`` and ``residual``). Following that graph, the source part of decoder position t after
      layer l is ``U_l = residual * A'_l U_{l-1} + C_l`` (``U_{-1} = 0``; the common factor
      ``1 - residual`` cancels in the normalisation), i.e. ``sum_{m<=l} residual^(l-m) A'_l ... A'_{m+1} C_m``:
      every earlier layer's cross-attention, carried forward by the later decoder self-attention and damped
      by the residual. Its rows are renormalised (a distribution over the source; the share of the flow that
      comes from the decoder's own inputs is not shown). With ``through_encoder`` (default) the result is
      multiplied by the encoder's full rollout ``R_enc[-1]`` ``(S, S)``, because every cross-attention reads
      the encoder's *last* layer output, itself a mixture of the source pieces: the flow then lands on the
      input pieces, like the other two kinds; without it, keys are the encoder's output positions.
      ``residual=0`` at layer l gives ``C_l`` (times ``R_enc[-1]``); ``residual=1`` the mean of ``C_0..C_l``.

    ``residual=1`` gives the identity for the self-attention kinds; ``residual=0`` the plain product of the
    head means (one layer: the head mean itself).

    Padding: ``maps.src_lengths`` / ``maps.tgt_lengths`` (when known) mark the unpadded positions of each
    batch item. Padded positions neither receive nor pass flow: their rows **and** columns are all zero at
    every layer (rows of unpadded positions sum to 1 over unpadded keys). Without lengths, every position counts.

    Args:
        maps: an :class:`~aiayn.model.maps.AttentionMaps` with ``encoder (L, B, H, S, S)``, ``decoder
            (L, B, H, T, T)`` and/or ``cross (L, B, H, T, S)`` (post-softmax weights), on any device.
        kind: ``"encoder"``, ``"decoder"`` or ``"cross"``.
        residual: weight of the identity (the residual connection), in [0, 1].
        through_encoder: ``kind="cross"`` only: compose with the encoder's rollout (see above).

    Returns:
        float32 CPU tensor ``(L, B, T_q, T_k)``: ``(L, B, S, S)`` encoder, ``(L, B, T, T)`` decoder,
        ``(L, B, T, S)`` cross; index l is the rollout up to and including layer l (0-based).
        Head means in float32, products in float64, returned in float32.

    Raises:
        ValueError: unknown kind; ``residual`` not a number in [0, 1]; the maps needed were not captured
            (encoder for ``"encoder"``; decoder for ``"decoder"``; decoder and cross, plus encoder with
            ``through_encoder``, for ``"cross"``); inconsistent shapes or lengths.
    """
    import torch  # function-level: keeps ``import aiayn.analysis`` free of torch

    if kind not in ROLLOUT_KINDS:
        raise ValueError(f"unknown attention kind {kind!r}; choose one of {ROLLOUT_KINDS}")
    try:
        r = float(residual)
    except (TypeError, ValueError):
        raise ValueError(f"residual must be a number in [0, 1], got {residual!r}") from None
    if not 0.0 <= r <= 1.0:  # also rejects NaN
        raise ValueError(f"residual must be in [0, 1], got {residual!r}")

    def need(name: str) -> "Tensor":
        value = getattr(maps, name, None)
        if value is None:
            raise ValueError(f"rollout of {kind!r} needs the {name} attention maps, which were not captured")
        if value.ndim != 5:
            raise ValueError(f"{name} maps must be (L, B, H, Q, K), got shape {tuple(value.shape)}")
        return value

    if kind == "encoder":
        enc = need("encoder")
        L, B, _, S, _ = enc.shape
        valid = _valid(_lengths(maps.src_lengths, B, S, "src_lengths"), S)
        return _roll(_mixing(enc, valid, valid, r)).float()

    dec = need("decoder")
    L, B, _, T, _ = dec.shape
    t_valid = _valid(_lengths(maps.tgt_lengths, B, T, "tgt_lengths"), T)
    self_mix = _mixing(dec, t_valid, t_valid, r)
    if kind == "decoder":
        return _roll(self_mix).float()

    cross = need("cross")
    if cross.shape[:2] != (L, B) or cross.shape[3] != T:
        raise ValueError(f"cross maps of shape {tuple(cross.shape)} do not match decoder maps {tuple(dec.shape)}")
    S = cross.shape[4]
    s_valid = _valid(_lengths(maps.src_lengths, B, S, "src_lengths"), S)
    c = _mixing(cross, t_valid, s_valid, None)  # (L, B, T, S), no identity: queries and keys differ
    enc_roll = None
    if through_encoder:
        enc = need("encoder")
        if enc.shape[1] != B or enc.shape[3] != S:
            raise ValueError(f"encoder maps of shape {tuple(enc.shape)} do not match cross maps {tuple(cross.shape)}")
        enc_roll = _roll(_mixing(enc, s_valid, s_valid, r))[-1]  # (B, S, S): the last encoder layer's output
    out, u = [], torch.zeros_like(c[0])
    for layer in range(L):
        u = r * (self_mix[layer] @ u) + c[layer]
        x = _row_normalise(u)
        out.append(x @ enc_roll if enc_roll is not None else x)
    return torch.stack(out).float()


def rollout_frame(rolled: "Tensor", maps: "AttentionMaps", kind: str):
    """A rollout as a long ``pandas.DataFrame``, one row per (layer, batch, query, key) of unpadded positions.

    Columns: ``kind, layer, batch, query_pos, key_pos, weight`` (+ ``query_token, key_token`` when ``maps``
    carries labels: :meth:`~aiayn.model.maps.AttentionMaps.labels`). Layers count from 0.

    Args:
        rolled: :func:`rollout` of ``maps``, ``(L, B, Q, K)``.
        maps: the maps it was computed from (lengths and labels).
        kind: the kind it was computed for.

    Raises:
        ValueError: unknown kind, or ``rolled`` is not 4-dimensional.
    """
    import numpy as np  # function-level: pandas is slow to import and only exports need it
    import pandas as pd

    if kind not in ROLLOUT_KINDS:
        raise ValueError(f"unknown attention kind {kind!r}; choose one of {ROLLOUT_KINDS}")
    w = rolled.detach().float().cpu().numpy()
    if w.ndim != 4:
        raise ValueError(f"expected a (L, B, Q, K) rollout, got shape {w.shape}")
    L, B, Q, K = w.shape
    q_len = maps.src_lengths if kind == "encoder" else maps.tgt_lengths
    k_len = maps.tgt_lengths if kind == "decoder" else maps.src_lengths
    frames = []
    for b in range(B):
        qn = min(Q, q_len[b]) if q_len else Q
        kn = min(K, k_len[b]) if k_len else K
        layer, qp, kp = np.meshgrid(np.arange(L), np.arange(qn), np.arange(kn), indexing="ij")
        data: dict[str, Any] = {"kind": kind, "layer": layer.ravel(), "batch": b, "query_pos": qp.ravel(),
                                "key_pos": kp.ravel(), "weight": w[:, b, :qn, :kn].ravel()}
        ql, kl = maps.labels(kind, b)
        if ql is not None and kl is not None:
            data["query_token"] = np.asarray((list(ql) + [""] * qn)[:qn], dtype=object)[qp.ravel()]
            data["key_token"] = np.asarray((list(kl) + [""] * kn)[:kn], dtype=object)[kp.ravel()]
        frames.append(pd.DataFrame(data))
    return pd.concat(frames, ignore_index=True)


def rollout_dict(rolled: "Tensor", maps: "AttentionMaps", kind: str, residual: float, *,
                 through_encoder: bool | None = None, decimals: int = 6) -> dict[str, Any]:
    """A rollout as a JSON-able dict: ``kind``, ``residual``, ``through_encoder`` (cross only), ``shape``,
    ``rollout`` (nested lists ``[L][B][Q][K]``, rounded to ``decimals``), the query and key tokens of each
    batch item (``query_tokens``, ``key_tokens``: lists per item, or None) and the lengths. Layers count from 0.

    Raises:
        ValueError: unknown kind.
    """
    import torch  # function-level: keeps ``import aiayn.analysis`` free of torch

    if kind not in ROLLOUT_KINDS:
        raise ValueError(f"unknown attention kind {kind!r}; choose one of {ROLLOUT_KINDS}")
    w = torch.round(rolled.detach().float().cpu(), decimals=decimals)
    labels = [maps.labels(kind, b) for b in range(w.shape[1])] if w.ndim == 4 else []
    return {
        "kind": kind, "residual": float(residual),
        "through_encoder": bool(through_encoder) if kind == "cross" and through_encoder is not None else None,
        "source": "Abnar and Zuidema 2020, Section 3 (attention rollout)",
        "shape": list(w.shape), "rollout": w.tolist(),
        "query_tokens": [q for q, _ in labels], "key_tokens": [k for _, k in labels],
        "src_lengths": maps.src_lengths, "tgt_lengths": maps.tgt_lengths,
    }
