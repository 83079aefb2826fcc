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
With ``next_k`` the same back-pointers carry each step's ``next_k`` most probable next pieces and the log-probability
of the piece taken (:class:`StepTopK`): the next-piece probabilities the explorer shows, equal to a teacher-forced
pass's up to float32 rounding, without running that pass (for a 58,101-piece vocabulary it cost about a fifth of a
class's batch; docs/benchmarks.md).

``head_mask`` ``(3, L, H)`` (head ablation, Michel et al. 2019; see :meth:`Transformer.forward`) is validated
once and passed to the encoder and to every decoding step, with or without the cache.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, NamedTuple, Sequence

import torch
from torch import Tensor

from .model.attention import KVCache
from .model.maps import AttentionMaps
from .model.transformer import DecoderCache, EncoderOutput, Transformer

#: an output projection at a serving precision (hidden states -> float32 logits), or None for the model's own
Projection = Callable[[Tensor], Tensor] | None


@dataclass
class Hypothesis:
    """One decoded output.

    Attributes:
        tokens: predicted ids y_1..y_T (ending with EOS when ``finished``), without BOS.
        log_prob: ``log P(Y | X)``, natural log, summed over the T predictions.
        score: ``log_prob / lp(T)``, the length-normalised score beams are ranked by.
        finished: True if the hypothesis ended with EOS; False if it hit the maximum length.
        attention: maps for this hypothesis alone (B=1) when requested, else None.
        next_pieces: the search's own most probable next pieces at each of its T positions (:class:`StepTopK`)
            when requested (``next_k``), else None.
    """

    tokens: list[int]
    log_prob: float
    score: float
    finished: bool
    attention: AttentionMaps | None = None
    next_pieces: "StepTopK | None" = None


class StepTopK(NamedTuple):
    """The model's most probable next pieces at each output position of one hypothesis, read from the log-softmax
    each beam step computes anyway (Section 3.4), so no second, teacher-forced pass is needed: row t is the
    distribution after the decoder was fed the start piece and ``tokens[:t]`` (what a teacher-forced pass over the
    hypothesis gives, up to float32 rounding). Taken before padding and the start piece are banned and before a
    forced prefix narrows the choice: the model's own distribution.

    Attributes:
        ids: ``(T, k)`` int64, most probable first.
        log_probs: ``(T, k)`` float32 natural-log probabilities of ``ids``.
        chosen_log_prob: ``(T,)`` float32 log-probability of the piece the hypothesis took at each position.
    """

    ids: Tensor
    log_probs: Tensor
    chosen_log_prob: Tensor


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
    """Per-step attention rows (``maps``) and top-``next_k`` next pieces plus beam back-pointers, stitched per
    hypothesis at the end."""

    def __init__(self, *, maps: bool = True, next_k: int = 0) -> None:
        self.maps, self.next_k = maps, next_k
        self.self_rows: list[Tensor] = []  # step t: (L, N, H, t + 1)
        self.cross_rows: list[Tensor] = []  # step t: (L, N, H, S)
        self.origins: list[Tensor] = []  # after step t: (N,) row in step t that new row j came from
        self.top: list[tuple[Tensor, Tensor]] = []  # step t: ids (N, k), log-probabilities (N, k)
        self.taken: list[dict[tuple[int, int], float]] = []  # step t: (row, id chosen from it) -> its log p

    def add(self, self_weights: Tensor, cross_weights: Tensor) -> None:
        self.self_rows.append(self_weights[:, :, :, -1].detach().float().cpu())
        self.cross_rows.append(cross_weights[:, :, :, -1].detach().float().cpu())

    def add_top(self, top: Any, k: int) -> None:
        """The first ``k`` of step ``t``'s ``torch.topk`` result over the rows' log-probabilities (sorted)."""
        self.top.append((top.indices[:, :k].cpu(), top.values[:, :k].float().cpu()))

    def add_taken(self, logp: Tensor, rows: Sequence[int], ids: Sequence[int]) -> None:
        """Remember ``logp[rows[j], ids[j]]``: the log-probability of each continuation step ``t`` chose."""
        values = logp[torch.tensor(rows, device=logp.device), torch.tensor(ids, device=logp.device)].float().tolist()
        self.taken.append(dict(zip(zip(rows, ids), values)))

    def _rows(self, step: int, row: int) -> list[int]:
        """The row at each step ``0 .. step`` of the hypothesis whose last prediction came from ``row`` at ``step``."""
        rows = [row]
        for s in range(step, 0, -1):
            rows.append(int(self.origins[s - 1][rows[-1]]))
        return rows[::-1]

    def stitch_next(self, step: int, row: int, tokens: Sequence[int]) -> StepTopK:
        """:class:`StepTopK` of the hypothesis ``tokens`` whose last prediction came from ``row`` at ``step``."""
        rows = self._rows(step, row)
        ids = torch.stack([self.top[s][0][r] for s, r in enumerate(rows)])
        log_probs = torch.stack([self.top[s][1][r] for s, r in enumerate(rows)])
        chosen = torch.tensor([self.taken[s][(r, int(tokens[s]))] for s, r in enumerate(rows)], dtype=torch.float32)
        return StepTopK(ids, log_probs, chosen)

    def stitch(self, step: int, row: int, enc: EncoderOutput, sentence: int) -> AttentionMaps | None:
        """Maps of the hypothesis whose last prediction came from ``row`` at ``step`` (None: maps not traced)."""
        if not self.maps:
            return None
        T = step + 1
        rows = self._rows(step, row)
        rows_self = [self.self_rows[s][:, r] for s, r in enumerate(rows)]
        rows_cross = [self.cross_rows[s][:, r] for s, r in enumerate(rows)]
        L, H = rows_self[0].shape[0], rows_self[0].shape[1]
        dec = torch.zeros(L, 1, H, T, T)
        for s, rs in enumerate(rows_self):
            dec[:, 0, :, s, : s + 1] = rs
        s_len = int(enc.src_mask[sentence].sum())
        # Copies, not views: a view keeps (and pickles, e.g. into the app's result cache) the storage of the whole
        # batch's maps, for a class of 28 sentences about 28 times this sentence's own
        cross = torch.stack(rows_cross, dim=2)[:, None, :, :, :s_len].clone()  # (L, 1, H, T, S)
        encoder = (enc.weights[:, sentence : sentence + 1, :, :s_len, :s_len].detach().float().cpu().clone()
                   if enc.weights is not None else None)
        return AttentionMaps(encoder=encoder, decoder=dec, cross=cross, src_lengths=[s_len], tgt_lengths=[T])


