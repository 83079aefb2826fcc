"""Greedy and beam search decoding (Section 6.1) with a key/value cache and attention capture.

Beam search follows the paper's setting: beam size 4, length penalty alpha = 0.6 in the form of Wu et al.
(2016, GNMT), ``lp(Y) = ((5 + |Y|) / 6) ** alpha``, hypotheses ranked by ``log P(Y|X) / lp(Y)``, maximum
output length = input length + 50, stopping early when possible (a sentence is done once it has
``beam_size`` finished hypotheses, as in fairseq). In a batch, a sentence that is done leaves it: its rows are
dropped, so the remaining steps cost only what the unfinished sentences need (docs/benchmarks.md, "Classroom load
test, third round"). Rows of one sentence never mix with another's, so this changes no hypothesis; the other
sentences' numbers move by float32 rounding only (other matrix shapes), as any batching does.

With ``use_cache=True`` each step feeds only the newest token: decoder self-attention keys/values of
earlier positions are kept in a :class:`~aiayn.model.transformer.DecoderCache` and encoder keys/values for the
cross-attention are projected once. With ``use_cache=False`` every step recomputes the whole prefix. Both
give the same hypotheses.

With ``return_attention=True`` the attention row of each new decoder position is kept at every step and,
at the end, the rows of each returned hypothesis are followed back through the beam's back-pointers and
stitched into full maps: decoder ``(L, 1, H, T, T)`` (zeros above the diagonal), cross ``(L, 1, H, T, S)``.
They equal the maps of a teacher-forced forward pass over the same output.

``head_mask`` ``(3, L, H)`` (head ablation, Michel et al. 2019; see :meth:`Transformer.forward`) is validated
once and passed to the encoder and to every decoding step, with or without the cache.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import torch
from torch import Tensor

from .model.maps import AttentionMaps
from .model.transformer import DecoderCache, EncoderOutput, Transformer


@dataclass
class Hypothesis:
    """One decoded output.

    Attributes:
        tokens: predicted ids y_1..y_T (ending with EOS when ``finished``), without BOS.
        log_prob: ``log P(Y | X)``, natural log, summed over the T predictions.
        score: ``log_prob / lp(T)``, the length-normalised score beams are ranked by.
        finished: True if the hypothesis ended with EOS; False if it hit the maximum length.
        attention: maps for this hypothesis alone (B=1) when requested, else None.
    """

    tokens: list[int]
    log_prob: float
    score: float
    finished: bool
    attention: AttentionMaps | None = None


#: beam option -> (name in messages, command-line flag, the rule it breaks)
_BEAM_OPTIONS = {
    "beam_size": ("beam_size", "--beam-size", "must be >= 1 (a whole number; paper: 4)"),
    "length_penalty": ("length_penalty (alpha)", "--alpha",
                       "must be a finite number >= 0 (paper: 0.6; 0 disables the length penalty)"),
    "max_len": ("max_len", "--max-len", "must be >= 1 (a whole number of output pieces)"),
    "n_best": ("n_best", "--n-best", "must be >= 1 (a whole number)"),
}


def _valid_beam_option(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if name == "length_penalty":
        return isinstance(value, (int, float)) and math.isfinite(value) and value >= 0
    return isinstance(value, int) and value >= 1


def beam_option_error(*, cli: bool = False, **options: Any) -> str | None:
    """The message for the first bad beam option among ``beam_size``, ``length_penalty`` (alpha), ``max_len`` and
    ``n_best`` (keywords; a None value is not checked), or None when all are valid. ``cli`` names the command-line
    flags (``--beam-size``, ``--alpha``, ``--max-len``, ``--n-best``) instead of the keywords.

    Raises:
        TypeError: an option that is not one of the four.
    """
    for name, value in options.items():
        if name not in _BEAM_OPTIONS:
            raise TypeError(f"unknown beam option {name!r}; known: {', '.join(_BEAM_OPTIONS)}")
        if value is not None and not _valid_beam_option(name, value):
            label, flag, rule = _BEAM_OPTIONS[name]
            return f"{flag if cli else label} {rule}, got {value!r}"
    return None


def check_beam_options(**options: Any) -> None:
    """:func:`beam_option_error` as an exception.

    Raises:
        ValueError: a bad option (the message names it).
    """
    message = beam_option_error(**options)
    if message:
        raise ValueError(message)


def length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """GNMT length penalty ``((5 + length) / 6) ** alpha`` (Wu et al. 2016, used in Section 6.1)."""
    return ((5.0 + length) / 6.0) ** alpha


def _max_lengths(src: Tensor, pad_id: int, max_len: int | None, extra: int, limit: int) -> list[int]:
    """Per sentence: ``max_len`` if given, else source length + ``extra`` (Section 6.1); capped so that
    BOS + outputs fit the model's positions (``limit``)."""
    lengths = (src != pad_id).sum(-1).tolist()
    return [max(1, min(max_len if max_len is not None else n + extra, limit - 1)) for n in lengths]


