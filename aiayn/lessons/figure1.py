"""The guided lesson of the page "Figure 1, walked": 14 steps up Figure 1 of the paper, each naming its block (a key
of :func:`aiayn.figures.figure1.block_keys`), citing the section or equation it implements and quoting the live
numbers of the student's sentence, read from one :class:`~aiayn.block_trace.BlockTrace` and its
:class:`~aiayn.block_trace.LensTable` (:meth:`aiayn.Translator.logit_lens`).

Pure: no Streamlit, no model call. :func:`lesson_step` returns a :class:`LessonStep` whose ``numbers`` are the
values its markdown quotes (tests recompute them from the trace). Shapes: S source length, T target length,
L layers, D d_model.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .inputs import LessonInputError

#: number of lesson steps
N_STEPS = 14


@dataclass(frozen=True)
class LessonStep:
    """One step of the lesson.

    Attributes:
        index: 1-based step number; block: the block it highlights (a key of ``block_keys``); title: a heading.
        markdown: two to four sentences citing the paper and quoting ``numbers``.
        numbers: the live values the markdown names, by name (floats, ints or pieces).
    """

    index: int
    block: str
    title: str
    markdown: str
    numbers: dict = field(default_factory=dict)


def _np(t) -> np.ndarray:
    return t[0].detach().float().cpu().numpy()


def _rows(m: np.ndarray) -> np.ndarray:
    return np.linalg.norm(m, axis=-1)


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.maximum(_rows(a) * _rows(b), 1e-12)


def fmt(x: float, digits: int = 2) -> str:
    """How the lesson prints a number (tests format their own values with it to find them in the text)."""
    return f"{x:.{digits}f}"


def pct(x: float) -> str:
    """A fraction as the lesson prints it in percent."""
    return f"{100 * x:.0f}%"


def _q(piece: str) -> str:
    """A piece quoted in markdown (code span, so ``</s>`` and ``_`` stay literal)."""
    return f"`{piece}`"


def step_blocks(n_layers: int) -> list[str]:
    """The block each of the :data:`N_STEPS` steps highlights, for a model of ``n_layers`` layers per stack."""
    last = n_layers
    return ["enc.embed", "enc.scale", "enc.pe", "enc.1.self_attn", "enc.1.ffn", f"enc.{last}.self_attn",
            f"enc.{last}.ffn", "dec.embed", "dec.pe", "dec.1.self_attn", "dec.1.cross_attn", f"dec.{last}.ffn",
            "out", "out"]


def _residual(s) -> float:
    """Mean over tokens of ``‖Sublayer(x)‖ / ‖x‖`` (Section 3.1's residual connection)."""
    return float((_rows(_np(s.sublayer_out)) / _rows(_np(s.stream_in))).mean())


def _sub(trace, side: str, layer: int, name: str):
    stack = trace.encoder if side == "enc" else trace.decoder
    return stack.layers[layer - 1].sublayer(name)


def _embed(trace, lens, cfg) -> tuple[str, dict]:
    e = _np(trace.encoder.embedding)
    n = {"S": e.shape[0], "d_model": e.shape[1], "norm": float(_rows(e).mean()), "first": trace.meta["src_tokens"][0]}
    return (f"Section 3.4: learned embeddings turn each input piece into a vector of dimension d_model. Your "
            f"**{n['S']} source pieces** (the first is {_q(n['first'])}) become a **{n['S']} × {n['d_model']}** "
            f"matrix, one row per piece. Its rows have a mean length of **{fmt(n['norm'])}**."), n


def _scale(trace, lens, cfg) -> tuple[str, dict]:
    e, s = _np(trace.encoder.embedding), _np(trace.encoder.scaled)
    n = {"factor": float(np.sqrt(e.shape[1])), "before": float(_rows(e).mean()), "after": float(_rows(s).mean())}
    return (f"Section 3.4: \"we multiply those weights by √d_model\": here by **{fmt(n['factor'])}**. The mean row "
            f"length grows from **{fmt(n['before'])}** to **{fmt(n['after'])}**: the scale the positional "
            f"encoding added next is measured against (next step)."), n


def _pe(trace, lens, cfg) -> tuple[str, dict]:
    s, x = _np(trace.encoder.scaled), _np(trace.encoder.input)
    p = trace.encoder.positional.detach().float().cpu().numpy()
    n = {"pe_norm": float(_rows(p[: s.shape[0]]).mean()), "emb_norm": float(_rows(s).mean()),
         "cos": float(_cos(x, s).mean())}
    return (f"Section 3.5: sines and cosines of the position are added, since attention alone ignores word order. "
            f"A position row has a mean length of **{fmt(n['pe_norm'])}** against **{fmt(n['emb_norm'])}** for the "
            f"scaled embedding; after the sum each row keeps a cosine of **{fmt(n['cos'])}** with its embedding."), n


def _enc_attn(trace, lens, cfg) -> tuple[str, dict]:
    s = _sub(trace, "enc", 1, "self_attn")
    change = _rows(_np(s.sublayer_out)) / _rows(_np(s.stream_in))
    toks = trace.meta["src_tokens"]
    n = {"h": cfg.n_heads, "d_k": cfg.d_k, "change": float(change.mean()), "most": toks[int(change.argmax())]}
    return (f"Section 3.2.2, MultiHead(Q, K, V): **{n['h']} heads** of d_k = **{n['d_k']}** let every source piece "
            f"look at every other (Eq. 1). Section 3.1 adds the result to the residual stream: the sub-layer's output "
            f"is **{pct(n['change'])}** of the stream's length on average, most for {_q(n['most'])}."), n


def _enc_ffn(trace, lens, cfg) -> tuple[str, dict]:
    s = _sub(trace, "enc", 1, "ffn")
    zeros = (_np(s.hidden) == 0).mean(-1)
    n = {"d_ff": int(s.hidden.shape[-1]), "zeros": float(zeros.mean()), "change": _residual(s)}
    change = f"the residual stream changes by **{pct(n['change'])}** of its length in this sub-layer."
    act = getattr(cfg, "activation", "relu")
    if act != "relu":  # an imported Opus-MT model uses swish: nothing is set to exactly zero, negatives leak through
        n["negative"] = float((_np(s.hidden) < 0).mean(-1).mean())
        return (f"Eq. 2 with this model's {act} in place of the paper's ReLU, FFN(x) = {act}(xW₁ + b₁)W₂ + b₂, runs "
                f"on each position separately through **{n['d_ff']}** hidden units. On your sentence "
                f"**{pct(n['negative'])}** of them come out negative ({act} lets a little through below zero where "
                f"ReLU gives exactly zero); {change}"), n
    return (f"Eq. 2, FFN(x) = max(0, xW₁ + b₁)W₂ + b₂, runs on each position separately through "
            f"**{n['d_ff']}** hidden units. On your sentence the ReLU sets **{pct(n['zeros'])}** of them to exactly zero; "
            f"{change}"), n


def _layernorm(trace, lens, cfg) -> tuple[str, dict]:
    L = len(trace.encoder.layers)
    s = _sub(trace, "enc", L, "self_attn")
    a, b = _np(s.norm_in), _np(s.norm_out)
    n = {"layer": L, "var_before": float(a.var(-1).mean()), "var_after": float(b.var(-1).mean()),
         "mean_after": float(b.mean(-1).mean())}
    form = ("this model is pre-LN: x + Sublayer(LayerNorm(x)), the paper's is LayerNorm(x + Sublayer(x))"
            if trace.norm_first else "every sub-layer's output is LayerNorm(x + Sublayer(x))")
    return (f"Section 3.1: {form}. In encoder layer {L} the "
            f"per-token variance is **{fmt(n['var_before'])}** before the norm and **{fmt(n['var_after'])}** after "
            f"it, with a mean of **{fmt(n['mean_after'])}**: each token's vector is re-centred and rescaled "
            f"(then by the learned gain and bias)."), n


def _memory(trace, lens, cfg) -> tuple[str, dict]:
    L = len(trace.encoder.layers)
    cos = _cos(_np(trace.encoder.layers[-1].output), _np(trace.encoder.embedding))
    toks = trace.meta["src_tokens"]
    n = {"layer": L, "cos": float(cos.mean()), "moved": toks[int(cos.argmin())], "moved_cos": float(cos.min())}
    return (f"After N = {L} layers (Section 3.1) the encoder's output is the memory every decoder layer reads. "
            f"Each token's vector kept a mean cosine of **{fmt(n['cos'])}** with its input embedding; "
            f"{_q(n['moved'])} moved furthest (cosine **{fmt(n['moved_cos'])}**), now carrying its context."), n


def _dec_embed(trace, lens, cfg) -> tuple[str, dict]:
    d = _np(trace.decoder.embedding)
    toks = trace.meta["decoder_input_tokens"]
    n = {"T": d.shape[0], "first": toks[0], "d_model": d.shape[1], "shared": bool(cfg.share_embeddings)}
    share = ("shares one embedding matrix between encoder, decoder and the final linear, as this model does"
             if n["shared"] else "shares one embedding matrix between encoder, decoder and the final linear; "
             "this model keeps them apart")
    return (f"Section 3.1: the decoder's input is the output \"shifted right\": its **{n['T']} pieces** start with "
            f"{_q(n['first'])} and each step sees only the pieces before it. Section 3.4 {share}. Here: a "
            f"**{n['T']} × {n['d_model']}** matrix."), n


def _dec_pe(trace, lens, cfg) -> tuple[str, dict]:
    x, s = _np(trace.decoder.input), _np(trace.decoder.scaled)
    n = {"T": x.shape[0], "norm": float(_rows(x).mean()), "cos": float(_cos(x, s).mean())}
    return (f"Section 3.5 again: the same scaling by √d_model and the same sinusoids, for positions 0 to "
            f"{n['T'] - 1}. The decoder's first layer reads rows of mean length **{fmt(n['norm'])}**, each at cosine "
            f"**{fmt(n['cos'])}** to its scaled embedding."), n


def _masked(trace, lens, cfg) -> tuple[str, dict]:
    s = _sub(trace, "dec", 1, "self_attn")
    T = int(s.stream_in.shape[1])
    n = {"T": T, "allowed": T * (T + 1) // 2, "pairs": T * T, "change": _residual(s)}
    return (f"Section 3.2.3: masked self-attention sets the scores of later positions to -∞ before the softmax, so "
            f"step i sees pieces 0..i only: **{n['allowed']} of the {n['pairs']}** query-key pairs of your "
            f"{T} decoder positions. This sub-layer changes the residual stream by **{pct(n['change'])}**."), n


def _cross(trace, lens, cfg) -> tuple[str, dict]:
    s = _sub(trace, "dec", 1, "cross_attn")
    T, S = int(s.stream_in.shape[1]), len(trace.meta["src_tokens"])
    n = {"T": T, "S": S, "change": _residual(s)}
    return (f"Section 3.2.3, encoder-decoder attention: queries come from the decoder, keys and values from the "
            f"encoder's memory, so each head weighs a **{n['T']} × {n['S']}** matrix (target x source). Here the "
            f"decoder reads the source: the stream changes by **{pct(n['change'])}** of its length."), n


def _lens(trace, lens, cfg) -> tuple[str, dict]:
    hits = lens.ids[:, :, 0] == np.asarray(trace.target[0].cpu())[None, :]  # (L, T): top-1 is the piece that came
    L, T = hits.shape
    first = [int(np.argmax(hits[:, 0])) + 1] if hits[:, 0].any() else []
    n = {"L": L, "T": T, "piece": lens.output_tokens[0], "first": first[0] if first else None,
         "layer1": int(hits[0].sum()), "last": int(hits[-1].sum())}
    where = (f"layer **{n['first']}** is the first whose lens predicts {_q(n['piece'])}" if first else
             f"no layer's lens puts {_q(n['piece'])} first")
    return (f"The logit lens applies the final linear and softmax (Section 3.4) to each decoder layer's output. At "
            f"step 0, {where}. Layer 1 already picks the right next piece at **{n['layer1']} of {T}** steps, "
            f"layer {L} at **{n['last']} of {T}**."), n


def chosen_log_probs(trace) -> np.ndarray:
    """``(T,)`` float log-probabilities of the pieces the output chose (the trace's target), step by step."""
    lp = _np(trace.log_probs)
    tgt = np.asarray(trace.target[0].cpu())
    return lp[np.arange(len(tgt)), tgt]


def chosen_probs(trace) -> np.ndarray:
    """``(T,)`` float32 probabilities of the chosen pieces: :func:`chosen_log_probs` exponentiated by torch, bit for
    bit the ``target_log_probs(pad_id).exp()`` of a separate teacher-forced pass over the same output."""
    import torch

    return torch.from_numpy(chosen_log_probs(trace)).exp().numpy()


def _softmax(trace, lens, cfg) -> tuple[str, dict]:
    p = np.exp(chosen_log_probs(trace))
    n = {"V": _np(trace.log_probs).shape[1], "piece": trace.meta["output_tokens"][0], "p0": float(p[0]), "mean_p": float(p.mean())}
    return (f"Section 3.4: a linear map to the **{n['V']}** pieces of the vocabulary and a softmax give the "
            f"next-piece probabilities. Your output's first piece {_q(n['piece'])} had probability "
            f"**{fmt(n['p0'], 3)}**; over all steps the chosen pieces averaged **{fmt(n['mean_p'], 3)}**."), n


def _search(trace, lens, cfg) -> tuple[str, dict]:
    chosen = chosen_log_probs(trace)
    n = {"log_p": float(chosen.sum()), "T": len(chosen)}
    return (f"Section 6.1: the output is not the argmax at each step but the result of beam search (beam size 4, "
            f"length penalty α = 0.6). The {n['T']} pieces you see have a total log-probability of "
            f"**{fmt(n['log_p'])}**; the tree below shows every hypothesis the search kept or pruned."), n


_STEPS: list[tuple[str, Callable]] = [
    ("Input embedding", _embed), ("× √d_model", _scale), ("Positional encoding", _pe),
    ("Multi-head self-attention", _enc_attn), ("Feed-forward network", _enc_ffn), ("Add & Norm", _layernorm),
    ("The encoder's memory", _memory), ("Output embedding, shifted right", _dec_embed),
    ("Decoder positions", _dec_pe), ("Masked multi-head attention", _masked),
    ("Encoder-decoder attention", _cross), ("The logit lens", _lens), ("Linear and softmax", _softmax),
    ("Beam search", _search)]

#: the step of the logit lens (the page opens its section there)
LENS_STEP = 1 + [title for title, _ in _STEPS].index("The logit lens")
#: the step of the beam search (the page opens the tree's section there)
TREE_STEP = 1 + [title for title, _ in _STEPS].index("Beam search")


def lesson_step(k: int, trace, lens, cfg) -> LessonStep:
    """Step ``k`` (1 to :data:`N_STEPS`) of the lesson on ``trace`` (batch item 0) and ``lens`` (its logit lens).

    Args:
        cfg: the model's config (``n_heads``, ``d_k`` are read).

    Raises:
        LessonInputError: ``k`` outside 1..N_STEPS.
    """
    if not isinstance(k, (int, np.integer)) or not 1 <= k <= N_STEPS:
        raise LessonInputError(f"the lesson has steps 1 to {N_STEPS}, got {k!r}")
    title, make = _STEPS[k - 1]
    markdown, numbers = make(trace, lens, cfg)
    return LessonStep(int(k), step_blocks(len(trace.encoder.layers))[k - 1], title, markdown, numbers)
