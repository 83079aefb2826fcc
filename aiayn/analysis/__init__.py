"""Pure analysis of attention maps for the app: word merging, per-head statistics, per-sentence bundles.

Everything here works on NumPy arrays of post-softmax attention weights (rows = queries, columns = keys,
each row summing to 1, Eq. 1 of the paper) and SentencePiece pieces; nothing imports Streamlit.

Conventions: a map of one head is ``(Q, K)``; a stack of heads is ``(L, H, Q, K)`` (layers, heads).
Entropies are in **bits** (log base 2). Layers and heads are counted from 0 in arrays and data frames;
the app shows them from 1 (the paper's "layer 5 of 6").
"""
from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

#: pieces that are not words: begin/end of sentence, padding, unknown.
SPECIAL_PIECES = frozenset({"<s>", "</s>", "<pad>", "<unk>"})
BOS_PIECES = frozenset({"<s>"})
EOS_PIECES = frozenset({"</s>"})
WORD_START = "▁"  # SentencePiece's word-boundary marker (U+2581)
_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


# -- words --------------------------------------------------------------------------------------------------
def is_special(piece: str) -> bool:
    return piece in SPECIAL_PIECES


def word_groups(pieces: Sequence[str]) -> list[list[int]]:
    """Group piece indices into words.

    A piece starting with ``▁`` opens a new word; other pieces continue the current word (subwords,
    attached punctuation, byte pieces). Special pieces (``<s>``, ``</s>``...) are words of their own.

    >>> word_groups(["▁The", "▁cat", "s", ".", "</s>"])
    [[0], [1, 2, 3], [4]]
    """
    groups: list[list[int]] = []
    prev_special = True
    for i, p in enumerate(pieces):
        if is_special(p) or p.startswith(WORD_START) or prev_special or not groups:
            groups.append([i])
        else:
            groups[-1].append(i)
        prev_special = is_special(p)
    return groups


def join_pieces(pieces: Sequence[str]) -> str:
    """Surface text of a run of pieces: ``▁`` becomes a space, UTF-8 byte pieces ``<0xC3>`` are decoded."""
    out: list[str] = []
    buf = bytearray()
    for p in pieces:
        m = _BYTE.match(p)
        if m:
            buf.append(int(m.group(1), 16))
            continue
        if buf:
            out.append(buf.decode("utf-8", errors="replace"))
            buf.clear()
        out.append(p.replace(WORD_START, " "))
    if buf:
        out.append(buf.decode("utf-8", errors="replace"))
    return "".join(out).strip() or "".join(pieces)