class _Top(NamedTuple):
    """A ``torch.topk`` result: ``values``, ``indices``."""

    values: Tensor
    indices: Tensor


def _first_step(model: Transformer, tokens: Tensor, memory: EncoderOutput, cache: DecoderCache | None, rows: Tensor,
                use_cache: bool, capture: bool, head_mask: Tensor | None, top_k: int, project: Projection = None):
    """:func:`_step` for beam search's first step, where the K rows of a sentence are identical (the start piece
    over the same source; only the first is expanded): one row per sentence is run (``tokens`` ``(B, 1)``,
    ``memory`` and ``cache`` of B rows), then copied to its K rows (``rows`` ``(B * K,)``, the sentence of each row),
    the attention, the best pieces and the key/value cache with them (the cross-attention keys and values thus
    projected once per sentence and laid out contiguously). ``logits`` stay those of the B rows."""
    logp, out, top = _step(model, tokens, memory, cache, use_cache, capture, head_mask, top_k, project)
    pick = (lambda x, dim=0: None if x is None else x.index_select(dim, rows))
    out = replace(out, self_weights=pick(out.self_weights, 1), cross_weights=pick(out.cross_weights, 1),
                  cache=None if out.cache is None else out.cache.index_select(rows))
    return pick(logp), out, _Top(pick(top.values), pick(top.indices))


def _init_cache(model: Transformer, enc: EncoderOutput) -> DecoderCache:
    """:meth:`Transformer.init_cache` with the encoder keys and values of every cross-attention laid out
    contiguously, once: as head-split views of one projection ``(B, H, S, d_k)`` they cannot be folded into a batched
    matrix product as they are, so every step's ``q k^T`` and ``weights v`` copied all of them again (the same values;
    only the order of the float32 sums may differ)."""
    cache = model.init_cache(enc)
    cross = [KVCache(c.k.contiguous(), c.v.contiguous()) for c in cache.cross_kv]
    return DecoderCache(cache.self_kv, cross, cache.length)


#: pieces per block of :func:`row_topk`: 64 was fastest of 64, 128 and 256 for 112 rows of 58,101 (docs/benchmarks.md)
TOPK_BLOCK = 64


