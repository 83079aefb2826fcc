"""Attention across training: at every saved run state the loop records the attention maps
(encoder self-attention, masked decoder self-attention and cross-attention of Section 3.2.3, every layer and
head) of a fixed handful of curated sentences (:func:`aiayn.examples.sentence_pairs`, teacher-forced on their
references) into one small file of the run, ``attention_history.safetensors``, which ``aiayn average`` copies
into the exported checkpoint; :func:`load_history` reads it back (numpy only, no torch) for the explorer's
"Across training" tab, where the student watches alignments emerge.

File format (one file, so that one atomic rename keeps it whole): float16 tensors ``s{i}/{kind}`` shaped
``(N_steps, L, H, Q, K)`` (sentence i from 0; kind ``encoder`` (S, S), ``decoder`` (T, T), ``cross`` (T, S)),
and in the safetensors header metadata, under ``"aiayn_history"``, a JSON index: format tag and version,
direction, the recorded steps, n_layers, n_heads and per sentence its source, reference, ``src_tokens``,
``decoder_input_tokens`` and ``output_tokens``.

Size budget: at most :data:`MAX_STATES` (32) states and :data:`MAX_BYTES` (4 MiB) of float16 tensors. With
h = 8 heads the first four curated sentences (5 to 12 pieces a side) take about 12.6 KB a state per layer:
38 KB for the shipped checkpoints (N = 3; 32 states, measured: a 1.2 MB file), 76 KB and 2.4 MB for N = 6.
When a new state goes over either limit, the interior state whose neighbours are closest together is dropped
(the first and the newest are always kept), so the kept steps stay roughly evenly spaced over the whole run
however long it trains (measured: 100 saves 1,000 steps apart keep 32 states 1,000 to 4,000 steps apart). Recording leaves training
untouched: the pass runs in ``model.eval()`` under ``torch.inference_mode()`` in float32, restores the train
mode and draws no random numbers, so weights and ``--resume`` stay bit-identical to a run without it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..examples import sentence_pairs
from ..files import atomic_path

if TYPE_CHECKING:  # annotations only: the reader must not import torch
    from ..model.transformer import Transformer
    from ..tokenizer import Tokenizer

HISTORY_FILE = "attention_history.safetensors"
#: the ``"format"`` tag and the highest ``"version"`` of the JSON index this code reads
FORMAT = "aiayn-attention-history"
VERSION = 1
META_KEY = "aiayn_history"
from ..model.config import KINDS  # noqa: E402 - the one tuple, torch-free
#: curated sentences recorded (the first ones of the run's direction)
N_SENTENCES = 4
#: most states kept in the file
MAX_STATES = 32
#: most bytes of float16 tensors kept in the file (fewer states are kept when a state is larger)
MAX_BYTES = 4 * 1024 * 1024
#: tolerance on row sums when reading (float16 storage rounds each weight to ~1e-3 relative)
ROW_SUM_ATOL = 2e-2


@dataclass(frozen=True)
class HistorySentence:
    """One recorded sentence: ``source`` and ``reference`` (cleaned text), ``src_tokens`` (S pieces fed to the
    encoder, ending with ``</s>``), ``decoder_input_tokens`` (T pieces fed to the decoder: ``<s>`` then the
    reference shifted right) and ``output_tokens`` (T pieces predicted: the reference's pieces and ``</s>``)."""

    source: str
    reference: str
    src_tokens: list[str]
    decoder_input_tokens: list[str]
    output_tokens: list[str]

    def labels(self, kind: str) -> tuple[list[str], list[str]]:
        """Piece labels ``(queries, keys)`` of ``kind``: encoder (src, src), decoder (fed, fed), cross (fed, src),
        where fed = ``decoder_input_tokens`` (as :meth:`aiayn.AttentionMaps.labels`).

        Raises:
            ValueError: unknown kind.
        """
        check_kind(kind)
        fed, src = list(self.decoder_input_tokens), list(self.src_tokens)
        return {"encoder": (src, src), "decoder": (fed, fed), "cross": (fed, src)}[kind]

    def shape(self, kind: str) -> tuple[int, int]:
        """``(Q, K)`` of one map of ``kind``."""
        q, k = self.labels(kind)
        return len(q), len(k)


@dataclass(frozen=True)
class AttentionHistory:
    """The attention of the recorded sentences at each recorded training step (:func:`load_history`).

    Attributes:
        steps: the N recorded optimizer steps, increasing (0 = the initial weights of a fresh run).
        sentences: the recorded sentences and their pieces.
        maps: per sentence, ``{kind: (N, L, H, Q, K) float32}`` weights (stored as float16; post-softmax,
            rows sum to 1 up to the float16 rounding).
        direction: ``"en-de"`` or ``"de-en"``.
        n_layers, n_heads: L and H.
        path: the file read (None when built in memory).
    """

    steps: list[int]
    sentences: list[HistorySentence]
    maps: list[dict[str, np.ndarray]] = field(repr=False)
    direction: str
    n_layers: int
    n_heads: int
    path: Path | None = None

    def stack(self, sentence: int, kind: str) -> np.ndarray:
        """``(N, L, H, Q, K)`` weights of sentence ``sentence`` (from 0) and ``kind``.

        Raises:
            ValueError: sentence out of range or unknown kind.
        """
        check_kind(kind)
        if not 0 <= sentence < len(self.sentences):
            raise ValueError(f"sentence {sentence} out of range: the history holds {len(self.sentences)} (from 0)")
        return self.maps[sentence][kind]

    def step_index(self, step: int) -> int:
        """Position of ``step`` in :attr:`steps`. Raises ValueError when that step was not recorded."""
        try:
            return self.steps.index(int(step))
        except ValueError:
            raise ValueError(f"step {step} was not recorded; recorded steps: {self.steps}") from None

    def to_dataframe(self, sentence: int, kind: str, *, layer: int | None = None, head: int | None = None):
        """Long format, one row per (step, layer, head, query, key) of one sentence and kind: columns ``step``,
        ``sentence``, ``kind``, ``layer``, ``head``, ``query``, ``key`` (all from 0), ``query_token``,
        ``key_token``, ``weight``. ``layer`` / ``head`` (from 0) restrict it to one layer / head.

        Raises:
            ValueError: sentence, kind, layer or head out of range.
        """
        import pandas as pd  # function-level: pandas is only needed for the export

        w = self.stack(sentence, kind)
        n, L, H, Q, K = w.shape
        layers = self._pick(layer, L, "layer")
        heads = self._pick(head, H, "head")
        q_tok, k_tok = self.sentences[sentence].labels(kind)
        sub = w[:, layers][:, :, heads]  # (N, L', H', Q, K)
        idx = np.indices(sub.shape).reshape(5, -1)
        return pd.DataFrame({
            "step": np.asarray(self.steps)[idx[0]], "sentence": sentence, "kind": kind,
            "layer": np.asarray(layers)[idx[1]], "head": np.asarray(heads)[idx[2]], "query": idx[3], "key": idx[4],
            "query_token": np.asarray(q_tok, dtype=object)[idx[3]], "key_token": np.asarray(k_tok, dtype=object)[idx[4]],
            "weight": sub.reshape(-1).astype(np.float64),
        })

    def to_json(self, sentence: int, kind: str, *, layer: int | None = None, head: int | None = None) -> dict[str, Any]:
        """The same selection as :meth:`to_dataframe` as nested lists: ``{"direction", "sentence", "source",
        "reference", "kind", "layers", "heads", "steps", "query_tokens", "key_tokens", "weights"}`` with
        ``weights[step][layer][head][query][key]`` (layers and heads from 0)."""
        w = self.stack(sentence, kind)
        layers = self._pick(layer, w.shape[1], "layer")
        heads = self._pick(head, w.shape[2], "head")
        s = self.sentences[sentence]
        q_tok, k_tok = s.labels(kind)
        return {"direction": self.direction, "sentence": sentence, "source": s.source, "reference": s.reference,
                "kind": kind, "layers": layers, "heads": heads, "steps": list(self.steps), "query_tokens": q_tok,
                "key_tokens": k_tok, "weights": np.round(w[:, layers][:, :, heads].astype(np.float64), 5).tolist()}

    @staticmethod
    def _pick(value: int | None, n: int, what: str) -> list[int]:
        if value is None:
            return list(range(n))
        if not 0 <= int(value) < n:
            raise ValueError(f"{what} {value} out of range 0..{n - 1}")
        return [int(value)]


def check_kind(kind: str) -> None:
    """Raise ValueError unless ``kind`` is ``"encoder"``, ``"decoder"`` or ``"cross"``."""
    if kind not in KINDS:
        raise ValueError(f"unknown attention kind {kind!r}; choose one of {KINDS}")


def history_file(path: str | Path) -> Path:
    """The history file of a checkpoint or run directory (``path / HISTORY_FILE``), or ``path`` itself when it
    names a file."""
    p = Path(path).expanduser()
    return p if p.is_file() else p / HISTORY_FILE


def load_history(path: str | Path) -> AttentionHistory | None:
    """Read the attention history of a checkpoint directory, a run directory or the file itself (numpy only).

    Returns:
        the :class:`AttentionHistory`, or None when the directory carries none (checkpoints trained before the
        history was recorded, or runs trained with ``record_attention=False``).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file is truncated, not a safetensors file, of a newer version, or inconsistent (tensor
            missing or of the wrong shape, non-finite weights, rows not summing to 1); the message names the file.
    """
    from safetensors import safe_open  # function-level: only the reader needs it, and it stays torch-free

    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"no such checkpoint or run directory: {p}")
    f = history_file(p)
    if not f.is_file():
        return None
    try:
        with safe_open(str(f), framework="np") as fh:
            meta = fh.metadata() or {}
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types for a damaged file
        raise ValueError(f"{f} is not a readable attention history ({exc}); the file is truncated or corrupt") from None
    return parse_history(meta.get(META_KEY), tensors, f)