def merge_words(
    weights: np.ndarray,
    query_pieces: Sequence[str],
    key_pieces: Sequence[str],
    *,
    drop_special: bool = False,
) -> tuple[np.ndarray, list[str], list[str]]:
    """Merge piece-level attention into word-level attention.

    Rules (as in Clark et al. 2019): attention **to** a word is the **sum** over its pieces (keys), so
    rows still sum to 1; attention **from** a word is the **mean** over its pieces (queries).

    Args:
        weights: ``(..., Q, K)`` attention weights (any leading dims, e.g. ``(L, H, Q, K)``).
        query_pieces: ``Q`` pieces labelling the rows.
        key_pieces: ``K`` pieces labelling the columns.
        drop_special: leave out rows and columns of special pieces (``<s>``, ``</s>``); rows are NOT
            renormalised, so a row then sums to 1 minus the weight the special tokens took.

    Returns:
        ``(merged (..., Q_words, K_words), query_words, key_words)``; words are the joined pieces.

    Raises:
        ValueError: label counts differ from the map's shape.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.shape[-2] != len(query_pieces) or w.shape[-1] != len(key_pieces):
        raise ValueError(f"map of shape {w.shape[-2:]} but {len(query_pieces)} query and {len(key_pieces)} key labels")
    qg, kg = word_groups(query_pieces), word_groups(key_pieces)
    if drop_special:
        qg = [g for g in qg if not (len(g) == 1 and is_special(query_pieces[g[0]]))]
        kg = [g for g in kg if not (len(g) == 1 and is_special(key_pieces[g[0]]))]
    cols = np.stack([w[..., g].sum(axis=-1) for g in kg], axis=-1) if kg else np.zeros(w.shape[:-1] + (0,))
    rows = np.stack([cols[..., g, :].mean(axis=-2) for g in qg], axis=-2) if qg else np.zeros(cols.shape[:-2] + (0, cols.shape[-1]))
    qw = [join_pieces([query_pieces[i] for i in g]) for g in qg]
    kw = [join_pieces([key_pieces[i] for i in g]) for g in kg]
    return rows, qw, kw


def drop_special(weights: np.ndarray, query_pieces: Sequence[str], key_pieces: Sequence[str]) -> tuple[np.ndarray, list[str], list[str]]:
    """Leave out rows/columns of special pieces (no renormalisation). Returns ``(weights, q, k)``."""
    qi = [i for i, p in enumerate(query_pieces) if not is_special(p)]
    ki = [i for i, p in enumerate(key_pieces) if not is_special(p)]
    w = np.asarray(weights)[..., qi, :][..., :, ki]
    return w, [query_pieces[i] for i in qi], [key_pieces[i] for i in ki]


def unique_labels(labels: Sequence[str], *, offset: int = 0) -> list[str]:
    """Unique category labels ``"i:token"`` (tokens repeat, plotly categories must not)."""
    return [f"{i + offset}:{t}" for i, t in enumerate(labels)]


# -- per-head statistics -----------------------------------------------------------------------------------
def entropy(weights: np.ndarray, axis: int = -1) -> np.ndarray:
    """Shannon entropy in bits of distributions along ``axis`` (0 log 0 = 0).

    A row putting all weight on one key has entropy 0; a uniform row over n keys has log2(n).
    """
    p = np.asarray(weights, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log2(np.where(p > 0, p, 1.0)), 0.0)
    return terms.sum(axis=axis)


def _offset_share(w: np.ndarray, offset: int) -> np.ndarray:
    """Mean over queries i of ``w[..., i, i+offset]`` for the queries where that key exists. ``(L, H)``."""
    Q, K = w.shape[-2:]
    qs = [i for i in range(Q) if 0 <= i + offset < K]
    if not qs:
        return np.full(w.shape[:-2], np.nan)
    return np.mean([w[..., i, i + offset] for i in qs], axis=0)


def head_stats(
    weights: np.ndarray,
    query_pieces: Sequence[str],
    key_pieces: Sequence[str],
    *,
    kind: str,
) -> "pandas.DataFrame":  # noqa: F821
    """One row per head with statistics that reveal head roles (Voita et al. 2019; Clark et al. 2019).

    Args:
        weights: ``(L, H, Q, K)`` attention weights of one kind for one sentence.
        query_pieces, key_pieces: labels of the rows / columns.
        kind: ``"encoder"``, ``"decoder"`` or ``"cross"``. Previous/next/self shares are defined for the
            self-attention kinds only (NaN for cross-attention, whose queries and keys are different
            sequences).

    Returns:
        ``pandas.DataFrame`` with columns ``layer, head`` (from 1), ``entropy`` (mean row entropy, bits),
        ``confidence`` (mean over queries of the largest weight), ``self``, ``previous``, ``next`` (mean
        weight on key i, i-1, i+1 for query i, over the queries where that key exists), ``bos``, ``eos``
        (mean total weight on ``<s>`` / ``</s>`` keys; 0 when the keys hold none), ``max_key`` (the key
        piece receiving the most weight on average).
    """
    import pandas as pd

    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 4:
        raise ValueError(f"expected (L, H, Q, K) weights, got shape {w.shape}")
    L, H, Q, K = w.shape
    if len(query_pieces) != Q or len(key_pieces) != K:
        raise ValueError(f"map of shape {(Q, K)} but {len(query_pieces)} query and {len(key_pieces)} key labels")
    ent = entropy(w).mean(axis=-1)
    conf = w.max(axis=-1).mean(axis=-1)
    bos_idx = [j for j, p in enumerate(key_pieces) if p in BOS_PIECES]
    eos_idx = [j for j, p in enumerate(key_pieces) if p in EOS_PIECES]
    bos = w[..., bos_idx].sum(axis=-1).mean(axis=-1) if bos_idx else np.zeros((L, H))
    eos = w[..., eos_idx].sum(axis=-1).mean(axis=-1) if eos_idx else np.zeros((L, H))
    if kind in ("encoder", "decoder"):
        self_, prev, nxt = _offset_share(w, 0), _offset_share(w, -1), _offset_share(w, 1)
    elif kind == "cross":
        self_ = prev = nxt = np.full((L, H), np.nan)
    else:
        raise ValueError(f"unknown attention kind {kind!r}")
    top = w.mean(axis=-2).argmax(axis=-1)
    rows = []
    for layer in range(L):
        for head in range(H):
            rows.append({
                "layer": layer + 1, "head": head + 1,
                "entropy": ent[layer, head], "confidence": conf[layer, head],
                "self": self_[layer, head], "previous": prev[layer, head], "next": nxt[layer, head],
                "bos": bos[layer, head], "eos": eos[layer, head],
                "max_key": key_pieces[int(top[layer, head])],
            })
    return pd.DataFrame(rows)


# -- top-k next-token probabilities ------------------------------------------------------------------------
def top_k(probs: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """``(ids (T, k), probs (T, k))`` of the k most probable next tokens at each position, best first."""
    p = np.asarray(probs)
    k = max(1, min(int(k), p.shape[-1]))
    idx = np.argpartition(-p, k - 1, axis=-1)[..., :k]
    vals = np.take_along_axis(p, idx, axis=-1)
    order = np.argsort(-vals, axis=-1)
    return np.take_along_axis(idx, order, axis=-1), np.take_along_axis(vals, order, axis=-1)


# -- one sentence, everything the pages show ---------------------------------------------------------------
def _maps_numpy(maps) -> dict[str, np.ndarray]:
    """``AttentionMaps`` with B=1 -> ``{"encoder": (L, H, S, S), "decoder": (L, H, T, T), "cross": (L, H, T, S)}``."""
    out = {}
    for kind in ("encoder", "decoder", "cross"):
        t = getattr(maps, kind)
        if t is not None:
            out[kind] = t.detach().float().cpu().numpy()[:, 0]
    return out


def forced_probs(tr, src_ids: Sequence[int], tgt_ids: Sequence[int]) -> np.ndarray:
    """Next-piece probabilities ``(T, V)`` float32 when the decoder is fed ``<s>`` + ``tgt_ids[:-1]``.

    Row i is the model's distribution for the piece at position i. Because the decoder is causally masked
    (Section 3.2.3), feeding the model's own output reproduces the distribution of every decoding step;
    ids are fed directly, so no re-tokenisation can change the pieces.
    """
    import torch

    src = torch.tensor([list(src_ids)], dtype=torch.long, device=tr.device)
    dec_in = torch.tensor([[tr.cfg.bos_id] + list(tgt_ids)[:-1]], dtype=torch.long, device=tr.device)
    with torch.inference_mode():
        logits = tr.model(src, dec_in)
    return torch.softmax(logits[0].float(), dim=-1).cpu().numpy()


def sentence_bundle(
    tr,
    text: str,
    *,
    reference: str | None = None,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    max_len: int | None = None,
    n_best: int = 4,
    k: int = 10,
) -> dict[str, Any]:
    """Translate (or teacher-force) one sentence and return everything the app shows, as plain values.

    Free-running (``reference`` None): beam search (Section 6.1), then a teacher-forced pass over the
    model's own output ids (:func:`forced_probs`) for the next-token probabilities at every step. Teacher-forced
    (``reference`` given): the reference is fed to the decoder.

    Returns:
        dict with ``source, text, mode, reference, src_tokens (S), dec_in (T, pieces fed, BOS-shifted),
        out_tokens (T, pieces predicted), encoder (L,H,S,S), decoder (L,H,T,T), cross (L,H,T,S)``
        float32 arrays, ``topk_pieces`` (T x k lists), ``topk_probs (T, k)``, ``chosen_prob (T,)``
        (probability of the piece that came next), ``nbest`` [(text, score)], ``score``,
        ``elapsed_ms``, ``truncated``, ``finished``, ``probs_note`` (why probabilities are missing, or
        None).

    Raises:
        ValueError: empty text or reference, bad beam settings.
    """
    probs_note = None
    if reference is None:
        t = tr.translate(text, beam_size=beam_size, length_penalty=length_penalty, max_len=max_len,
                         n_best=n_best, return_attention=True)
        maps, out = _maps_numpy(t.attention), t
        probs = None
        if t.tgt_ids:
            probs = forced_probs(tr, t.src_ids, t.tgt_ids)
        else:
            probs_note = "the output is empty"
        mode = "free-running"
    else:
        out, p = tr.force(text, reference)
        maps, probs, mode = _maps_numpy(out.attention), p.numpy(), "teacher-forced"
    T = len(out.tgt_tokens)
    if probs is not None:
        ids, vals = top_k(probs, k)
        topk_pieces = [[tr.tokenizer.id_to_piece(int(i)) for i in row] for row in ids]
        chosen = probs[np.arange(T), np.asarray(out.tgt_ids[:T])]
    else:
        topk_pieces, vals, chosen = None, None, None
    return {
        "source": out.source, "text": out.text, "mode": mode, "reference": reference,
        "src_tokens": list(out.src_tokens), "dec_in": list(out.decoder_input_tokens),
        "out_tokens": list(out.tgt_tokens), **maps,
        "topk_pieces": topk_pieces, "topk_probs": vals, "chosen_prob": chosen,
        "nbest": [(a, float(b)) for a, b in (out.nbest or [(out.text, out.score)])],
        "score": float(out.score), "elapsed_ms": float(out.elapsed_ms),
        "truncated": bool(out.truncated), "finished": bool(out.finished), "probs_note": probs_note,
    }


def bundle_maps(bundle: dict[str, Any]):
    """The bundle's maps as a B=1 :class:`~aiayn.model.maps.AttentionMaps` (for ``to_dataframe`` / ``to_json``)."""
    import torch

    from ..model.maps import AttentionMaps

    maps = AttentionMaps(**{k: torch.from_numpy(np.ascontiguousarray(bundle[k]))[:, None] for k in ("encoder", "decoder", "cross") if bundle.get(k) is not None})
    maps.src_tokens = [bundle["src_tokens"]]
    maps.tgt_tokens = [bundle["dec_in"]]
    maps.tgt_output_tokens = [bundle["out_tokens"]]
    maps.meta = {"source": bundle["source"], "mode": bundle["mode"], "output": bundle["text"]}
    if bundle.get("reference"):
        maps.meta["reference"] = bundle["reference"]
    return maps