class _AttentionTrace:
    """Per-step attention rows plus beam back-pointers, stitched into full maps at the end."""

    def __init__(self) -> None:
        self.self_rows: list[Tensor] = []  # step t: (L, N, H, t + 1)
        self.cross_rows: list[Tensor] = []  # step t: (L, N, H, S)
        self.origins: list[Tensor] = []  # after step t: (N,) row in step t that new row j came from

    def add(self, self_weights: Tensor, cross_weights: Tensor) -> None:
        self.self_rows.append(self_weights[:, :, :, -1].detach().float().cpu())
        self.cross_rows.append(cross_weights[:, :, :, -1].detach().float().cpu())

    def stitch(self, step: int, row: int, enc: EncoderOutput, sentence: int) -> AttentionMaps:
        """Maps of the hypothesis whose last prediction came from ``row`` at ``step``."""
        T = step + 1
        rows_self, rows_cross = [], []
        r = row
        for s in range(step, -1, -1):
            rows_self.append(self.self_rows[s][:, r])
            rows_cross.append(self.cross_rows[s][:, r])
            if s > 0:
                r = int(self.origins[s - 1][r])
        rows_self.reverse()
        rows_cross.reverse()
        L, H = rows_self[0].shape[0], rows_self[0].shape[1]
        dec = torch.zeros(L, 1, H, T, T)
        for s, rs in enumerate(rows_self):
            dec[:, 0, :, s, : s + 1] = rs
        s_len = int(enc.src_mask[sentence].sum())
        cross = torch.stack(rows_cross, dim=2)[:, None, :, :, :s_len]  # (L, 1, H, T, S)
        encoder = enc.weights[:, sentence : sentence + 1, :, :s_len, :s_len].detach().float().cpu() if enc.weights is not None else None
        return AttentionMaps(encoder=encoder, decoder=dec, cross=cross, src_lengths=[s_len], tgt_lengths=[T])


def _step(model: Transformer, tokens: Tensor, enc: EncoderOutput, cache, use_cache: bool, capture: bool,
          head_mask: Tensor | None = None):
    """Log-probabilities of the next token for every row, ``(N, V)``, plus updated cache and attention."""
    if use_cache:
        out = model.decode(tokens[:, -1:], enc, need_weights=capture, cache=cache, head_mask=head_mask)
    else:
        out = model.decode(tokens, enc, need_weights=capture, head_mask=head_mask)
    logp = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
    # Never predict padding or BOS (not renormalised: scores stay the model's own log-probabilities).
    logp[:, model.cfg.pad_id] = float("-inf")
    logp[:, model.cfg.decoder_start_id] = float("-inf")  # the start token: BOS (ours), pad (Opus-MT)
    return logp, out


