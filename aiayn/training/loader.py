"""The training input pipeline that keeps a GPU fed (Section 5.1's batches, built without Python loops per
sentence):

* :func:`load_pairs`: a split's SentencePiece ids, tokenised once and cached as memory-mapped numpy arrays in
  ``{data_dir}/cache/`` (or another folder), keyed by the sha256 of ``spm.model`` and of the split file, so a
  cache entry is never stale: a new vocabulary or new data gives a new key. Filtering by ``max_len``, the
  direction and ``upsample_sentences`` are applied at load time (cheap index arithmetic), so one entry serves
  both directions and every ``max_len``.
* :func:`collate_buffer` / :func:`collate_examples`: one batch as padded ``(B, S)`` / ``(B, T)`` int64 tensors in one
  vectorised pass, widths rounded up to a multiple of ``pad_multiple`` (8: shapes repeat, which ``torch.compile``
  and the GPU kernels like), decoder input ``BOS + y[:-1]``; the package's one training collate
  (:func:`aiayn.training.pipeline.collate` of id lists goes through it).
* :class:`BatchLoader`: a thread that collates the next steps' micro-batches ahead of the training step,
  into pinned memory on CUDA, so the step only issues a non-blocking host-to-device copy.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import tempfile
import threading
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from ..data.batching import pad_flat
from ..data.corpora import read_tsv
from ..data.splits import is_sentence
from ..files import sha256_file

#: Bump when the layout of a cache entry changes (old entries are then simply not found).
CACHE_FORMAT = 1
LANGS = ("de", "en")


@dataclass
class PairIds:
    """The training examples of one split and direction, as flat id arrays (no Python list per sentence).

    Attributes:
        src_flat, tgt_flat: 1-d int32 arrays (often memory-mapped) holding every source / target row (ids then
            EOS) back to back.
        src_starts, tgt_starts: ``(N,)`` int64: where example i's source / target starts in the flat arrays.
        src_lengths, tgt_lengths: ``(N,)`` int64: its lengths in pieces, EOS included (what
            :func:`aiayn.training.pipeline.encode_pairs` gives as ``len(src_ids[i])``).
        cache_path: the cache entry the ids came from (None: built in memory only).
        rows: ``(N,)`` int64: the split-file row (0 = the first pair after the header) of each example, when
            :func:`load_pairs` made them (a pair repeated k times appears k times); None otherwise.
        decoder_starts: ``(N,)`` int64: the id each example's decoder input starts with (its target language's
            tag, :func:`load_pairs_both`); None: the collate's ``bos_id`` for every example.
    """

    src_flat: np.ndarray
    src_starts: np.ndarray
    src_lengths: np.ndarray
    tgt_flat: np.ndarray
    tgt_starts: np.ndarray
    tgt_lengths: np.ndarray
    cache_path: Path | None = None
    rows: np.ndarray | None = None
    decoder_starts: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.src_lengths)

    @classmethod
    def from_lists(cls, src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]]) -> "PairIds":
        """Id rows already ending in EOS (:func:`.pipeline.encode_pairs`' form) as flat arrays, in memory.

        Raises:
            ValueError: ``src_ids`` and ``tgt_ids`` differ in length.
        """
        if len(src_ids) != len(tgt_ids):
            raise ValueError(f"{len(src_ids)} source rows but {len(tgt_ids)} target rows")

        def flat(rows):
            lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
            starts = np.zeros(len(rows), dtype=np.int64)
            np.cumsum(lengths[:-1], out=starts[1:])
            return np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum())), starts, lengths

        return cls(*flat(src_ids), *flat(tgt_ids))

    def lists(self) -> tuple[list[list[int]], list[list[int]]]:
        """``(src_ids, tgt_ids)`` as lists of lists, the form :func:`.pipeline.encode_pairs` returns."""
        def rows(flat, starts, lengths):
            return [flat[s : s + n].tolist() for s, n in zip(starts.tolist(), lengths.tolist())]
        return rows(self.src_flat, self.src_starts, self.src_lengths), rows(self.tgt_flat, self.tgt_starts, self.tgt_lengths)


def _flatten(ids: list[list[int]], eos_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``ids[i] + [eos_id]`` back to back as int32, and the ``(N + 1,)`` int64 offsets."""
    lengths = np.fromiter((len(x) + 1 for x in ids), dtype=np.int64, count=len(ids))
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.full(int(offsets[-1]), eos_id, dtype=np.int32)
    body = np.ones(len(flat), dtype=bool)
    body[offsets[1:] - 1] = False
    flat[body] = np.fromiter(chain.from_iterable(ids), dtype=np.int32, count=int(len(flat) - len(ids)))
    return flat, offsets


def cache_key(spm_model: str | Path, split_file: str | Path) -> str:
    """The cache entry's name part: sha256 of the format version, ``spm.model``'s bytes and the split file's
    bytes (first 20 hex digits)."""
    import hashlib

    h = hashlib.sha256(f"aiayn-token-cache/{CACHE_FORMAT}\n".encode())
    h.update(sha256_file(spm_model).encode())
    h.update(sha256_file(split_file).encode())
    return h.hexdigest()[:20]


def _build_arrays(split_file: Path, tokenizer) -> dict[str, np.ndarray]:
    pairs = read_tsv(split_file)
    out: dict[str, np.ndarray] = {}
    for lang in LANGS:
        texts = [getattr(p, lang) for p in pairs]
        ids = tokenizer.encode_batch(texts) if hasattr(tokenizer, "encode_batch") else [tokenizer.encode(x) for x in texts]
        out[lang], out[f"{lang}_offsets"] = _flatten(ids, tokenizer.eos_id)
    out["sentence"] = np.fromiter((is_sentence(p.de) and is_sentence(p.en) for p in pairs), dtype=bool, count=len(pairs))
    return out


def _load_entry(path: Path) -> dict[str, np.ndarray] | None:
    """The arrays of a complete cache entry, memory-mapped; None when it is missing or damaged."""
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
        if meta.get("format") != CACHE_FORMAT:
            return None
        arrays = {name: np.load(path / f"{name}.npy", mmap_mode="r") for name in meta["arrays"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    n = len(arrays.get("sentence", ()))
    if any(len(arrays.get(f"{lang}_offsets", ())) != n + 1 for lang in LANGS):
        return None
    return arrays


def split_arrays(data_dir: str | Path, split: str, tokenizer, spm_model: str | Path, *,
                 cache_dir: str | Path | None = None, log: Callable[[str], None] = print) -> tuple[dict[str, np.ndarray], Path | None]:
    """The token ids of every pair of ``{data_dir}/{split}.tsv``, both languages: ``{"de", "en"}`` (flat int32,
    EOS after each row), ``{"de_offsets", "en_offsets"}`` (``(N + 1,)`` int64) and ``"sentence"`` (``(N,)``
    bool: both sides are full sentences, :func:`aiayn.data.splits.is_sentence`), plus the cache entry used.

    ``cache_dir`` (default ``{data_dir}/cache``) holds one entry per :func:`cache_key`; a missing or damaged
    entry is (re)built and written atomically (a temporary folder renamed into place; a concurrent writer,
    e.g. another DDP rank, simply wins). ``cache_dir=""`` or an unwritable folder: the ids are built in memory
    (with a log line for the latter).

    Raises:
        FileNotFoundError: no split file or no ``spm_model``; ValueError: a malformed split file.
    """
    split_file = Path(data_dir) / f"{split}.tsv"
    if not split_file.is_file():
        raise FileNotFoundError(f"no {split} split: {split_file} does not exist")
    if cache_dir == "":
        return _build_arrays(split_file, tokenizer), None
    root = Path(cache_dir) if cache_dir is not None else Path(data_dir) / "cache"
    entry = root / f"{split}-{cache_key(spm_model, split_file)}"
    arrays = _load_entry(entry)
    if arrays is not None:
        return arrays, entry
    built = _build_arrays(split_file, tokenizer)
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=root))
    except OSError as exc:
        log(f"token cache not written ({root}: {exc}); tokenising in memory")
        return built, None
    try:
        for name, arr in built.items():
            np.save(tmp / f"{name}.npy", arr)
        (tmp / "meta.json").write_text(json.dumps({"format": CACHE_FORMAT, "split_file": str(split_file),
                                                   "spm_model": str(spm_model), "arrays": sorted(built)}), encoding="utf-8")
        os.chmod(tmp, 0o755)
        if entry.exists() and _load_entry(entry) is None:  # damaged (not one a concurrent writer just put there)
            shutil.rmtree(entry, ignore_errors=True)
        os.rename(tmp, entry)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process put the entry in place first, or the disk failed
    arrays = _load_entry(entry)
    return (arrays, entry) if arrays is not None else (built, None)


def load_pairs(data_dir: str | Path, split: str, direction: str, tokenizer, spm_model: str | Path, *, max_len: int,
               upsample: int = 1, cache_dir: str | Path | None = None, log: Callable[[str], None] = print,
               row_weights: np.ndarray | None = None, seed: int = 0) -> PairIds:
    """The examples of a split for ``direction`` (``"en-de"`` / ``"de-en"``), as
    :func:`.pipeline.load_split` + :func:`.pipeline.upsample_sentences` + :func:`.pipeline.encode_pairs` give
    them (same examples, same order: a pair of full sentences repeated ``upsample`` times in place, pairs with
    an empty side or a side of ``max_len`` pieces or more dropped), but from the token cache
    (:func:`split_arrays`) and without Python lists.

    ``row_weights`` (one float per split-file row, e.g. :class:`KindMix`'s): a data mix on top of ``upsample``,
    by :func:`weighted_copies` (pair i repeated ``upsample_i * row_weights[i]`` times, a fractional part kept for a
    subset seeded by ``seed``). Applied here, after the cache, so every mix shares one cache entry. None: no mix
    (the examples above, unchanged).

    Raises:
        ValueError: ``upsample`` < 1 or an unknown direction; DataMixError: ``row_weights`` of another length than
        the split; FileNotFoundError: see :func:`split_arrays`.
    """
    if upsample < 1:
        raise ValueError(f"upsample_sentences must be >= 1, got {upsample}")
    src_lang, _, tgt_lang = direction.partition("-")
    if {src_lang, tgt_lang} != set(LANGS):
        raise ValueError(f"direction must be 'en-de' or 'de-en', got {direction!r}")
    arrays, entry = split_arrays(data_dir, split, tokenizer, spm_model, cache_dir=cache_dir, log=log)
    s_off = np.asarray(arrays[f"{src_lang}_offsets"])
    t_off = np.asarray(arrays[f"{tgt_lang}_offsets"])
    s_len, t_len = np.diff(s_off), np.diff(t_off)
    # encode_pairs keeps non-empty sides of fewer than max_len pieces: 2 <= length with EOS <= max_len
    keep = (s_len >= 2) & (s_len <= max_len) & (t_len >= 2) & (t_len <= max_len)
    times = np.where(np.asarray(arrays["sentence"]), upsample, 1)
    if row_weights is not None:
        times = weighted_copies(times, row_weights, seed)
    rows = np.repeat(np.flatnonzero(keep), times[keep])
    return PairIds(arrays[src_lang], s_off[rows], s_len[rows], arrays[tgt_lang], t_off[rows], t_len[rows], entry, rows)


def load_pairs_both(data_dir: str | Path, split: str, tokenizer, spm_model: str | Path, *, start_ids: dict[str, int],
                    **kwargs: Any) -> PairIds:
    """Every example of :func:`load_pairs` in both directions, en-de then de-en (the same kwargs: ``max_len``,
    ``upsample``, ``row_weights``...), each with ``decoder_starts`` = ``start_ids[target language]`` (the target's
    language tag: one model for both directions, as mBART and NLLB). The two directions' id arrays are joined into
    one in memory (the batches mix them; the order of the examples, and so exact resume, is fixed by the split).

    Raises:
        ValueError: ``start_ids`` lacks a language; the rest as :func:`load_pairs`.
    """
    if set(start_ids) != set(LANGS):
        raise ValueError(f"start_ids needs the start id of each of {LANGS}, got {sorted(start_ids)}")
    parts = [load_pairs(data_dir, split, direction, tokenizer, spm_model, **kwargs) for direction in ("en-de", "de-en")]
    en_de, de_en = parts
    # en-de reads en -> de, de-en reads de -> en: one flat array [en ids, de ids] serves both sides of both
    flat = np.concatenate([np.asarray(en_de.src_flat), np.asarray(en_de.tgt_flat)])
    shift = len(en_de.src_flat)
    src_starts = np.concatenate([en_de.src_starts, de_en.src_starts + shift])
    tgt_starts = np.concatenate([en_de.tgt_starts + shift, de_en.tgt_starts])
    starts = np.concatenate([np.full(len(en_de), start_ids["de"], dtype=np.int64),
                             np.full(len(de_en), start_ids["en"], dtype=np.int64)])
    rows = None if en_de.rows is None else np.concatenate([en_de.rows, de_en.rows])
    return PairIds(flat, src_starts, np.concatenate([en_de.src_lengths, de_en.src_lengths]), flat, tgt_starts,
                   np.concatenate([en_de.tgt_lengths, de_en.tgt_lengths]), en_de.cache_path, rows, starts)


# -- the data mix by kind (--kind-weights) ---------------------------------------------------------------------
#: the file of a prepared Debian folder naming each train.tsv row's kind (``aiayn data debian``)
KINDS_FILE = "train_kinds.txt"
#: the random stream of the fractional weights' subsets (its own: the run's other draws do not move it)
_MIX_STREAM = 0x6B696E64


class DataMixError(ValueError):
    """A data mix (``--kind-weights``) that cannot be made: a malformed spec, or a folder without the kinds or
    without a weight for one of them (the message says which and what to run)."""


def parse_kind_weights(spec: str | None) -> dict[str, float] | str | None:
    """``--kind-weights`` as given: ``"none"`` or empty -> None (every pair once, the behaviour before kinds);
    ``"default"`` -> ``"default"`` (the folder's ``datasheet.json`` ``kinds.default_weights``);
    ``"ding=1,narrative=2,everyday=0.5"`` -> ``{"ding": 1.0, "narrative": 2.0, "everyday": 0.5}``.

    Raises:
        DataMixError: an item without ``=``, a kind named twice, or a weight that is not a finite number >= 0.
    """
    spec = (spec or "none").strip()
    if spec in ("none", "default"):
        return None if spec == "none" else spec
    out: dict[str, float] = {}
    for item in spec.split(","):
        kind, eq, value = item.strip().partition("=")
        try:
            w = float(value)
        except ValueError:
            w = float("nan")
        if not eq or not kind.strip() or not (0 <= w < float("inf")) or kind.strip() in out:
            raise DataMixError(f"--kind-weights takes none, default or kind=weight,... (weights finite and >= 0, each "
                               f"kind once), got {spec!r}")
        out[kind.strip()] = w
    return out


@dataclass
class KindMix:
    """The data mix of a run: ``weights`` (kind -> weight), ``names`` (the kinds, in the order of ``weights``) and,
    per ``train.tsv`` row, its kind as an index into ``names`` (``kind_index``, ``(N,)`` int64) and its weight
    (``row_weights``, ``(N,)`` float64)."""

    spec: str
    weights: dict[str, float]
    names: list[str]
    kind_index: np.ndarray
    row_weights: np.ndarray

    def summary(self, data: PairIds) -> dict[str, Any]:
        """What the run sees per epoch, for its log and ``data_mix.json``: ``{"kind_weights": spec, "kinds": {kind:
        {"weight", "pairs", "examples"}}, "examples": N}``: ``pairs`` kept (``max_len``) train.tsv pairs of the kind,
        ``examples`` its examples per epoch after ``upsample_sentences`` and the weight."""
        rows = np.asarray(data.rows, dtype=np.int64)
        per_example = np.bincount(self.kind_index[rows], minlength=len(self.names))
        per_pair = np.bincount(self.kind_index[np.unique(rows)], minlength=len(self.names))
        kinds = {k: {"weight": self.weights[k], "pairs": int(per_pair[i]), "examples": int(per_example[i])}
                 for i, k in enumerate(self.names)}
        return {"kind_weights": self.spec, "kinds": kinds, "examples": int(len(data))}


def weighted_copies(times: np.ndarray, row_weights: np.ndarray, seed: int) -> np.ndarray:
    """How many times each row goes into an epoch: ``x = times * row_weights`` (``upsample_sentences`` first, the
    kind's weight on top), ``floor(x)`` copies plus one more where a uniform draw is below ``x - floor(x)``. The
    draws come from a generator seeded by ``seed`` alone, one per row of the split, so a fractional weight keeps
    the same subset at every start, resume and epoch, whatever ``max_len`` drops; integer products draw nothing
    that matters (``k`` copies exactly).

    Raises:
        DataMixError: ``row_weights`` of another length than ``times``.
    """
    w = np.asarray(row_weights, dtype=np.float64)
    if len(w) != len(times):
        raise DataMixError(f"{len(w)} row weights for a split of {len(times)} rows: {KINDS_FILE} does not match "
                           "train.tsv (prepare the folder again with `aiayn data debian`)")
    x = np.asarray(times, dtype=np.float64) * w
    whole = np.floor(x)
    extra = np.random.default_rng([int(seed), _MIX_STREAM]).random(len(x)) < (x - whole)
    return (whole + extra).astype(np.int64)


def kind_mix(data_dir: str | Path, spec: str | None) -> KindMix | None:
    """The data mix ``spec`` (:func:`parse_kind_weights`) of a prepared Debian folder: each ``train.tsv`` row's kind
    from ``train_kinds.txt`` and its weight (:func:`aiayn.data.prepare_debian.load_train_weights`). None for
    ``"none"``.

    Raises:
        DataMixError: a malformed ``spec``; the folder has no ``train_kinds.txt`` (or, for ``"default"``, no
            ``kinds.default_weights`` in ``datasheet.json``); a kind of the file without a weight; a weight for a
            kind that neither the file nor the datasheet knows (a misspelt kind).
    """
    from ..data.prepare_debian import load_train_weights

    parsed = parse_kind_weights(spec)
    if parsed is None:
        return None
    d = Path(data_dir).expanduser()
    if not (d / KINDS_FILE).is_file():
        raise DataMixError(f"--kind-weights {spec}: {d / KINDS_FILE} does not exist (one kind per train.tsv row; "
                           "`aiayn data debian` writes it, with the datasheet's default weights)")
    try:
        sheet = json.loads((d / "datasheet.json").read_text(encoding="utf-8"))
        defaults = {k: float(v) for k, v in sheet["kinds"]["default_weights"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        defaults = None
    if parsed == "default" and defaults is None:
        raise DataMixError(f"--kind-weights default: {d / 'datasheet.json'} has no kinds.default_weights (prepare the "
                           "folder again with `aiayn data debian`, or give the weights: kind=weight,...)")
    weights = defaults if parsed == "default" else parsed
    kinds = (d / KINDS_FILE).read_text(encoding="utf-8").split()
    names = list(weights)
    unknown = sorted(set(names) - set(kinds) - set(defaults or ()))
    if unknown:
        raise DataMixError(f"--kind-weights: no kind {', '.join(unknown)} in {d / KINDS_FILE} (kinds: "
                           f"{', '.join(sorted(set(kinds) | set(defaults or ())))})")
    try:
        row_weights = np.asarray(load_train_weights(d, weights), dtype=np.float64)
    except ValueError as exc:
        raise DataMixError(f"--kind-weights {spec}: {exc}") from None
    lookup = {k: i for i, k in enumerate(names)}
    kind_index = np.fromiter((lookup[k] for k in kinds), dtype=np.int64, count=len(kinds))
    return KindMix(str(spec), weights, names, kind_index, row_weights)


def parse_domain_tags(spec: str | None) -> dict[str, tuple[str, ...]] | None:
    """``--domain-tags`` as given: ``"none"`` or empty -> None (no tags, the decoder starts with the start piece);
    ``"general=ding+everyday+narrative,software=ui+documentation"`` -> ``{"general": ("ding", "everyday",
    "narrative"), "software": ("ui", "documentation")}``: each domain tag and the kinds of ``train_kinds.txt`` whose
    pairs start their decoder input with it. The first tag is the model's default (what validation, an exported
    checkpoint and every page decode with).

    Raises:
        DataMixError: an item without ``=``, a tag name that is not letters, digits and ``_``, a tag or a kind named
            twice, a tag without kinds, or fewer than two tags (one tag would tell the decoder nothing).
    """
    spec = (spec or "none").strip()
    if spec == "none":
        return None
    out: dict[str, tuple[str, ...]] = {}
    seen: set[str] = set()
    for item in spec.split(","):
        name, eq, kinds = item.strip().partition("=")
        name = name.strip()
        parts = tuple(k.strip() for k in kinds.split("+") if k.strip())
        if (not eq or not name or not name.replace("_", "").isalnum() or not name.isascii() or name in out or not parts
                or seen & set(parts) or len(set(parts)) != len(parts)):
            raise DataMixError(f"--domain-tags takes none or tag=kind+kind,... (each tag and each kind once), got {spec!r}")
        seen |= set(parts)
        out[name] = parts
    if len(out) < 2:
        raise DataMixError(f"--domain-tags needs at least two tags (one tells the decoder nothing), got {spec!r}")
    return out


def domain_index(data_dir: str | Path, tags: dict[str, tuple[str, ...]]) -> np.ndarray:
    """``(N,)`` int64, one per ``train.tsv`` row: the index into ``tags`` (:func:`parse_domain_tags`) of the tag
    whose kinds hold the row's kind in ``train_kinds.txt``. Example i then starts its decoder input with the tag
    ``domain_tag_id(first tag) + index[rows[i]]`` (:func:`aiayn.training.loop._training_pairs`).

    Raises:
        DataMixError: the folder has no ``train_kinds.txt``, or one of its kinds is in no tag (names them).
    """
    d = Path(data_dir).expanduser()
    if not (d / KINDS_FILE).is_file():
        raise DataMixError(f"--domain-tags: {d / KINDS_FILE} does not exist (one kind per train.tsv row; "
                           "`aiayn data debian` writes it)")
    kinds = (d / KINDS_FILE).read_text(encoding="utf-8").split()
    lookup = {k: i for i, parts in enumerate(tags.values()) for k in parts}
    missing = sorted(set(kinds) - set(lookup))
    if missing:
        raise DataMixError(f"--domain-tags: the kind(s) {', '.join(missing)} of {d / KINDS_FILE} are in no tag "
                           f"(tags: {', '.join(t + '=' + '+'.join(p) for t, p in tags.items())})")
    return np.fromiter((lookup[k] for k in kinds), dtype=np.int64, count=len(kinds))


def collate_buffer(data: PairIds, idx: Sequence[int] | np.ndarray, *, pad_id: int, bos_id: int, multiple: int = 8,
                   max_width: int | None = None, pin_memory: bool = False) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """One batch in ONE int64 buffer ``(B*S + 2*B*T,)``: source ``(B, S)``, decoder input ``(B, T)`` and target
    ``(B, T)`` one after the other (so the host-to-device copy is one transfer), and ``(B, S, T)``.

    S and T: the longest source / target of the batch rounded up to a multiple of ``multiple``, capped at
    ``max_width`` (the model's ``max_len``) but never below the longest row. ``pin_memory``: allocate the
    buffer in page-locked memory (for a non-blocking copy to CUDA).

    Raises:
        ValueError: an empty batch or ``multiple`` < 1.
    """
    idx = np.asarray(idx, dtype=np.int64)
    if len(idx) == 0:
        raise ValueError("a batch needs at least one example")
    if multiple < 1:
        raise ValueError(f"pad_multiple must be >= 1, got {multiple}")
    s_len, t_len = data.src_lengths[idx], data.tgt_lengths[idx]

    def width(longest: int) -> int:
        w = -(-longest // multiple) * multiple
        return max(longest, min(w, max_width)) if max_width is not None else w

    b, s, t = len(idx), width(int(s_len.max())), width(int(t_len.max()))
    buf = torch.empty(b * s + 2 * b * t, dtype=torch.int64, pin_memory=pin_memory)
    arr = buf.numpy()
    src = arr[: b * s].reshape(b, s)
    dec = arr[b * s : b * (s + t)].reshape(b, t)
    tgt = arr[b * (s + t) :].reshape(b, t)
    pad_flat(data.src_flat, data.src_starts[idx], s_len, pad_id, width=s, out=src)
    pad_flat(data.tgt_flat, data.tgt_starts[idx], t_len, pad_id, width=t, out=tgt)
    # decoder input: BOS then the target shifted right (Section 3.1), padded after the row's length
    dec[:, 0] = bos_id if data.decoder_starts is None else data.decoder_starts[idx]
    np.copyto(dec[:, 1:], np.where(np.arange(1, t) < t_len[:, None], tgt[:, :-1], pad_id))
    return buf, (b, s, t)


def split_buffer(buf: torch.Tensor, shape: tuple[int, int, int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``(src, dec_in, tgt)`` views of a :func:`collate_buffer` buffer (on whatever device it now is)."""
    b, s, t = shape
    return buf[: b * s].view(b, s), buf[b * s : b * (s + t)].view(b, t), buf[b * (s + t) :].view(b, t)


def collate_examples(data: PairIds, idx: Sequence[int] | np.ndarray, *, pad_id: int, bos_id: int, multiple: int = 8,
                     max_width: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Examples ``idx`` of ``data`` as ``(src (B, S), decoder input (B, T), target (B, T))`` int64 CPU tensors,
    padded with ``pad_id``; the decoder input is ``bos_id`` + ``y[:-1]`` (Section 3.1). With ``multiple=1`` S and
    T are the longest source and target; otherwise they are rounded up (see :func:`collate_buffer`)."""
    buf, shape = collate_buffer(data, idx, pad_id=pad_id, bos_id=bos_id, multiple=multiple, max_width=max_width)
    return split_buffer(buf, shape)


_DONE = object()


class BatchLoader:
    """Collates the micro-batches of steps ``start, start + 1, ...`` of ``groups`` ahead of the training step.

    Iterating yields ``(k, micro, n_tok)`` per step k: ``micro`` is this rank's list of ``(src, dec_in, tgt)``
    int64 tensors already on ``device`` (``groups[k][rank::world]``, collated by :func:`collate_buffer`; on
    CUDA from pinned memory with a non-blocking copy, so nothing waits for the GPU), and ``n_tok`` the
    number of target tokens of the whole step over every rank (a Python int computed from the lengths: no
    all-reduce, no device read-back). With ``prefetch`` > 0 a daemon thread keeps up to ``prefetch`` steps
    ready; ``prefetch=0`` collates in the caller's thread. The batches are the same either way (the thread
    draws no random numbers). Call :meth:`close` (or use ``with``) when stopping early.
    """

    def __init__(self, data: PairIds, groups: list[list[list[int]]], *, pad_id: int, bos_id: int, device: torch.device,
                 start: int = 0, rank: int = 0, world: int = 1, multiple: int = 8, max_width: int | None = None,
                 prefetch: int = 2):
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        self.data, self.groups, self.start = data, groups, start
        self.rank, self.world, self.device = rank, world, torch.device(device)
        self.kw: dict[str, Any] = dict(pad_id=pad_id, bos_id=bos_id, multiple=multiple, max_width=max_width,
                                       pin_memory=self.device.type == "cuda")
        self.prefetch = prefetch
        self._stop = threading.Event()
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, prefetch))
        self._thread: threading.Thread | None = None

    def _host_step(self, k: int) -> tuple[int, list[tuple[torch.Tensor, tuple[int, int, int]]], int]:
        group = self.groups[k]
        n_tok = int(sum(int(self.data.tgt_lengths[np.asarray(b, dtype=np.int64)].sum()) for b in group))
        micro = [collate_buffer(self.data, b, **self.kw) for b in group[self.rank :: self.world]]
        return k, micro, n_tok

    def _work(self) -> None:
        try:
            for k in range(self.start, len(self.groups)):
                item = self._host_step(k)
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
            item = _DONE
        except BaseException as exc:  # handed to the training thread, raised there
            item = exc
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _to_device(self, micro):
        out = []
        for buf, shape in micro:
            if self.device.type != "cpu":
                buf = buf.to(self.device, non_blocking=True)
            out.append(split_buffer(buf, shape))
        return out

    def __iter__(self) -> Iterator[tuple[int, list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], int]]:
        if self.prefetch == 0:
            for k in range(self.start, len(self.groups)):
                _, micro, n_tok = self._host_step(k)
                yield k, self._to_device(micro), n_tok
            return
        self._thread = threading.Thread(target=self._work, name="aiayn-batch-loader", daemon=True)
        self._thread.start()
        try:
            while True:
                item = self._queue.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                k, micro, n_tok = item
                yield k, self._to_device(micro), n_tok
        finally:
            self.close()

    def close(self) -> None:
        """Stop the loader thread (if any) and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> "BatchLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