def row_topk(x: Tensor, k: int, block: int = TOPK_BLOCK) -> _Top:
    """The ``k`` largest entries of each row of ``x`` ``(N, V)`` float, sorted, as ``torch.topk(x, k, dim=-1)`` gives
    them: ``values`` ``(N, k)`` (same dtype), ``indices`` ``(N, k)`` int64 into ``V``.

    Exact, and cheaper than one ``torch.topk`` over a large vocabulary: each row is cut into blocks of ``block``
    entries (plus a shorter tail), the ``k`` blocks with the largest maxima are kept, and ``torch.topk`` ranks only
    their ``k * block`` entries and the tail. A row's ``k`` best entries always lie in those blocks: a block holding
    one of them has a maximum at least that large, and fewer than ``k`` entries (so fewer than ``k`` blocks) are
    larger. Equal values may come in another order than ``torch.topk``'s (its own order for ties is unspecified).
    Each row is ranked alone, so a row's result does not depend on the other rows (a class's batch gives a lone
    run's). Small vocabularies (fewer than ``4k`` blocks) use ``torch.topk`` itself.

    Raises:
        RuntimeError: from ``torch.topk`` when ``k`` exceeds ``V``.
    """
    N, V = x.shape
    n = V // block
    if n < 4 * k:
        return x.topk(k, dim=-1)
    blocks = x[:, : n * block].view(N, n, block)
    best = blocks.amax(dim=-1).topk(k, dim=-1).indices                               # (N, k) block numbers
    kept = blocks.gather(1, best[:, :, None].expand(N, k, block)).view(N, k * block)
    ids = (best[:, :, None] * block + torch.arange(block, device=x.device)).view(N, k * block)
    tail = torch.arange(n * block, V, device=x.device).expand(N, V - n * block)
    top = torch.cat([kept, x[:, n * block:]], dim=1).topk(k, dim=-1)
    return _Top(top.values, torch.cat([ids, tail], dim=1).gather(1, top.indices))