def parse_history(index_json: str | None, tensors: dict[str, np.ndarray], source: Path | None = None) -> AttentionHistory:
    """Check and assemble a history from its JSON index and its ``s{i}/{kind}`` tensors (see the module doc).

    Raises:
        ValueError: anything inconsistent (the message names ``source``).
    """
    where = str(source) if source is not None else "attention history"

    def bad(why: str) -> ValueError:
        return ValueError(f"{where}: damaged attention history ({why})")

    try:
        index = json.loads(index_json) if index_json else None
    except json.JSONDecodeError as exc:
        raise bad(f"index is not JSON: {exc}") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise bad(f"no {FORMAT!r} index in the file's metadata")
    if int(index.get("version", 0)) > VERSION:
        raise ValueError(f"{where}: attention history version {index['version']}; this aiayn reads up to {VERSION}")
    try:
        steps = [int(s) for s in index["steps"]]
        L, H = int(index["n_layers"]), int(index["n_heads"])
        sentences = [HistorySentence(str(s["source"]), str(s["reference"]), list(s["src_tokens"]),
                                     list(s["decoder_input_tokens"]), list(s["output_tokens"])) for s in index["sentences"]]
        direction = str(index["direction"])
    except (KeyError, TypeError, ValueError) as exc:
        raise bad(f"index field missing or malformed: {exc}") from None
    if not steps or any(b <= a for a, b in zip(steps, steps[1:])):
        raise bad(f"steps must be a non-empty increasing list, got {steps}")
    maps: list[dict[str, np.ndarray]] = []
    for i, s in enumerate(sentences):
        if len(s.decoder_input_tokens) != len(s.output_tokens):
            raise bad(f"sentence {i}: {len(s.decoder_input_tokens)} decoder inputs but {len(s.output_tokens)} outputs")
        per: dict[str, np.ndarray] = {}
        for kind in KINDS:
            name = f"s{i}/{kind}"
            if name not in tensors:
                raise bad(f"tensor {name} missing")
            w = np.asarray(tensors[name])
            want = (len(steps), L, H) + s.shape(kind)
            if w.shape != want:
                raise bad(f"tensor {name} has shape {w.shape}, expected {want}")
            w = w.astype(np.float32)
            if not np.isfinite(w).all():
                raise bad(f"tensor {name} holds non-finite weights")
            if w.size and not np.allclose(w.sum(-1), 1.0, atol=ROW_SUM_ATOL):
                raise bad(f"rows of {name} do not sum to 1")
            per[kind] = w
        maps.append(per)
    return AttentionHistory(steps, sentences, maps, direction, L, H, source)


