"""Real pretrained weights: convert a Hugging Face ``MarianMTModel`` (Opus-MT) into an :class:`aiayn.Transformer`.

Opus-MT models (Tiedemann and Thottingal 2020, trained with Marian NMT, Junczys-Dowmunt et al. 2018) are the
paper's encoder-decoder: post-LN layers (Section 3.1), sinusoidal positions (Section 3.5), embeddings scaled by
sqrt(d_model) and tied with the output layer (Section 3.4). :func:`from_marian` copies the weights of one that
the user has already loaded (``aiayn`` never downloads anything and never imports ``transformers``: the model
and tokenizer are read by duck typing) so every attention view of ``aiayn`` works on a model trained on
millions of sentence pairs. :class:`MarianTokenizerAdapter` gives a ``MarianTokenizer`` the interface
:class:`aiayn.Translator` uses. Re-exported by :mod:`aiayn.interop`.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import torch
from torch import Tensor, nn

from .model.config import TransformerConfig
from .model.positional import sinusoidal_encoding
from .model.transformer import Transformer

#: Hugging Face ``activation_function`` names -> ``TransformerConfig.activation`` (``ACT2FN``: "swish" and
#: "silu" are both ``x * sigmoid(x)``; "gelu" is the exact erf form)
MARIAN_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}


def _need(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(f"from_marian: {message}")


def _special_id(hc: Any, name: str) -> int:
    value = getattr(hc, name, None)
    _need(isinstance(value, int) and not isinstance(value, bool), f"config.{name} must be one int, got {value!r}")
    return value


def marian_config(model: Any) -> TransformerConfig:
    """The :class:`TransformerConfig` of a ``MarianMTModel`` (see :func:`from_marian` for the mapping).

    Raises:
        ValueError: ``model`` is not a Marian model, or uses something ``aiayn`` cannot represent (named).
    """
    hc = getattr(model, "config", None)
    _need(getattr(hc, "model_type", None) == "marian" and hasattr(model, "lm_head") and hasattr(model, "model"),
          f"expected a transformers MarianMTModel, got {type(model).__name__}")
    n_layers, n_heads, d_ff = hc.encoder_layers, hc.encoder_attention_heads, hc.encoder_ffn_dim
    _need((hc.decoder_layers, hc.decoder_attention_heads, hc.decoder_ffn_dim) == (n_layers, n_heads, d_ff),
          "aiayn needs the same number of layers, heads and FFN width in the encoder and the decoder; got "
          f"encoder ({n_layers}, {n_heads}, {d_ff}), decoder ({hc.decoder_layers}, {hc.decoder_attention_heads}, "
          f"{hc.decoder_ffn_dim})")
    vocab = hc.vocab_size
    _need((hc.decoder_vocab_size or vocab) == vocab,
          f"separate source/target vocabularies ({vocab} / {hc.decoder_vocab_size}) are not supported")
    _need(bool(hc.scale_embedding), "scale_embedding=False is not supported (aiayn scales embeddings by "
          "sqrt(d_model), Section 3.4; every Opus-MT model does)")
    _need(hc.activation_function in MARIAN_ACTIVATIONS,
          f"activation_function {hc.activation_function!r} is not one of {sorted(MARIAN_ACTIVATIONS)}")
    for flag in ("normalize_before", "add_final_layer_norm", "normalize_embedding"):
        _need(not getattr(hc, flag, False), f"config.{flag}=True (pre-LN / extra LayerNorm) is not Marian's post-LN")
    _need(getattr(model.model.encoder, "layernorm_embedding", None) is None,
          "an embedding LayerNorm (layernorm_embedding) is not supported")
    eps = {m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)}
    _need(len(eps) == 1, f"all LayerNorms must share one eps, got {sorted(eps)}")
    pad, eos = _special_id(hc, "pad_token_id"), _special_id(hc, "eos_token_id")
    start = _special_id(hc, "decoder_start_token_id")
    if start == pad:  # Opus-MT: the decoder starts from <pad>; Marian has no <s>
        decoder_start = "pad"
        bos = hc.bos_token_id
        if not (isinstance(bos, int) and 0 <= bos < vocab and bos not in (pad, eos)):
            bos = min(i for i in range(vocab) if i not in (pad, eos))  # nominal: never fed, never suppressed
    else:
        decoder_start, bos = "bos", start
    enc, dec = model.model.encoder, model.model.decoder
    shared = all(
        t.shape == enc.embed_tokens.weight.shape and torch.equal(t, enc.embed_tokens.weight)
        for t in (dec.embed_tokens.weight, model.lm_head.weight)
    )
    return TransformerConfig(
        vocab_size=vocab,
        d_model=hc.d_model,
        n_heads=n_heads,
        d_ff=d_ff,
        n_layers=n_layers,
        dropout=float(hc.dropout),
        attention_dropout=float(hc.attention_dropout),
        pad_id=pad,
        bos_id=bos,
        eos_id=eos,
        norm_first=False,
        positional="sinusoidal",
        share_embeddings=shared,
        layer_norm_eps=float(eps.pop()),
        max_len=hc.max_position_embeddings,
        activation=MARIAN_ACTIVATIONS[hc.activation_function],
        positional_layout="concatenated",
        final_logits_bias=True,
        decoder_start=decoder_start,
    )


def _linear(prefix: str, layer: nn.Linear, out: dict[str, Tensor]) -> None:
    _need(layer.bias is not None, f"{prefix} has no bias (aiayn's projections all have one)")
    out[f"{prefix}.weight"] = layer.weight
    out[f"{prefix}.bias"] = layer.bias


def _attention(prefix: str, att: nn.Module, out: dict[str, Tensor]) -> None:
    for ours, theirs in (("w_q", "q_proj"), ("w_k", "k_proj"), ("w_v", "v_proj"), ("w_o", "out_proj")):
        _linear(f"{prefix}.{ours}", getattr(att, theirs), out)


def _norm(prefix: str, norm: nn.LayerNorm, out: dict[str, Tensor]) -> None:
    out[f"{prefix}.weight"] = norm.weight
    out[f"{prefix}.bias"] = norm.bias


def _state_dict(model: Any, cfg: TransformerConfig) -> dict[str, Tensor]:
    enc, dec = model.model.encoder, model.model.decoder
    out: dict[str, Tensor] = {}
    if cfg.share_embeddings:
        out["embedding.weight"] = enc.embed_tokens.weight
    else:
        out["src_embedding.weight"] = enc.embed_tokens.weight
        out["tgt_embedding.weight"] = dec.embed_tokens.weight
        out["generator.weight"] = model.lm_head.weight
    for i, layer in enumerate(enc.layers):
        p = f"encoder_layers.{i}"
        _attention(f"{p}.self_attn", layer.self_attn, out)
        _norm(f"{p}.norm1", layer.self_attn_layer_norm, out)
        _linear(f"{p}.ffn.w_1", layer.fc1, out)
        _linear(f"{p}.ffn.w_2", layer.fc2, out)
        _norm(f"{p}.norm2", layer.final_layer_norm, out)
    for i, layer in enumerate(dec.layers):
        p = f"decoder_layers.{i}"
        _attention(f"{p}.self_attn", layer.self_attn, out)
        _norm(f"{p}.norm1", layer.self_attn_layer_norm, out)
        _attention(f"{p}.cross_attn", layer.encoder_attn, out)
        _norm(f"{p}.norm2", layer.encoder_attn_layer_norm, out)
        _linear(f"{p}.ffn.w_1", layer.fc1, out)
        _linear(f"{p}.ffn.w_2", layer.fc2, out)
        _norm(f"{p}.norm3", layer.final_layer_norm, out)
    out["final_logits_bias"] = model.final_logits_bias.reshape(-1)
    return out


def _check_positions(model: Any, cfg: TransformerConfig) -> None:
    """Marian's tables must be the sinusoids of Section 3.5, sines then cosines, position 0 first."""
    expected = sinusoidal_encoding(cfg.max_len, cfg.d_model, layout="concatenated")
    for side in ("encoder", "decoder"):
        table = getattr(model.model, side).embed_positions.weight.detach().float().cpu()
        _need(table.shape == expected.shape and torch.allclose(table, expected, atol=1e-5),
              f"the {side}'s position table is not the sinusoidal table (sines then cosines) of Section 3.5")