@torch.inference_mode()
def greedy_decode(
    model: Transformer,
    src: Tensor,
    *,
    max_len: int | None = None,
    max_len_extra: int = 50,
    length_penalty_alpha: float = 0.6,
    use_cache: bool = True,
    return_attention: bool = False,
    head_mask: Tensor | None = None,
    pick: Callable[[Tensor], Tensor] | None = None,
) -> list[Hypothesis]:
    """Batched greedy decoding: at each step the most probable next token, until EOS or the max length.
    With ``pick`` another rule chooses each next token (ancestral sampling, :mod:`aiayn.sampling`).

    Args:
        model: the Transformer (put it in eval mode yourself; no dropout is wanted at inference).
        src: ``(B, S)`` int64 source ids, padded with ``pad_id``.
        max_len: maximum number of output tokens; default source length + ``max_len_extra`` (Section 6.1).
        length_penalty_alpha: only used to report ``score`` comparably with beam search.
        use_cache: incremental decoding with the key/value cache.
        return_attention: stitch each output's attention maps (B=1 each).
        head_mask: ``(3, L, H)`` head mask (encoder, decoder self, cross; 1 keeps a head, 0 removes its
            output, a float scales it), or None; see :meth:`Transformer.forward`.
        pick: ``(N, V)`` float log-probabilities (``-inf`` on padding and the start piece) -> ``(N,)`` int64 ids;
            None is the argmax (greedy). ``log_prob`` / ``score`` stay the model's own log-probabilities of the
            picked ids.

    Returns:
        one :class:`Hypothesis` per sentence.

    Raises:
        ValueError: a bad ``head_mask``.
    """
    cfg = model.cfg
    B = src.size(0)
    head_mask = model.check_head_mask(head_mask)
    enc = model.encode(src, need_weights=return_attention, head_mask=head_mask)
    limits = _max_lengths(src, cfg.pad_id, max_len, max_len_extra, cfg.max_len)
    tokens = torch.full((B, 1), cfg.decoder_start_id, dtype=torch.long, device=src.device)
    cache = model.init_cache(enc) if use_cache else None
    trace = _AttentionTrace() if return_attention else None
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    log_prob = torch.zeros(B, dtype=torch.float64)
    output_ids: list[list[int]] = [[] for _ in range(B)]
    end_step = [0] * B
    finished = [False] * B
    for t in range(max(limits)):
        logp, out = _step(model, tokens, enc, cache, use_cache, return_attention, head_mask)
        cache = out.cache
        if trace is not None:
            trace.add(out.self_weights, out.cross_weights)
            trace.origins.append(torch.arange(B))
        nxt = logp.argmax(-1) if pick is None else pick(logp)
        best = logp.gather(1, nxt[:, None]).squeeze(1).double().cpu()
        for b in range(B):
            if done[b]:
                continue
            w = int(nxt[b])
            output_ids[b].append(w)
            log_prob[b] += best[b]
            end_step[b] = t
            if w == cfg.eos_id:
                finished[b] = True
                done[b] = True
            elif len(output_ids[b]) >= limits[b]:
                done[b] = True
        if bool(done.all()):
            break
        nxt = torch.where(done, torch.full_like(nxt, cfg.eos_id), nxt)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    hyps = []
    for b in range(B):
        lp = float(log_prob[b])
        att = trace.stitch(end_step[b], b, enc, b) if trace is not None else None
        hyps.append(Hypothesis(output_ids[b], lp, lp / length_penalty(len(output_ids[b]), length_penalty_alpha), finished[b], att))
    return hyps


class EndedHypothesis(NamedTuple):
    """A hypothesis that left the beam (kept until the sentence is done, then ranked by ``score``).

    Attributes:
        score: ``log_prob / lp(len(tokens))``, what the n-best list is sorted by.
        log_prob: ``log P(Y | X)``, natural log.
        tokens: predicted ids, without the start piece.
        finished: it ended with EOS (False: cut at the maximum length).
        step: the decoding step of its last prediction; row: its row at that step (to stitch its attention).
    """

    score: float
    log_prob: float
    tokens: list[int]
    finished: bool
    step: int
    row: int


@dataclass
class _Beams:
    """The rows still decoding: ``active[i]`` (a sentence) owns rows ``i*K .. i*K + K - 1``; a sentence that is done
    leaves (its rows are dropped), so a batch stops paying for sentences that are done."""

    active: list[int]
    scores: Tensor  # (A, K) float64 on the CPU: log-probabilities of the live rows
    history: list[list[int]]  # per row: the ids predicted so far
    tokens: Tensor  # (A * K, t + 1) int64 on the device: the decoder input so far
    enc: EncoderOutput
    cache: DecoderCache | None


@dataclass
class _Choice:
    """What each row of the next step continues: ``rows`` (N,) the row of this step it came from, ``tok`` (N,) its
    new id, ``scores`` (A, K) and ``history`` as in :class:`_Beams`."""

    rows: Tensor
    tok: Tensor
    scores: Tensor
    history: list[list[int]]