# -- input hygiene -----------------------------------------------------------------------------------------
MAX_CHARS = 1000


def check_text(text: Any, *, max_chars: int = MAX_CHARS, what: str = "sentence") -> tuple[str | None, list[str]]:
    """Validate user text before translation.

    Returns:
        ``(cleaned text or None, messages)``: None when nothing is left to translate (empty, whitespace or
        control characters only, not a string); messages explain every change made (cut to ``max_chars``,
        control/format characters replaced). Never raises.
    """
    from ..translator import clean_text

    if not isinstance(text, str):
        return None, [f"The {what} must be text."]
    notes = []
    if len(text) > max_chars:
        notes.append(f"The {what} was {len(text):,} characters long; only the first {max_chars:,} are used.")
        text = text[:max_chars]
    try:
        cleaned = clean_text(text)
    except ValueError:
        return None, [f"The {what} is empty (or only spaces and control characters): type something to translate."]
    if cleaned != " ".join(text.split()):
        notes.append(f"Control or invisible formatting characters in the {what} were replaced by spaces.")
    return cleaned, notes


# -- what a view shows -------------------------------------------------------------------------------------
def kind_labels(bundle: dict[str, Any], kind: str) -> tuple[list[str], list[str]]:
    """Piece labels ``(queries, keys)`` of ``kind`` in a bundle: encoder (src, src), decoder (fed, fed),
    cross (fed, src); decoder queries are the pieces fed (``<s>`` then the output shifted right)."""
    src, fed = bundle["src_tokens"], bundle["dec_in"]
    try:
        return {"encoder": (src, src), "decoder": (fed, fed), "cross": (fed, src)}[kind]
    except KeyError:
        raise ValueError(f"unknown attention kind {kind!r}; choose encoder, decoder or cross") from None