def from_marian(model: Any, tokenizer: Any = None) -> tuple[Transformer, "MarianTokenizerAdapter | None"]:
    """Copy an in-memory Hugging Face ``MarianMTModel`` (Opus-MT) into an equivalent :class:`aiayn.Transformer`.

    Load the model yourself from your own disk (``MarianMTModel.from_pretrained(local_dir)``); ``aiayn`` never
    downloads anything and does not import ``transformers``. In eval mode the result computes the same logits
    ``(B, T, V)`` for the same ``src`` ``(B, S)`` and decoder input ``(B, T)`` (starting with
    ``decoder_start_token_id``), and greedy decoding (:func:`aiayn.decoding.greedy_decode`) gives the output of
    ``model.generate(num_beams=1, do_sample=False, bad_words_ids=[[pad]])`` (Opus-MT's generation config bans
    ``<pad>``; aiayn never predicts the pad or the start token) up to the length limit: aiayn does not force
    ``</s>`` at the last step (``forced_eos_token_id``) and its beam search uses the GNMT length penalty of
    Section 6.1, not Marian's.

    What maps to what, and every difference checked:

    * layers: ``q/k/v/out_proj`` -> ``w_q/w_k/w_v/w_o`` (all with biases, as ours), ``self_attn_layer_norm`` /
      ``encoder_attn_layer_norm`` / ``final_layer_norm`` -> ``norm1`` / ``norm2`` / ``norm2`` or ``norm3``,
      ``fc1/fc2`` -> the FFN. Marian is post-LN (``norm_first=False``, no final stack LayerNorm, no
      ``layernorm_embedding``; a model with any of these is refused). Scaling ``q`` by ``d_k^-1/2`` before
      ``QK^T`` is Eq. 1.
    * ``activation_function`` -> ``activation`` ("swish"/"silu" -> "swish", "gelu", "relu"; others refused).
    * positions: Marian's table holds sines in the first half and cosines in the second, from position 0
      with no offset: ``positional_layout="concatenated"`` (checked against the model's own tables);
      ``max_position_embeddings`` -> ``max_len``.
    * ``scale_embedding=True`` multiplies embeddings by sqrt(d_model), as ours (False is refused).
    * embeddings: when the encoder and decoder embeddings and ``lm_head`` are one matrix
      (``share_encoder_decoder_embeddings`` and ``tie_word_embeddings``, every Opus-MT model)
      ``share_embeddings=True``; otherwise three copies (``share_embeddings=False``). Separate source and
      target vocabularies (``decoder_vocab_size``) and different encoder/decoder shapes are refused.
    * ``final_logits_bias`` ``(1, V)`` -> the buffer ``final_logits_bias`` ``(V,)`` added to the logits.
    * special ids: ``pad_token_id`` -> ``pad_id``, ``eos_token_id`` -> ``eos_id``. Opus-MT's
      ``decoder_start_token_id`` is the pad id: ``decoder_start="pad"``, so decoding starts from ``<pad>`` and
      the decoder does not mask that first position as padding (Marian masks no decoder pads at all; later pads
      are never attended to by real positions anyway). Marian has no ``<s>``: ``bos_id`` is nominal (its
      ``bos_token_id`` when set, else the smallest id that is neither pad nor eos, ``<unk>`` for Opus-MT), never
      fed and never suppressed. A model whose start token is not the pad id gets ``bos_id`` = that id.
    * LayerNorm eps (torch's default 1e-5 in Marian) -> ``layer_norm_eps``; ``dropout`` and
      ``attention_dropout`` are copied. Training-only differences: Marian's ``activation_dropout`` (inside
      the FFN) and layer drop have no counterpart in aiayn (both 0 in Opus-MT).

    Args:
        model: a ``transformers.MarianMTModel`` (any device and dtype; the copy gets the same).
        tokenizer: its ``MarianTokenizer``, or None.

    Returns:
        ``(transformer in eval mode, MarianTokenizerAdapter or None)``; ``aiayn.Translator(transformer,
        adapter)`` translates text.

    Raises:
        ValueError: ``model`` is not a Marian model or uses a feature aiayn cannot represent (the message says
            which), or the tokenizer's special ids or size differ from the model's.
    """
    cfg = marian_config(model)
    _check_positions(model, cfg)
    weight = model.lm_head.weight
    ours = Transformer(cfg)
    with torch.no_grad():
        ours.load_state_dict({k: v.detach().cpu().float() for k, v in _state_dict(model, cfg).items()}, strict=True)
    ours = ours.to(device=weight.device, dtype=weight.dtype).eval()
    adapter = MarianTokenizerAdapter(tokenizer, cfg) if tokenizer is not None else None
    return ours, adapter