def _expand_sentence(i: int, top_scores: Tensor, top_idx: Tensor, V: int, K: int, t: int, last: bool, alpha: float,
                     eos: int, history: list[list[int]], choice: _Choice, ended: list[EndedHypothesis]) -> int:
    """Walk sentence ``i``'s best candidates (``top_scores`` / ``top_idx`` ``(A, 2K)``, best first): an EOS among the
    top K ends a hypothesis (as in fairseq), at the last step every candidate ends, the others fill the next step's
    ``K`` rows of ``choice``. Returns how many rows stay alive."""
    alive = 0
    for rank in range(top_idx.size(1)):
        s = float(top_scores[i, rank])
        if s == float("-inf"):
            break
        k, w = divmod(int(top_idx[i, rank]), V)
        row = i * K + k
        toks = history[row] + [w]
        if w == eos:
            if rank < K:
                ended.append(EndedHypothesis(s / length_penalty(len(toks), alpha), s, toks, True, t, row))
            continue
        if last:
            ended.append(EndedHypothesis(s / length_penalty(len(toks), alpha), s, toks, False, t, row))
            if sum(not e.finished for e in ended) >= K:
                break
            continue
        j = i * K + alive
        choice.rows[j], choice.tok[j], choice.scores[i, alive], choice.history[j] = row, w, s, toks
        alive += 1
        if alive == K:
            break
    return alive


def _choose(beams: _Beams, logp: Tensor, t: int, limits: list[int], alpha: float, eos: int,
            ended: list[list[EndedHypothesis]], done: list[bool]) -> _Choice:
    """One step of beam search over ``logp`` ``(A * K, V)``: the ``2K`` best continuations per sentence, ended
    hypotheses moved to ``ended``, sentences that are done marked in ``done``."""
    A, K = beams.scores.shape
    V, N = logp.size(-1), A * K
    cand = (beams.scores.to(device=logp.device, dtype=logp.dtype)[:, :, None] + logp.view(A, K, V)).view(A, K * V)
    top_scores, top_idx = cand.topk(min(2 * K, K * V), dim=-1)
    top_scores, top_idx = top_scores.double().cpu(), top_idx.cpu()
    choice = _Choice(torch.arange(N), torch.full((N,), eos, dtype=torch.long),
                     torch.full((A, K), float("-inf"), dtype=torch.float64), list(beams.history))
    for i, b in enumerate(beams.active):
        last = t + 1 >= limits[b]
        alive = _expand_sentence(i, top_scores, top_idx, V, K, t, last, alpha, eos, beams.history, choice, ended[b])
        if len(ended[b]) >= K or last or alive == 0:
            done[b] = True
    return choice


class BeamRecord(NamedTuple):
    """One candidate beam search weighed (``recorder`` of :func:`beam_search`).

    At each step the search ranks every continuation of the live hypotheses by cumulative log-probability and
    walks the ``2K`` best (K = beam size; continuations of ``-inf`` left out): ``</s>`` among the K best ends a
    hypothesis (``"finished"``); at the last allowed step every candidate it reaches ends (``"cut"``); the others
    fill the K rows of the next step (``"kept"``) until they are full. The rest of the ``2K`` fell out of the beam
    (``"pruned"``).

    Attributes:
        sentence: index of the sentence in the batch.
        step: output length of the candidate (1 for the first predicted piece).
        tokens: the candidate's ids (without the start piece); ``tokens[:-1]`` is its parent, a kept candidate of
            ``step - 1`` (the empty tuple: the start piece).
        log_prob: cumulative ``log P(tokens | X)``, natural log, as the search ranked it.
        step_log_prob: ``log p(tokens[-1] | tokens[:-1], X)``, this step's own.
        status: ``"kept"``, ``"finished"``, ``"cut"`` or ``"pruned"``.
        score: ``log_prob / lp(step)`` for ``"finished"`` and ``"cut"`` (what the n-best list ranks), else None.
    """

    sentence: int
    step: int
    tokens: tuple[int, ...]
    log_prob: float
    step_log_prob: float
    status: str
    score: float | None


def _record(recorder: list, beams: _Beams, choice: _Choice, logp: Tensor, t: int,
            ended: list[list[EndedHypothesis]], n_ended: list[int]) -> None:
    """Append a :class:`BeamRecord` per candidate of step ``t`` that :func:`_choose` weighed; ``n_ended``: how many
    ended hypotheses each sentence had before the step."""
    A, K = beams.scores.shape
    V = logp.size(-1)
    cand = (beams.scores.to(device=logp.device, dtype=logp.dtype)[:, :, None] + logp.view(A, K, V)).view(A, K * V)
    top_scores, top_idx = (x.cpu() for x in cand.topk(min(2 * K, K * V), dim=-1))
    for i, b in enumerate(beams.active):
        kept = {tuple(choice.history[i * K + a]) for a in range(K) if choice.scores[i, a] > float("-inf")}
        gone = {tuple(e.tokens): e for e in ended[b][n_ended[b]:]}
        for s, idx in zip(top_scores[i].double().tolist(), top_idx[i].tolist()):
            if s == float("-inf"):
                break
            k, w = divmod(idx, V)
            toks = tuple(beams.history[i * K + k]) + (w,)
            e = gone.get(toks)
            status = "kept" if toks in kept else ("pruned" if e is None else ("finished" if e.finished else "cut"))
            recorder.append(BeamRecord(b, t + 1, toks, s, float(logp[i * K + k, w]), status,
                                       None if e is None else e.score))