def keep_evenly(steps: Sequence[int], k: int) -> list[int]:
    """Indices into ``steps`` (increasing) of at most ``k`` >= 2 states to keep: while too many, drop the
    interior state whose neighbours are closest together (ties: the earliest). The first and the last are
    always kept, so repeated appends keep roughly evenly spaced steps.

    Raises:
        ValueError: ``k < 2``.
    """
    if k < 2:
        raise ValueError(f"keep at least 2 states (first and newest), got {k}")
    idx = list(range(len(steps)))
    while len(idx) > k:
        gaps = [steps[idx[j + 1]] - steps[idx[j - 1]] for j in range(1, len(idx) - 1)]
        del idx[1 + int(np.argmin(gaps))]
    return idx


def capacity(state_bytes: int, *, max_states: int = MAX_STATES, max_bytes: int = MAX_BYTES) -> int:
    """How many states of ``state_bytes`` bytes the file keeps: ``min(max_states, max_bytes // state_bytes)``,
    at least 2 (first and newest)."""
    return max(2, min(int(max_states), int(max_bytes) // max(1, int(state_bytes))))


class AttentionRecorder:
    """Records the attention of the first ``n_sentences`` curated sentences of ``direction`` at a training step
    (see the module doc). Built once per run; :meth:`record` is called at every saved state.

    Args:
        tokenizer: the run's :class:`~aiayn.tokenizer.Tokenizer`.
        direction: ``"en-de"`` or ``"de-en"`` (which curated sentences).
        max_len: the model's ``max_len``: sources and references are encoded as
            :meth:`aiayn.Translator.force` encodes them (:func:`aiayn.calls.cut`: ``max_len - 1`` pieces + ``</s>``);
            the decoder input comes from the recorded model's own start piece (:func:`aiayn.calls.teacher_forced`).
        n_sentences, max_states, max_bytes: the size budget.
        log: where messages go (a history file started afresh).

    Raises:
        ValueError: unknown direction.
    """

    def __init__(self, tokenizer: "Tokenizer", direction: str, *, max_len: int, n_sentences: int = N_SENTENCES,
                 max_states: int = MAX_STATES, max_bytes: int = MAX_BYTES, log: Callable[[str], Any] = print) -> None:
        from ..calls import cut  # function-level: aiayn.calls imports torch; the reader stays torch-free
        from ..translation import clean_text

        self.direction, self.log = direction, log
        self.max_states, self.max_bytes = max_states, max_bytes
        self.tokenizer = tokenizer
        eos = tokenizer.eos_id
        #: (source, reference, source ids, reference ids) per sentence
        self.items: list[tuple[str, str, list[int], list[int]]] = []
        for src, ref in sentence_pairs(direction)[:n_sentences]:
            src_c, ref_c = clean_text(src), clean_text(ref)
            self.items.append((src_c, ref_c, cut(tokenizer.encode(src_c), max_len, eos)[0],
                               cut(tokenizer.encode(ref_c), max_len, eos)[0]))

    def sentences(self, decoder_start_id: int, start_piece: str | None = None) -> list[HistorySentence]:
        """The recorded sentences with their pieces, for a model that starts decoding from ``decoder_start_id``
        (named ``start_piece`` when it is no piece of the vocabulary: a language tag such as ``<2de>``)."""
        def pieces(ids: Sequence[int]) -> list[str]:
            return [start_piece if start_piece is not None and int(i) == decoder_start_id
                    else self.tokenizer.id_to_piece(int(i)) for i in ids]

        return [HistorySentence(src, ref, pieces(src_ids), pieces([decoder_start_id] + ref_ids[:-1]), pieces(ref_ids))
                for src, ref, src_ids, ref_ids in self.items]

    def maps(self, model: "Transformer") -> list[dict[str, np.ndarray]]:
        """The ``{kind: (L, H, Q, K) float16}`` maps of each sentence under ``model``'s current weights.

        One teacher-forced pass per sentence (:func:`aiayn.calls.teacher_forced_ids`; no padding, so each map is
        exactly that sentence's) in float32 (no autocast) under ``torch.inference_mode()`` with ``model.eval()``;
        the model's train/eval mode is restored and no random number is drawn.
        """
        from ..calls import teacher_forced_ids  # function-level: the reader (load_history, the app) stays torch-free

        was_training = model.training
        model.eval()
        out = []
        try:
            for _, _, src_ids, ref_ids in self.items:
                m = teacher_forced_ids(model, [src_ids], [ref_ids], return_attention=True, amp=False).maps
                out.append({k: getattr(m, k)[:, 0].float().cpu().numpy().astype(np.float16) for k in KINDS})
        finally:
            model.train(was_training)
        return out

    def record(self, run_dir: str | Path, model: "Transformer", step: int) -> Path:
        """Append the maps at ``step`` to ``run_dir/attention_history.safetensors`` (atomic rewrite); returns
        the file.

        Recorded steps at or past ``step`` are replaced (a run resumed from an earlier state records them
        again); then states are thinned to the budget (:func:`keep_evenly`, :func:`capacity`). A file that is
        damaged or holds other sentences (another direction or vocabulary) is started afresh, with a message
        to the recorder's ``log``.
        """
        run_dir = Path(run_dir)
        new = self.maps(model)
        L, H = new[0]["cross"].shape[:2] if new else (0, 0)
        old: AttentionHistory | None = None
        try:
            old = load_history(run_dir) if run_dir.is_dir() else None
        except ValueError as exc:
            self.log(f"attention history: starting afresh ({exc})")
        sentences = self.sentences(model.cfg.decoder_start_id, model.cfg.tag_piece(model.cfg.decoder_start_id))
        if old is not None and (old.sentences != sentences or (old.n_layers, old.n_heads) != (L, H)
                                or old.direction != self.direction):
            self.log(f"attention history: {old.path} holds other sentences or another model shape; starting afresh")
            old = None
        steps: list[int] = []
        stacks: list[dict[str, list[np.ndarray]]] = [{k: [] for k in KINDS} for _ in sentences]
        if old is not None:
            for j, s in enumerate(old.steps):
                if s >= step:
                    continue
                steps.append(s)
                for i in range(len(sentences)):
                    for k in KINDS:
                        stacks[i][k].append(old.maps[i][k][j].astype(np.float16))
        steps.append(int(step))
        for i, per in enumerate(new):
            for k in KINDS:
                stacks[i][k].append(per[k])
        state_bytes = sum(m.nbytes for per in new for m in per.values())
        keep = keep_evenly(steps, capacity(state_bytes, max_states=self.max_states, max_bytes=self.max_bytes))
        tensors = {f"s{i}/{k}": np.ascontiguousarray(np.stack([stacks[i][k][j] for j in keep]))
                   for i in range(len(sentences)) for k in KINDS}
        index = {"format": FORMAT, "version": VERSION, "direction": self.direction, "steps": [steps[j] for j in keep],
                 "n_layers": int(L), "n_heads": int(H), "dtype": "float16", "kinds": list(KINDS),
                 "budget": {"max_states": self.max_states, "max_bytes": self.max_bytes},
                 "sentences": [{"source": s.source, "reference": s.reference, "src_tokens": s.src_tokens,
                                "decoder_input_tokens": s.decoder_input_tokens, "output_tokens": s.output_tokens}
                               for s in sentences]}
        return write_history(run_dir / HISTORY_FILE, tensors, index)


def write_history(path: str | Path, tensors: dict[str, np.ndarray], index: dict[str, Any]) -> Path:
    """Write ``tensors`` with the JSON ``index`` in the header metadata to ``path`` atomically
    (:func:`aiayn.files.atomic_path`); returns ``path``."""
    from safetensors.numpy import save_file  # function-level, as in load_history

    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata={META_KEY: json.dumps(index, ensure_ascii=False)})
    return Path(path)