class MarianTokenizerAdapter:
    """A ``MarianTokenizer`` seen through the interface of :class:`aiayn.tokenizer.Tokenizer` that
    :class:`aiayn.Translator` and the analysis use: ``vocab_size``, ``pad_id`` / ``unk_id`` / ``bos_id`` /
    ``eos_id``, ``encode`` (ids without special tokens), ``encode_target``, ``encode_batch``, ``encode_pieces``, ``decode``,
    ``id_to_piece``, ``piece_to_id``.

    ``encode`` uses the tokenizer's source SentencePiece model (and its Moses punctuation normalisation when
    ``sacremoses`` is installed); ``decode`` is ``MarianTokenizer.decode(ids, skip_special_tokens=True)``.
    ``bos_id`` is the converted config's nominal ``bos_id`` (Marian has no ``<s>``; see :func:`from_marian`).
    References and forced prefixes are target-language text: :func:`aiayn.calls.encode_target` cuts them with
    ``encode_target``, the tokenizer's target model (``MarianTokenizer(text_target=...)``).

    Raises:
        ValueError: the tokenizer's size or pad / eos ids differ from ``cfg``'s.
    """

    def __init__(self, tokenizer: Any, cfg: TransformerConfig) -> None:
        self._tok = tokenizer
        self._vocab_size = int(len(tokenizer))
        self.pad_id, self.eos_id = tokenizer.pad_token_id, tokenizer.eos_token_id
        self.unk_id = tokenizer.unk_token_id
        self.bos_id = cfg.bos_id
        self.source = type(tokenizer).__name__
        if self._vocab_size != cfg.vocab_size:
            raise ValueError(f"from_marian: the tokenizer has {self._vocab_size} pieces, the model {cfg.vocab_size}")
        if (self.pad_id, self.eos_id) != (cfg.pad_id, cfg.eos_id):
            raise ValueError(f"from_marian: tokenizer pad/eos ids {(self.pad_id, self.eos_id)} differ from the "
                             f"model's {(cfg.pad_id, cfg.eos_id)}")

    def __repr__(self) -> str:
        return f"MarianTokenizerAdapter({self.source}, vocab_size={self.vocab_size})"

    @property
    def vocab_size(self) -> int:
        """Number of pieces (ids 0 .. vocab_size-1), specials included."""
        return self._vocab_size

    def _check_id(self, i: int) -> int:
        if not 0 <= int(i) < self._vocab_size:
            raise ValueError(f"token id {i} out of range [0, {self._vocab_size})")
        return int(i)

    def encode(self, text: str) -> list[int]:
        """Piece ids of ``text`` without ``</s>`` (the caller adds it). Raises TypeError for a non-string."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects str, got {type(text).__name__}")
        return list(self._tok.encode(text, add_special_tokens=False))

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` for each text."""
        return [self.encode(t) for t in texts]

    def encode_target(self, text: str) -> list[int]:
        """Piece ids of a target-language ``text`` (cut by the target SentencePiece model) without ``</s>``.
        Raises TypeError for a non-string."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects str, got {type(text).__name__}")
        return list(self._tok(text_target=text, add_special_tokens=False)["input_ids"])

    def encode_pieces(self, text: str) -> list[str]:
        """Piece strings of ``text`` (word starts marked with "▁")."""
        return self.pieces(self.encode(text))

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Piece strings of ``ids``. Raises ValueError for an id outside the vocabulary."""
        return [self.id_to_piece(i) for i in ids]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; ``</s>``, ``<pad>`` and ``<unk>`` are dropped (``skip_special_tokens``).

        Raises:
            ValueError: an id is outside ``[0, vocab_size)``.
        """
        return self._tok.decode([self._check_id(i) for i in ids], skip_special_tokens=True)

    def id_to_piece(self, i: int) -> str:
        """The piece string of id ``i``. Raises ValueError if ``i`` is out of range."""
        return self._tok.convert_ids_to_tokens(self._check_id(i))

    def piece_to_id(self, piece: str) -> int:
        """The id of a piece string (``unk_id`` when unknown)."""
        return int(self._tok.convert_tokens_to_ids(piece))