def _check_prefix(prefix: Sequence[Sequence[int]], B: int, limits: list[int], cfg) -> list[list[int]]:
    """``prefix`` as ``B`` lists of ints, checked (see :func:`beam_search`)."""
    if isinstance(prefix, (str, bytes)) or len(prefix) != B:
        raise ValueError(f"prefix must hold {B} id lists (one per sentence), got {prefix!r:.80}")
    banned = {cfg.pad_id: "padding", cfg.decoder_start_id: "the start piece", cfg.eos_id: "</s>"}
    out = []
    for b, ids in enumerate(prefix):
        ids = [int(i) for i in ids]
        for n, i in enumerate(ids):
            if n == len(ids) - 1 and i == cfg.eos_id:  # a finished hypothesis forced whole
                continue
            if not 0 <= i < cfg.vocab_size or i in banned:
                raise ValueError(f"prefix {b}: id {i} is {banned.get(i, f'outside the vocabulary [0, {cfg.vocab_size})')}"
                                 "; a prefix holds ordinary pieces")
        if len(ids) > limits[b]:
            raise ValueError(f"prefix {b} has {len(ids)} pieces but at most {limits[b]} output pieces are allowed")
        out.append(ids)
    return out


def _force(logp: Tensor, active: list[int], K: int, forced: list[list[int]], t: int) -> None:
    """In place: the rows of each sentence still within its prefix may only continue with the prefix's id at
    step ``t`` (its log-probability unchanged, every other id ``-inf``)."""
    for i, b in enumerate(active):
        if t < len(forced[b]):
            w = forced[b][t]
            rows = logp[i * K : (i + 1) * K]
            keep = rows[:, w].clone()
            rows.fill_(float("-inf"))
            rows[:, w] = keep