def _step(model: Transformer, tokens: Tensor, enc: EncoderOutput, cache, use_cache: bool, capture: bool,
          head_mask: Tensor | None = None, top_k: int = 0, project: Projection = None):
    """Log-probabilities of the next token for every row, ``(N, V)``, plus updated cache and attention, and (for
    ``top_k`` > 0) the sorted ``torch.topk`` of each row's own log-probabilities, taken before the bans below.
    ``project``: the output projection at a serving precision (``Transformer.decode``), None: the model's own."""
    if use_cache:
        out = model.decode(tokens[:, -1:], enc, need_weights=capture, cache=cache, head_mask=head_mask, project=project)
    else:
        out = model.decode(tokens, enc, need_weights=capture, head_mask=head_mask, project=project)
    logp = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
    top = row_topk(logp, min(top_k, logp.size(-1))) if top_k > 0 else None
    # Never predict padding or BOS (not renormalised: scores stay the model's own log-probabilities).
    # the start token: BOS (ours), pad (Opus-MT); a language tag is no output id at all (Transformer.project)
    logp[:, list(model.cfg.never_predicted)] = float("-inf")
    return logp, out, top


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
    project: Projection = None,
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
        project: the output projection at a serving precision, hidden states ``(N, 1, D)`` -> float32 logits
            ``(N, 1, V)`` (:attr:`aiayn.model.projection.OutputProjection.function`); None: float32 (the model's).

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
    cache = _init_cache(model, enc) if use_cache else None
    trace = _AttentionTrace() if return_attention else None
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    log_prob = torch.zeros(B, dtype=torch.float64)
    output_ids: list[list[int]] = [[] for _ in range(B)]
    end_step = [0] * B
    finished = [False] * B
    for t in range(max(limits)):
        logp, out, _ = _step(model, tokens, enc, cache, use_cache, return_attention, head_mask, 0, project)
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


class _Candidates(NamedTuple):
    """The ``2K`` best continuations of each sentence at one step, best first: ``scores`` ``(A, 2K)`` float64
    cumulative log-probabilities (``-inf``: none), ``idx`` ``(A, 2K)`` int64 ``k * V + id`` (``k``: the sentence's
    row it continues), ``V`` the vocabulary size."""

    scores: Tensor
    idx: Tensor
    V: int


def _candidates(beams: _Beams, top: Any, V: int, banned: tuple[int, ...], forced: list[list[int]] | None,
                logp: Tensor, t: int) -> _Candidates:
    """Each sentence's ``2K`` best continuations, ranked by cumulative log-probability, from each row's best pieces
    ``top`` (``torch.topk`` of the rows' log-probabilities, at least ``2K + len(banned)`` per row): a continuation
    among a sentence's ``2K`` best is among its own row's ``2K`` best, so ranking ``K x (2K + 2)`` candidates gives
    what ranking all ``K x V`` gave (two candidates of exactly equal score may come in another order), without a
    second pass over the ``(A * K, V)`` scores. ``banned`` pieces (padding, the start piece) are never candidates;
    the rows of a sentence still within its forced prefix (``forced``, step ``t``) have one: the prefix's piece, with
    its log-probability from ``logp``."""
    A, K = beams.scores.shape
    vals, ids = top.values.clone(), top.indices.clone()
    for b in banned:
        vals.masked_fill_(ids == b, float("-inf"))
    for i, b in enumerate(beams.active if forced is not None else []):
        if t < len(forced[b]):
            rows, w = slice(i * K, (i + 1) * K), forced[b][t]
            vals[rows] = float("-inf")
            vals[rows, 0], ids[rows, 0] = logp[rows, w], w
    c = vals.size(-1)
    cand = (beams.scores.to(device=vals.device, dtype=vals.dtype)[:, :, None] + vals.view(A, K, c)).view(A, K * c)
    scores, pos = cand.topk(min(2 * K, K * c), dim=-1)
    idx = torch.div(pos, c, rounding_mode="floor") * V + ids.view(A, K * c).gather(1, pos)
    return _Candidates(scores.double().cpu(), idx.cpu(), V)


def _choose(beams: _Beams, cands: _Candidates, t: int, limits: list[int], alpha: float, eos: int,
            ended: list[list[EndedHypothesis]], done: list[bool]) -> _Choice:
    """One step of beam search over the ``2K`` best continuations per sentence (:func:`_candidates`): ended
    hypotheses moved to ``ended``, sentences that are done marked in ``done``."""
    A, K = beams.scores.shape
    V, N = cands.V, A * K
    top_scores, top_idx = cands.scores, cands.idx
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


def _record(recorder: list, beams: _Beams, choice: _Choice, cands: _Candidates, logp: Tensor, t: int,
            ended: list[list[EndedHypothesis]], n_ended: list[int]) -> None:
    """Append a :class:`BeamRecord` per candidate of step ``t`` that :func:`_choose` weighed; ``n_ended``: how many
    ended hypotheses each sentence had before the step."""
    K = beams.scores.size(1)
    V, top_scores, top_idx = cands.V, cands.scores, cands.idx
    for i, b in enumerate(beams.active):
        kept = {tuple(choice.history[i * K + a]) for a in range(K) if choice.scores[i, a] > float("-inf")}
        gone = {tuple(e.tokens): e for e in ended[b][n_ended[b]:]}
        for s, idx in zip(top_scores[i].tolist(), top_idx[i].tolist()):
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
    # the start piece, not the decoder's start id: with a language or domain tag that is no piece at all
    banned = {cfg.pad_id: "padding", cfg.start_piece_id: "the start piece", cfg.eos_id: "</s>"}
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
    next_k: int = 0,
    project: Projection = None,
    encoded: EncoderOutput | None = None,
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
        next_k: for ``next_k`` > 0, each returned hypothesis' ``next_pieces``: the ``next_k`` most probable next
            pieces at each of its positions and the log-probability of the piece it took (:class:`StepTopK`), read
            from each step's own log-softmax along the back-pointers (what a teacher-forced pass over the output
            gives, without running one); 0 (default): None.
        project: the output projection at a serving precision, as :func:`greedy_decode`'s; None: float32.
        encoded: ``src``'s encoder output, computed beforehand (e.g. while a class gathers, sentences encoded apart
            and joined by :meth:`EncoderOutput.stack`), with its maps when ``return_attention``; None (default): encoded here.
            Its ``src_mask`` must be ``src != pad_id``; ``head_mask`` must then leave the encoder as it was.

    Returns:
        ``B`` lists of ``n_best`` :class:`Hypothesis`, sorted by ``score`` (descending).

    Raises:
        ValueError: a bad beam option (:func:`check_beam_options`), ``n_best`` above ``beam_size``, a bad
            ``head_mask``, a bad ``prefix`` (not ``B`` lists, an id outside the vocabulary, padding, the start
            piece, ``</s>`` before the end, longer than the sentence's maximum output length), ``next_k`` not a
            whole number >= 0, an ``encoded`` that is not ``src``'s (its mask differs) or lacks the maps
            ``return_attention`` needs.
    """
    check_beam_options(beam_size=beam_size, length_penalty=length_penalty_alpha, max_len=max_len, n_best=n_best)
    if not isinstance(next_k, int) or isinstance(next_k, bool) or next_k < 0:
        raise ValueError(f"next_k must be a whole number >= 0 (0: no next pieces), got {next_k!r}")
    if n_best > beam_size:
        raise ValueError(f"n_best must be in [1, beam_size={beam_size}], got {n_best}")
    cfg = model.cfg
    B, K = src.size(0), beam_size
    head_mask = model.check_head_mask(head_mask)
    enc0 = _check_encoded(encoded, src, cfg.pad_id, return_attention) if encoded is not None else \
        model.encode(src, need_weights=return_attention, head_mask=head_mask)
    memory = EncoderOutput(enc0.memory, enc0.src_mask)
    rows = torch.arange(B, device=src.device).repeat_interleave(K)  # sentence b owns rows b*K .. b*K + K - 1
    scores = torch.full((B, K), float("-inf"), dtype=torch.float64)
    scores[:, 0] = 0.0  # all K rows start identical: expand only the first
    # the cache starts with one row per sentence: the first step runs those and copies them to the K rows
    beams = _Beams(list(range(B)), scores, [[] for _ in range(B * K)],
                   torch.full((B * K, 1), cfg.decoder_start_id, dtype=torch.long, device=src.device),
                   memory.index_select(rows), model.init_cache(memory) if use_cache else None)
    limits = _max_lengths(src, cfg.pad_id, max_len, max_len_extra, cfg.max_len)
    forced = _check_prefix(prefix, B, limits, cfg) if prefix is not None else None
    # the maps stay on enc0, for stitching
    trace = _AttentionTrace(maps=return_attention, next_k=next_k) if return_attention or next_k else None
    ended: list[list[EndedHypothesis]] = [[] for _ in range(B)]
    done = [False] * B
    banned = cfg.never_predicted  # never predicted (see _step)
    for t in range(max(limits)):
        if t == 0:
            logp, out, top = _first_step(model, beams.tokens[::K], memory, beams.cache, rows, use_cache,
                                         return_attention, head_mask, max(next_k, 2 * K + len(banned)), project)
        else:
            logp, out, top = _step(model, beams.tokens, beams.enc, beams.cache, use_cache, return_attention,
                                   head_mask, max(next_k, 2 * K + len(banned)), project)
        cands = _candidates(beams, top, logp.size(-1), banned, forced, logp, t)
        n_ended = [len(e) for e in ended]
        choice = _choose(beams, cands, t, limits, length_penalty_alpha, cfg.eos_id, ended, done)
        if trace is not None:
            _trace_step(trace, out, top, logp, choice, [e for b in beams.active for e in ended[b][n_ended[b]:]])
        if recorder is not None:
            _record(recorder, beams, choice, cands, logp, t, ended, n_ended)
        if not _advance(beams, choice, done, out.cache if use_cache else None, trace):
            break
    return [_n_best(ended[b], n_best, trace, enc0, b) for b in range(B)]


def _check_encoded(encoded: EncoderOutput, src: Tensor, pad_id: int, need_weights: bool) -> EncoderOutput:
    """``encoded`` when it is ``src``'s encoder output (same sentences and padding, maps when needed)."""
    if encoded.src_mask.shape != src.shape or not torch.equal(encoded.src_mask.to(src.device), src != pad_id):
        raise ValueError(f"encoded is not the encoder output of src: its mask is {tuple(encoded.src_mask.shape)}, "
                         f"src is {tuple(src.shape)} (or their padding differs)")
    if need_weights and encoded.weights is None:
        raise ValueError("encoded has no encoder maps, which return_attention needs (encode with need_weights=True)")
    return encoded


def _n_best(ended: list[EndedHypothesis], n_best: int, trace: _AttentionTrace | None, enc0: EncoderOutput,
            sentence: int) -> list[Hypothesis]:
    """The ``n_best`` highest-scoring ended hypotheses of ``sentence`` as :class:`Hypothesis`, with their stitched
    maps when traced."""
    ranked = sorted(ended, key=lambda e: -e.score)[:n_best]
    if trace is None:
        return [Hypothesis(e.tokens, e.log_prob, e.score, e.finished) for e in ranked]
    return [Hypothesis(e.tokens, e.log_prob, e.score, e.finished, trace.stitch(e.step, e.row, enc0, sentence),
                       trace.stitch_next(e.step, e.row, e.tokens) if trace.next_k else None) for e in ranked]


def _trace_step(trace: _AttentionTrace, out: Any, top: Any, logp: Tensor, choice: _Choice,
                new_ended: list[EndedHypothesis]) -> None:
    """Keep what stitching needs of one step: the new decoder position's attention rows, the rows' top-k next
    pieces and the log-probability of every continuation the step chose (kept rows and hypotheses that ended)."""
    if trace.maps:
        trace.add(out.self_weights, out.cross_weights)
    if trace.next_k:
        trace.add_top(top, trace.next_k)
        trace.add_taken(logp, choice.rows.tolist() + [e.row for e in new_ended],
                        choice.tok.tolist() + [e.tokens[-1] for e in new_ended])
