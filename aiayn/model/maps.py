"""`AttentionMaps`: every attention map of a forward pass, as a value.

Shapes (L layers, B batch, H heads, S source length, T target length):

* ``encoder`` ``(L, B, H, S, S)``: encoder self-attention;
* ``decoder`` ``(L, B, H, T, T)``: masked decoder self-attention (zeros above the diagonal);
* ``cross``   ``(L, B, H, T, S)``: encoder-decoder attention (queries from the decoder, keys from the encoder).

Weights are post-softmax and pre-dropout, float32 on the device they were computed on (``.cpu()`` moves
them). The optional ``*_scores`` hold the scaled pre-softmax scores ``QK^T / sqrt(d_k)`` before masking.
Token labels, when known, are per batch item: ``src_tokens[b]`` label encoder keys/queries and cross keys;
``decoder_input_tokens[b]`` the pieces fed to the decoder (``<s>`` then the output shifted right: decoder
queries and keys, cross queries); ``output_tokens[b]`` the piece each decoder position predicted. Lengths
exclude padding.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Iterator

import torch
from torch import Tensor

from .config import KINDS

KIND_TITLES = {
    "encoder": "encoder self-attention",
    "decoder": "masked decoder self-attention",
    "cross": "encoder-decoder (cross) attention",
}


@dataclass
class AttentionMaps:
    """All attention maps of one forward pass or one decoded hypothesis (see module docstring)."""

    encoder: Tensor | None = None
    decoder: Tensor | None = None
    cross: Tensor | None = None
    encoder_scores: Tensor | None = None
    decoder_scores: Tensor | None = None
    cross_scores: Tensor | None = None
    src_tokens: list[list[str]] | None = None
    decoder_input_tokens: list[list[str]] | None = None
    output_tokens: list[list[str]] | None = None
    src_lengths: list[int] | None = None
    tgt_lengths: list[int] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    # -- access --------------------------------------------------------------------------------------------
    def get(self, kind: str, *, scores: bool = False) -> Tensor:
        """The maps of one kind (``"encoder"``, ``"decoder"``, ``"cross"``), ``(L, B, H, Tq, Tk)``.

        Raises:
            ValueError: unknown kind, or that kind was not captured.
        """
        if kind not in KINDS:
            raise ValueError(f"unknown attention kind {kind!r}; choose one of {KINDS}")
        value = getattr(self, f"{kind}_scores" if scores else kind)
        if value is None:
            raise ValueError(f"no {'scores' if scores else 'weights'} were captured for {kind!r}")
        return value

    @property
    def n_layers(self) -> int:
        return next(t for t in (self.encoder, self.decoder, self.cross) if t is not None).shape[0]

    @property
    def n_heads(self) -> int:
        return next(t for t in (self.encoder, self.decoder, self.cross) if t is not None).shape[2]

    @property
    def batch_size(self) -> int:
        return next(t for t in (self.encoder, self.decoder, self.cross) if t is not None).shape[1]

    def labels(self, kind: str, batch: int = 0) -> tuple[list[str] | None, list[str] | None]:
        """(query labels, key labels) of ``kind`` for batch item ``batch``, or None where unknown.

        encoder: (src_tokens, src_tokens); decoder: (decoder_input_tokens, decoder_input_tokens);
        cross: (decoder_input_tokens, src_tokens) (Section 3.2.3: decoder queries, encoder keys).

        Raises:
            ValueError: unknown kind.
        """
        if kind not in KINDS:
            raise ValueError(f"unknown attention kind {kind!r}; choose one of {KINDS}")
        src = self.src_tokens[batch] if self.src_tokens else None
        fed = self.decoder_input_tokens[batch] if self.decoder_input_tokens else None
        return {"encoder": (src, src), "decoder": (fed, fed), "cross": (fed, src)}[kind]

    def _tensors(self) -> Iterator[tuple[str, Tensor]]:
        for name in (*KINDS, *(f"{kind}_scores" for kind in KINDS)):
            value = getattr(self, name)
            if value is not None:
                yield name, value

    def to(self, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> "AttentionMaps":
        """A copy with every tensor detached and moved to ``device`` / ``dtype``."""
        moved = {name: t.detach().to(device=device, dtype=dtype) for name, t in self._tensors()}
        return replace(self, **moved)

    def cpu(self) -> "AttentionMaps":
        return self.to("cpu")

    def select(self, batch: int) -> "AttentionMaps":
        """Batch item ``batch`` alone (B=1), cropped to its unpadded lengths."""
        if not 0 <= batch < self.batch_size:
            raise ValueError(f"batch index {batch} outside [0, {self.batch_size})")
        s = self.src_lengths[batch] if self.src_lengths else None
        t = self.tgt_lengths[batch] if self.tgt_lengths else None
        crop = {"encoder": (s, s), "decoder": (t, t), "cross": (t, s)}
        out: dict[str, Any] = {}
        for name, value in self._tensors():
            q, k = crop[name.split("_")[0]]
            v = value[:, batch : batch + 1]
            out[name] = v[..., : q if q is not None else v.shape[-2], : k if k is not None else v.shape[-1]]
        pick = lambda seq: None if seq is None else [seq[batch]]  # noqa: E731
        return replace(
            self,
            **out,
            src_tokens=pick(self.src_tokens),
            decoder_input_tokens=pick(self.decoder_input_tokens),
            output_tokens=pick(self.output_tokens),
            src_lengths=pick(self.src_lengths),
            tgt_lengths=pick(self.tgt_lengths),
        )

    # -- export --------------------------------------------------------------------------------------------
    def to_dataframe(self, kinds: tuple[str, ...] | list[str] | None = None, *, include_scores: bool = False):
        """Long-format ``pandas.DataFrame``, one row per (kind, layer, head, batch, query, key).

        Columns: ``kind, layer, head, batch, query_pos, key_pos, weight`` (+ ``score`` with
        ``include_scores``, + ``query_token, key_token`` when labels are known). Padded positions are left
        out when lengths are known. Layers and heads count from 0.
        """
        import numpy as np  # function-level: pandas is slow to import and only exports need it, not every model import
        import pandas as pd

        frames = []
        for kind in kinds or KINDS:
            w = getattr(self, kind)
            if w is None:
                continue
            w = w.detach().float().cpu()
            sc = getattr(self, f"{kind}_scores") if include_scores else None
            L, B, H, Q, K = w.shape
            for b in range(B):
                qn, kn = Q, K
                if kind in ("decoder", "cross") and self.tgt_lengths:
                    qn = min(Q, self.tgt_lengths[b])
                if kind == "encoder" and self.src_lengths:
                    qn = min(Q, self.src_lengths[b])
                if kind in ("encoder", "cross") and self.src_lengths:
                    kn = min(K, self.src_lengths[b])
                if kind == "decoder" and self.tgt_lengths:
                    kn = min(K, self.tgt_lengths[b])
                block = w[:, b, :, :qn, :kn].numpy()
                layer, head, qp, kp = np.meshgrid(
                    np.arange(L), np.arange(H), np.arange(qn), np.arange(kn), indexing="ij"
                )
                data = {
                    "kind": kind,
                    "layer": layer.ravel(),
                    "head": head.ravel(),
                    "batch": b,
                    "query_pos": qp.ravel(),
                    "key_pos": kp.ravel(),
                    "weight": block.ravel(),
                }
                if sc is not None:
                    data["score"] = sc.detach().float().cpu()[:, b, :, :qn, :kn].numpy().ravel()
                qlab, klab = self.labels(kind, b)
                if qlab is not None and klab is not None:
                    data["query_token"] = np.asarray(list(qlab) + [""] * qn, dtype=object)[:qn][qp.ravel()]
                    data["key_token"] = np.asarray(list(klab) + [""] * kn, dtype=object)[:kn][kp.ravel()]
                frames.append(pd.DataFrame(data))
        if not frames:
            return pd.DataFrame(columns=["kind", "layer", "head", "batch", "query_pos", "key_pos", "weight"])
        return pd.concat(frames, ignore_index=True)

    def to_dict(self, *, include_scores: bool = False, decimals: int | None = 6) -> dict[str, Any]:
        """JSON-able dict: nested lists ``[L][B][H][Q][K]`` per kind, labels (``src_tokens``,
        ``decoder_input_tokens``, ``output_tokens``), lengths and ``meta``."""
        out: dict[str, Any] = {"shapes": {}, "meta": self.meta}
        for name, value in self._tensors():
            if name.endswith("_scores") and not include_scores:
                continue
            arr = value.detach().float().cpu()
            if decimals is not None:
                arr = torch.round(arr, decimals=decimals)
            out[name] = arr.tolist()
            out["shapes"][name] = list(value.shape)
        for name in ("src_tokens", "decoder_input_tokens", "output_tokens", "src_lengths", "tgt_lengths"):
            out[name] = getattr(self, name)
        return out

    def to_bertviz(self) -> dict[str, Any]:
        """Keyword arguments for BertViz's encoder-decoder ``model_view`` (Vig 2019), without importing BertViz:
        ``bertviz.model_view(**maps.to_bertviz(), html_action="return")``.

        Returns:
            a dict with ``encoder_attention``, ``decoder_attention``, ``cross_attention`` (each a tuple of one
            float32 CPU tensor ``(1, H, Q, K)`` per layer, as BertViz and Hugging Face return them; a kind that
            was not captured is left out), ``encoder_tokens`` (``src_tokens``) and ``decoder_tokens``
            (``decoder_input_tokens``: the pieces fed to the decoder, which label decoder queries, decoder keys
            and cross queries). Padding is cropped away (:meth:`select`).

        Raises:
            ValueError: the batch holds more than one sentence (BertViz shows one: pass ``maps.select(b)``), no
                map was captured, or the token labels are missing or do not match the maps' lengths.
        """
        present = [k for k in KINDS if getattr(self, k) is not None]
        if not present:
            raise ValueError("to_bertviz: no attention maps were captured")
        if self.batch_size != 1:
            raise ValueError(f"to_bertviz: BertViz shows one sentence, these maps hold {self.batch_size}; "
                             "call maps.select(b).to_bertviz() for sentence b")
        if not self.src_tokens or not self.decoder_input_tokens:
            raise ValueError("to_bertviz: the maps carry no token labels (src_tokens / decoder_input_tokens); "
                             "Translator results have them, or set them on the maps")
        one = self.select(0).cpu()
        tokens = {"encoder_tokens": list(one.src_tokens[0]), "decoder_tokens": list(one.decoder_input_tokens[0])}
        out: dict[str, Any] = {}
        for kind in present:
            maps = getattr(one, kind)  # (L, 1, H, Q, K)
            q_labels, k_labels = one.labels(kind)
            if (len(q_labels), len(k_labels)) != tuple(maps.shape[-2:]):
                raise ValueError(f"to_bertviz: {kind} maps are {tuple(maps.shape[-2:])} (queries, keys) but there are "
                                 f"{len(q_labels)} query and {len(k_labels)} key labels")
            out[f"{kind}_attention"] = tuple(maps[layer].contiguous() for layer in range(maps.shape[0]))
        out.update(tokens)
        return out

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as a JSON string (NaN-free: masked scores of -inf are written as null)."""
        def clean(x: Any) -> Any:
            if isinstance(x, list):
                return [clean(v) for v in x]
            if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
                return None
            return x

        d = self.to_dict(**kwargs)
        for name in ("encoder_scores", "decoder_scores", "cross_scores"):
            if name in d:
                d[name] = clean(d[name])
        return json.dumps(d)