def _advance(beams: _Beams, choice: _Choice, done: list[bool], cache: DecoderCache | None,
             trace: _AttentionTrace | None) -> bool:
    """Move ``beams`` to the next step as ``choice`` says, dropping the rows of sentences that are done; ``cache``
    is the step's updated key/value cache (None without one). False when every sentence is done."""
    K = beams.scores.size(1)
    keep = [i for i, b in enumerate(beams.active) if not done[b]]
    if not keep:
        return False
    compact = len(keep) < len(beams.active)
    if compact:
        rows = torch.tensor([i * K + k for i in keep for k in range(K)])
        choice = _Choice(choice.rows[rows], choice.tok[rows], choice.scores[keep],
                         [choice.history[j] for j in rows.tolist()])
        beams.active = [beams.active[i] for i in keep]
    if trace is not None:
        trace.origins.append(choice.rows.clone())  # row of step t that each row of step t + 1 came from
    beams.history, beams.scores = choice.history, choice.scores
    idx = choice.rows.to(beams.tokens.device)
    beams.tokens = torch.cat([beams.tokens.index_select(0, idx), choice.tok.to(idx.device)[:, None]], dim=1)
    if compact:
        beams.enc = beams.enc.index_select(idx)
    if cache is not None:
        beams.cache = cache.index_select(idx, cross=compact)
    return True


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src: Tensor,
    *,
    beam_size: int = 4,
    length_penalty_alpha: float = 0.6,
    max_len: int | None = None,
    max_len_extra: int = 50,
    n_best: int = 1,
    use_cache: bool = True,
    return_attention: bool = False,
    head_mask: Tensor | None = None,
    prefix: Sequence[Sequence[int]] | None = None,
    recorder: list | None = None,
) -> list[list[Hypothesis]]:
    """Batched beam search (Section 6.1), best first.

    Args:
        model: the Transformer, in eval mode.
        src: ``(B, S)`` int64 source ids, padded with ``pad_id``.
        beam_size: hypotheses kept per sentence (paper: 4). ``beam_size=1`` equals greedy decoding.
        length_penalty_alpha: alpha of the GNMT length penalty (paper: 0.6); 0 disables it.
        max_len: maximum number of output tokens; default source length + ``max_len_extra`` (paper: +50).
        n_best: how many hypotheses to return per sentence (<= beam_size).
        use_cache: incremental decoding with the key/value cache (same results, faster).
        return_attention: stitch each returned hypothesis' attention maps.
        head_mask: ``(3, L, H)`` head mask (encoder, decoder self, cross; 1 keeps a head, 0 removes its
            output, a float scales it), or None; see :meth:`Transformer.forward`.
        prefix: prefix-constrained decoding: ``B`` id lists (one per sentence, may be empty); sentence ``b``'s
            first ``len(prefix[b])`` predictions are forced to them (each scored with the model's own
            log-probability), then the search is free. The hypotheses all start with the prefix; their maps
            cover the forced steps too. ``</s>`` may only end a prefix (that hypothesis is then the only one).
        recorder: a list the search appends one :class:`BeamRecord` to per candidate it weighs (the ``2K`` best
            continuations of each step, see :class:`BeamRecord`), or None (default: nothing recorded, nothing
            computed for it). :func:`aiayn.beam_tree.build_tree` makes a tree of them.

    Returns:
        ``B`` lists of ``n_best`` :class:`Hypothesis`, sorted by ``score`` (descending).

    Raises:
        ValueError: a bad beam option (:func:`check_beam_options`), ``n_best`` above ``beam_size``, a bad
            ``head_mask``, a bad ``prefix`` (not ``B`` lists, an id outside the vocabulary, padding, the start
            piece, ``</s>`` before the end, longer than the sentence's maximum output length).
    """
    check_beam_options(beam_size=beam_size, length_penalty=length_penalty_alpha, max_len=max_len, n_best=n_best)
    if n_best > beam_size:
        raise ValueError(f"n_best must be in [1, beam_size={beam_size}], got {n_best}")
    cfg = model.cfg
    B, K = src.size(0), beam_size
    head_mask = model.check_head_mask(head_mask)
    enc0 = model.encode(src, need_weights=return_attention, head_mask=head_mask)
    enc = EncoderOutput(enc0.memory, enc0.src_mask).index_select(torch.arange(B, device=src.device).repeat_interleave(K))
    scores = torch.full((B, K), float("-inf"), dtype=torch.float64)
    scores[:, 0] = 0.0  # all K rows start identical: expand only the first
    beams = _Beams(list(range(B)), scores, [[] for _ in range(B * K)],
                   torch.full((B * K, 1), cfg.decoder_start_id, dtype=torch.long, device=src.device), enc,
                   model.init_cache(enc) if use_cache else None)
    limits = _max_lengths(src, cfg.pad_id, max_len, max_len_extra, cfg.max_len)
    forced = _check_prefix(prefix, B, limits, cfg) if prefix is not None else None
    trace = _AttentionTrace() if return_attention else None  # the maps stay on enc0, for stitching
    ended: list[list[EndedHypothesis]] = [[] for _ in range(B)]
    done = [False] * B
    for t in range(max(limits)):
        logp, out = _step(model, beams.tokens, beams.enc, beams.cache, use_cache, return_attention, head_mask)
        if trace is not None:
            trace.add(out.self_weights, out.cross_weights)
        if forced is not None:
            _force(logp, beams.active, K, forced, t)
        n_ended = [len(e) for e in ended] if recorder is not None else []
        choice = _choose(beams, logp, t, limits, length_penalty_alpha, cfg.eos_id, ended, done)
        if recorder is not None:
            _record(recorder, beams, choice, logp, t, ended, n_ended)
        if not _advance(beams, choice, done, out.cache if use_cache else None, trace):
            break
    return [_n_best(ended[b], n_best, trace, enc0, b) for b in range(B)]


def _n_best(ended: list[EndedHypothesis], n_best: int, trace: _AttentionTrace | None, enc0: EncoderOutput,
            sentence: int) -> list[Hypothesis]:
    """The ``n_best`` highest-scoring ended hypotheses of ``sentence`` as :class:`Hypothesis`, with their stitched
    maps when traced."""
    ranked = sorted(ended, key=lambda e: -e.score)[:n_best]
    return [Hypothesis(e.tokens, e.log_prob, e.score, e.finished,
                       trace.stitch(e.step, e.row, enc0, sentence) if trace is not None else None) for e in ranked]