def view_stack(bundle: dict[str, Any], kind: str, *, words: bool = False, hide_special: bool = False) -> tuple[np.ndarray, list[str], list[str]]:
    """The ``(L, H, Q, K)`` maps of ``kind`` as a view shows them, with unique axis labels.

    Pieces: query labels of the decoder kinds are ``"i:fed→predicted"``, others ``"i:piece"``. With
    ``words`` the pieces are merged into words (:func:`merge_words`: sum over keys, mean over queries);
    with ``hide_special`` the ``<s>`` / ``</s>`` rows and columns are left out (no renormalisation).
    """
    q, k = kind_labels(bundle, kind)
    w = np.asarray(bundle[kind])
    if words:
        m, qw, kw = merge_words(w, q, k, drop_special=hide_special)
        return m, unique_labels(qw), unique_labels(kw)
    qi = [i for i, p in enumerate(q) if not (hide_special and is_special(p))]
    ki = [j for j, p in enumerate(k) if not (hide_special and is_special(p))]
    w = w[..., qi, :][..., :, ki]
    if kind == "encoder":
        ql = [f"{i}:{q[i]}" for i in qi]
    else:
        out = bundle["out_tokens"]
        ql = [f"{i}:{q[i]}→{out[i]}" for i in qi]
    kl = [f"{j}:{k[j]}" for j in ki]
    return w, ql, kl
