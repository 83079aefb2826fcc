"""Preparing a data folder: ``aiayn data {ding,debian,tsv,moses}``.

:func:`prepare_pairs` takes any list of pairs (a parsed Ding file, a TSV, a Moses pair of files) through
the leak-free split (:func:`~aiayn.data.splits.make_splits`), writes ``train/valid/test.tsv``, the
word-by-word dictionary ``dictionary.tsv`` built from train only (:func:`build_dictionary`, read by the
baseline in :mod:`aiayn.evaluation.baseline`), a joint SentencePiece BPE model ``spm.model`` trained on both
sides of train (Section 5.1: "a shared source-target vocabulary") and a datasheet (``DATASHEET.md``,
``datasheet.json``: source, license, counts, what was dropped and why, sha256 of every file).
:func:`prepare_ding` does the same for the Ding corpus after :func:`~aiayn.data.ding.obtain_ding` and
:func:`~aiayn.data.ding.parse_ding`; :func:`~aiayn.data.prepare_debian.prepare_debian` adds German-English text from Debian packages
(:mod:`aiayn.data.debian`) to Ding's train and writes two more test splits; :func:`cli_main` is the command line.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

from ..files import atomic_write_text, sha256_file
from ..tokenizer import Tokenizer, train_sentencepiece
from .corpora import Pair, collapse_whitespace, read_moses, read_tsv, write_tsv
from .ding import (
    DEFAULT_DING_DIR, DING_ATTRIBUTION, DING_DEBIAN_PACKAGE, DING_LICENSE, DING_SHA256, DING_VERSION, ParseReport,
    obtain_ding, parse_ding,
)
from .splits import SENTENCE_END, is_sentence, make_splits

__all__ = ["build_dictionary", "length_histogram", "nonempty_collapsed", "prepare_pairs", "prepare_ding", "cli_main"]


def build_dictionary(train: Sequence[Pair], max_words: int = 3) -> list[Pair]:
    """Entries of ``dictionary.tsv`` for the word-by-word baseline (:mod:`aiayn.evaluation.baseline`), from
    TRAIN pairs only (so the baseline never sees a test sentence): pairs where one side is a single word and
    the other has at most ``max_words`` words, the German side not a multi-word phrase ending like a
    sentence. Order is kept; exact duplicates removed. Returns a new list of :class:`Pair`."""
    out, seen = [], set()
    for p in train:
        nd, ne = len(p.de.split()), len(p.en.split())
        if min(nd, ne) == 1 and max(nd, ne) <= max_words and p not in seen:
            if SENTENCE_END.search(p.de) and nd > 1:
                continue
            seen.add(p)
            out.append(p)
    return out


_HIST_BINS = [(1, 1), (2, 2), (3, 3), (4, 5), (6, 10), (11, 20), (21, 40), (41, None)]


def length_histogram(texts: Iterable[str]) -> dict[str, int]:
    """Count of texts per length bin in whitespace words (bins 1, 2, 3, 4-5, 6-10, 11-20, 21-40, 41+),
    every bin present (0 if empty)."""
    counts = Counter()
    for t in texts:
        n = len(t.split())
        for lo, hi in _HIST_BINS:
            if n >= lo and (hi is None or n <= hi):
                counts[_bin_name(lo, hi)] += 1
                break
    return {_bin_name(lo, hi): counts.get(_bin_name(lo, hi), 0) for lo, hi in _HIST_BINS}


def _bin_name(lo, hi) -> str:
    return f"{lo}+" if hi is None else (str(lo) if lo == hi else f"{lo}-{hi}")


def nonempty_collapsed(pairs: Sequence[Pair]) -> tuple[list[Pair], int]:
    nonempty = [Pair(a, b) for a, b in pairs if a.strip() and b.strip()]
    return [Pair(collapse_whitespace(a), collapse_whitespace(b)) for a, b in nonempty], len(pairs) - len(nonempty)


def prepare_pairs(
    pairs: Sequence[Pair],
    out_dir: str | os.PathLike,
    vocab_size: int = 8000,
    n_valid: int = 500,
    n_test: int = 1000,
    seed: int = 1234,
    heldout_pool: str = "auto",
    source_info: dict | None = None,
    parse_report: ParseReport | None = None,
    columns: tuple[str, str] = ("de", "en"),
    progress: bool = True,
    hard_vocab_limit: bool = True,
    started_at: float | None = None,
) -> dict:
    """Split ``pairs`` (:func:`make_splits`), write ``train/valid/test.tsv``, ``dictionary.tsv`` (from
    train only), a joint SentencePiece model ``spm.model`` trained on both sides of train only
    (Section 5.1), and ``DATASHEET.md`` + ``datasheet.json``. Pairs with an empty side are dropped
    first (counted). Returns the datasheet dict (also written as JSON).

    Raises:
        ValueError: from :func:`make_splits` (e.g. too few pairs) or SentencePiece training.
    """
    t0 = time.time() if started_at is None else started_at
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    cleaned, empty_dropped = nonempty_collapsed(pairs)
    splits, srep = make_splits(cleaned, n_valid=n_valid, n_test=n_test, seed=seed,
                               heldout_pool=heldout_pool, return_report=True)
    t_split = time.time() - t0  # includes obtaining/parsing when started_at is given
    for name in ("train", "valid", "test"):
        write_tsv(splits[name], out / f"{name}.tsv", columns)
    dictionary = build_dictionary(splits["train"])
    write_tsv(dictionary, out / "dictionary.tsv", columns)

    t1 = time.time()
    texts = [p.de for p in splits["train"]] + [p.en for p in splits["train"]]
    if progress:
        print(f"training SentencePiece ({vocab_size} pieces) on {len(texts):,} train sides ...", file=sys.stderr)
    train_sentencepiece(texts, out / "spm.model", vocab_size=vocab_size, hard_vocab_limit=hard_vocab_limit)
    t_spm = time.time() - t1
    tok = Tokenizer.load(out / "spm.model")
    token_stats = {}
    for name in ("train", "valid", "test"):
        sp = splits[name]
        if not sp:
            continue
        de_ids = tok.encode_batch([p.de for p in sp])
        en_ids = tok.encode_batch([p.en for p in sp])
        unk = sum(i.count(tok.unk_id) for i in de_ids + en_ids)
        token_stats[name] = {
            "mean_tokens_src": round(sum(map(len, de_ids)) / len(sp), 2),
            "mean_tokens_tgt": round(sum(map(len, en_ids)) / len(sp), 2),
            "max_tokens_src": max(map(len, de_ids)),
            "max_tokens_tgt": max(map(len, en_ids)),
            "unk_tokens": unk,
        }
    sheet = {
        "source": source_info or {},
        "columns": list(columns),
        "created_unix": int(time.time()),
        "parameters": {"vocab_size": vocab_size, "n_valid": n_valid, "n_test": n_test, "seed": seed,
                       "heldout_pool": srep.heldout_pool},
        "parse": parse_report.to_dict() if parse_report is not None else None,
        "empty_pairs_dropped": empty_dropped,
        "split": srep.to_dict(),
        "counts": {},
        "dictionary_entries": len(dictionary),
        "tokenizer": {"file": "spm.model", "type": "bpe", "vocab_size": tok.vocab_size,
                      "special_ids": {"pad": tok.pad_id, "unk": tok.unk_id, "bos": tok.bos_id, "eos": tok.eos_id},
                      "trained_on": "train split, both sides (joint vocabulary, Section 5.1)",
                      "stats": token_stats},
        "timing_s": {"until_split_done": round(t_split, 1), "sentencepiece": round(t_spm, 1)},
    }
    for name in ("train", "valid", "test"):
        sp = splits[name]
        n_sent = sum(1 for p in sp if is_sentence(p.de) and is_sentence(p.en))
        sheet["counts"][name] = {
            "pairs": len(sp), "sentences": n_sent, "phrases": len(sp) - n_sent,
            f"words_hist_{columns[0]}": length_histogram(p.de for p in sp),
            f"words_hist_{columns[1]}": length_histogram(p.en for p in sp),
        }
    sheet["files_sha256"] = {name: sha256_file(out / name) for name in
                             ("train.tsv", "valid.tsv", "test.tsv", "dictionary.tsv", "spm.model")}
    sheet["timing_s"]["total"] = round(time.time() - t0, 1)
    atomic_write_text(out / "datasheet.json", json.dumps(sheet, ensure_ascii=False, indent=2) + "\n")
    atomic_write_text(out / "DATASHEET.md", _datasheet_markdown(sheet, splits))
    return sheet


def _datasheet_markdown(sheet: dict, splits: dict[str, list[Pair]]) -> str:
    src = sheet["source"]
    cols = sheet["columns"]
    L = []
    L.append(f"# Datasheet: {src.get('name', 'parallel corpus')}\n")
    L.append("## Source\n")
    for k in ("name", "description", "origin", "debian_package", "version", "file", "sha256", "license", "attribution"):
        if src.get(k):
            L.append(f"- **{k}**: {src[k]}")
    if src.get("license"):
        L.append("\nThe corpus and everything derived from it (these files, models trained on them) stay under "
                 f"the corpus license ({src['license']}); credit the authors as above.")
    L.append("\n## Splits\n")
    L.append("| split | pairs | full sentences (both sides) | phrases |")
    L.append("|---|---:|---:|---:|")
    for name, c in sheet["counts"].items():
        L.append(f"| {name} | {c['pairs']:,} | {c['sentences']:,} | {c['phrases']:,} |")
    sp = sheet["split"]
    L.append(f"\nValid and test are drawn from {'full sentences only (both sides: ends in . ! ?, 4+ words, starts upper-case, does not end in an abbreviation such as sth./etw., and has no Ding /-alternatives)' if sp['heldout_pool'] == 'sentences' else 'all pairs'}, "
             f"with seed {sheet['parameters']['seed']}; each held-out German or English sentence occurs once "
             "in valid+test and nowhere in train (compared case- and whitespace-normalised).")
    L.append("\n## Length in words (histogram)\n")
    bins = list(next(iter(sheet["counts"].values()))[f"words_hist_{cols[0]}"].keys())
    L.append("| split | side | " + " | ".join(bins) + " |")
    L.append("|---|---|" + "---:|" * len(bins))
    for name, c in sheet["counts"].items():
        for side in cols:
            h = c[f"words_hist_{side}"]
            L.append(f"| {name} | {side} | " + " | ".join(f"{h[b]:,}" for b in bins) + " |")
    L.append("\n## What was dropped, and why\n")
    pr = sheet.get("parse")
    if pr:
        L.append(f"- lines read: {pr['lines_read']:,} ({pr['comment_lines']:,} comment, {pr['blank_lines']:,} blank, "
                 f"{pr['entries']:,} entries)")
        L.append(f"- aligned sub-entries: {pr['sub_entries']:,}; pairs kept after cleaning: {pr['pairs_kept']:,}")
        L.append(f"- synonyms after the first (`;`) not used: {pr['synonyms_dropped']:,}")
        L.append(f"- lines skipped because German and English sub-entry counts differ: {pr['misaligned_lines']:,}")
        for ex in pr["misaligned_examples"][:5]:
            L.append(f"  - line {ex[0]} ({ex[1]}): `{ex[2][:150]}`")
        L.append(f"- malformed lines skipped (not exactly one ` :: `, or unbalanced parentheses): {pr['malformed_lines']:,}")
        for ex in pr["malformed_examples"][:5]:
            L.append(f"  - line {ex[0]} ({ex[1]}): `{ex[2][:150]}`")
        L.append(f"- sub-entries with a side empty after removing annotations: {pr['empty_after_cleaning']:,}")
        for ex in pr["empty_examples"][:5]:
            L.append(f"  - line {ex[0]}: `{ex[1][:150]}`")
    L.append(f"- pairs with an empty side: {sheet['empty_pairs_dropped']:,}")
    L.append(f"- duplicates (same pair after case/whitespace normalisation): {sp['duplicates_removed']:,}")
    L.append(f"- held-out candidates skipped because a side was already held out: {sp['heldout_skipped_shared_side']:,}")
    L.append(f"- train pairs removed because a side equals a held-out sentence: {sp['train_removed_exact']:,}")
    L.append(f"- train pairs removed because a side contains a held-out sentence: {sp['train_removed_substring']:,}")
    for ex in sp["removed_examples"][:8]:
        L.append(f"  - `{ex['train'][:150]}` ({ex['reason'][:120]})")
    L.append("\n## Files\n")
    L.append(f"- `train.tsv`, `valid.tsv`, `test.tsv`: UTF-8, tab-separated, header `{cols[0]}\\t{cols[1]}`, no quoting")
    L.append(f"- `dictionary.tsv`: {sheet['dictionary_entries']:,} one-word / short-phrase entries from train only "
             "(word-by-word dictionary baseline)")
    tk = sheet["tokenizer"]
    L.append(f"- `spm.model`: SentencePiece BPE, {tk['vocab_size']:,} pieces, joint German+English vocabulary "
             f"(Section 5.1) trained on the train split only; special ids {tk['special_ids']}; byte fallback on")
    L.append("\nsha256 of the files (to tell which data a model was trained on):\n")
    for name, digest in sheet.get("files_sha256", {}).items():
        L.append(f"- `{name}`: `{digest}`")
    L.append("\n## Tokens per side (SentencePiece)\n")
    L.append("| split | mean src | mean tgt | max src | max tgt | unk |")
    L.append("|---|---:|---:|---:|---:|---:|")
    for name, s in tk["stats"].items():
        L.append(f"| {name} | {s['mean_tokens_src']} | {s['mean_tokens_tgt']} | {s['max_tokens_src']} | "
                 f"{s['max_tokens_tgt']} | {s['unk_tokens']} |")
    L.append("\n## Examples\n")
    rng = random.Random(0)
    for name in ("train", "test"):
        sp_ = splits[name]
        if sp_:
            L.append(f"{name}:")
            for p in rng.sample(sp_, min(5, len(sp_))):
                L.append(f"- `{p[0]}` → `{p[1]}`")
            L.append("")
    L.append(f"Prepared in {sheet['timing_s']['total']} s.")
    return "\n".join(L) + "\n"


def prepare_ding(
    out_dir: str | os.PathLike = DEFAULT_DING_DIR,
    from_file: str | os.PathLike | None = None,
    vocab_size: int = 8000,
    n_valid: int = 500,
    n_test: int = 1000,
    seed: int = 1234,
    verify: bool = True,
    progress: bool = True,
) -> dict:
    """Obtain (:func:`obtain_ding`), parse (:func:`parse_ding`), split and write the Ding corpus to
    ``out_dir`` (train/valid/test/dictionary TSV, ``spm.model``, ``DATASHEET.md``, ``datasheet.json``).
    Valid and test are full sentences only. Returns the datasheet dict.

    Raises:
        FileNotFoundError / ValueError / RuntimeError: see :func:`obtain_ding`, :func:`parse_ding`,
        :func:`make_splits`.
    """
    out = Path(out_dir).expanduser()
    t0 = time.time()
    corpus = obtain_ding(out, from_file=from_file, verify=verify)
    sha = sha256_file(corpus)
    pairs, report = parse_ding(corpus, progress=progress)
    info = {
        "name": "Ding German-English dictionary (trans-de-en)",
        "description": "dictionary entries and example sentences; one sub-entry pair per row, first synonym each side",
        "origin": "https://dict.tu-chemnitz.de/ (upstream de-en.txt), Debian package trans-de-en",
        "debian_package": DING_DEBIAN_PACKAGE,
        "version": DING_VERSION if sha == DING_SHA256 else "unknown (sha256 differs from 1.9-6)",
        "file": str(corpus),
        "sha256": sha,
        "license": DING_LICENSE,
        "attribution": DING_ATTRIBUTION,
    }
    sheet = prepare_pairs(pairs, out, vocab_size=vocab_size, n_valid=n_valid, n_test=n_test, seed=seed,
                          heldout_pool="sentences", source_info=info, parse_report=report, progress=progress,
                          started_at=t0)
    return sheet


def _summary(sheet: dict, out: Path) -> str:
    c = sheet["counts"]
    lines = [f"wrote {out}"]
    for name in ("train", "valid", "test"):
        lines.append(f"  {name:<5} {c[name]['pairs']:>8,} pairs ({c[name]['sentences']:,} full sentences)")
    sp = sheet["split"]
    lines.append(f"  removed: {sp['duplicates_removed']:,} duplicates, {sp['train_removed_exact']:,} + "
                 f"{sp['train_removed_substring']:,} train pairs overlapping held-out sentences")
    lines.append(f"  spm.model: {sheet['tokenizer']['vocab_size']:,} pieces; datasheet: {out / 'DATASHEET.md'}")
    lines.append(f"  took {sheet['timing_s']['total']} s")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    """The parser of ``aiayn data``: one sub-command per kind of source (``all`` is routed before parsing)."""
    ap = argparse.ArgumentParser(prog="aiayn data", description="Obtain and prepare parallel data.")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, default_out=None):
        p.add_argument("--out", default=default_out, required=default_out is None, help="output folder")
        p.add_argument("--vocab-size", type=int, default=8000, help="SentencePiece pieces (default 8000)")
        p.add_argument("--n-valid", type=int, default=500)
        p.add_argument("--n-test", type=int, default=1000)
        p.add_argument("--seed", type=int, default=1234)

    p = sub.add_parser("ding", help="the Ding German-English dictionary (Debian trans-de-en)")
    p.add_argument("--from", dest="from_file", default=None, help="use this de-en.txt instead of apt-get download")
    p.add_argument("--no-verify", action="store_true", help="accept a file whose sha256 differs (newer upstream)")
    common(p, str(DEFAULT_DING_DIR))
    p = sub.add_parser("debian", help="Ding + German-English text from Debian packages (catalogues, help pages)")
    p.add_argument("--debs", default="~/.cache/aiayn/debs", help="cache folder of downloaded .deb files")
    p.add_argument("--ding-from", default=None, help="use this de-en.txt instead of apt-get download trans-de-en")
    p.add_argument("--no-download", action="store_true", help="use only .deb files already in --debs")
    p.add_argument("--n-test-general", type=int, default=1000)
    p.add_argument("--n-test-domain", type=int, default=1000)
    common(p, "~/.cache/aiayn/data/debian")
    p = sub.add_parser("tsv", help="a tab-separated parallel corpus")
    p.add_argument("file")
    p.add_argument("--src-col", default="de")
    p.add_argument("--tgt-col", default="en")
    p.add_argument("--no-header", action="store_true", help="no header line; columns are 0-based positions")
    common(p)
    p = sub.add_parser("moses", help="two line-aligned text files")
    p.add_argument("src")
    p.add_argument("tgt")
    common(p)
    p = sub.add_parser("sentence-kind", help="a copy of a prepared folder whose train_kinds.txt gives Ding's example "
                       "sentences the kind ding_sentence, for --kind-weights (aiayn.data.kinds)")
    p.add_argument("--data", required=True, help="a folder of `aiayn data debian` (or `aiayn backtranslate`)")
    p.add_argument("--out", required=True, help="the new folder (must not exist)")
    p = sub.add_parser("filter", help="a copy of a prepared folder without the worst-scored pairs of some kinds by "
                       "dual conditional cross-entropy (Junczys-Dowmunt 2018; aiayn.data.crossent_filter)")
    p.add_argument("--data", required=True, help="a prepared folder (train.tsv, train_kinds.txt)")
    p.add_argument("--out", required=True, help="the new folder (must not exist)")
    p.add_argument("--models", nargs="+", required=True, metavar="CKPT",
                   help="checkpoints of both directions (two directional ones, or one with both language tags)")
    p.add_argument("--drop", required=True, metavar="KIND=FRACTION,...",
                   help="per kind, the fraction of its pairs to drop, worst first (e.g. backtranslated=0.25)")
    p.add_argument("--batch-size", type=int, default=64, help="pairs per forward pass (default 64)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default cpu)")
    sub.add_parser("all", add_help=False, help="every folder the training recipes read, in order: debian, its "
                   "-shipspm copy, both back-translations, both sentence-kind copies (aiayn.data.chain; "
                   "`aiayn data all --help`)")
    return ap


def _filter_main(args: argparse.Namespace, out: Path) -> int:
    """``aiayn data filter``: score, drop, write (aiayn.data.crossent_filter); prints one line per kind."""
    from tqdm import tqdm

    from .crossent_filter import models_into, parse_drop, read_columns, write_filtered_folder

    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be at least 1, got {args.threads}")
    if isinstance(args.batch_size, bool) or args.batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {args.batch_size}")
    data = Path(args.data).expanduser()
    columns = read_columns(data)
    kinds_file = data / "train_kinds.txt"
    kinds = kinds_file.read_text(encoding="utf-8").split() if kinds_file.is_file() else None
    drop = parse_drop(args.drop, kinds)
    if out.exists():
        raise FileExistsError(f"{out} exists; give a new folder")
    import torch

    from ..translator import Translator

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    loaded = [Translator.load(path, device=args.device) for path in args.models]
    models = models_into(loaded, columns)
    names = {lang: str(models[lang].path or "a model") for lang in columns}
    total = sum(1 for k in kinds or () if k in drop)
    with tqdm(total=total, unit="pair", desc="scoring", dynamic_ncols=True) as bar:
        summary = write_filtered_folder(data, out, models, drop, batch_size=args.batch_size, progress=bar.update,
                                        model_names=names)
    print(f"wrote {out}:")
    for kind, s in summary.items():
        print(f"  {kind}: dropped {s['dropped']:,} of {s['scored']:,} (scores >= {s['threshold']}; median "
              f"{s['median']})")
    return 0


def cli_main(argv: list[str]) -> int:
    """``aiayn data {ding,debian,tsv,moses,sentence-kind,filter,all} ...``: prepare a data folder (``all``: every folder the
    training recipes read, :mod:`aiayn.data.chain`); returns the exit code (0 ok, 1 error, 2 bad input to ``all``)."""
    if argv[:1] == ["all"]:
        from .chain import cli_main as chain_main

        return chain_main(argv[1:])
    ap = _parser()
    args = ap.parse_args(argv)
    out = Path(args.out).expanduser()
    try:
        if args.cmd == "sentence-kind":
            from .kinds import KIND, write_sentence_kind_folder

            counts = write_sentence_kind_folder(args.data, out)
            print(f"wrote {out}: {counts.get(KIND, 0):,} Ding example sentences are now kind {KIND} "
                  f"(train kinds: {', '.join(f'{k} {n:,}' for k, n in counts.items())})")
            return 0
        if args.cmd == "filter":
            return _filter_main(args, out)
        if args.cmd == "debian":
            from .prepare_debian import debian_summary, prepare_debian  # imports .prepare: not at the top (a cycle)

            sheet = prepare_debian(out, deb_dir=args.debs, ding_from=args.ding_from, vocab_size=args.vocab_size,
                                   n_valid=args.n_valid, n_test=args.n_test, n_test_general=args.n_test_general,
                                   n_test_domain=args.n_test_domain, seed=args.seed, download=not args.no_download)
            print(debian_summary(sheet, out))
            return 0
        if args.cmd == "ding":
            sheet = prepare_ding(out, from_file=args.from_file, vocab_size=args.vocab_size, n_valid=args.n_valid,
                                 n_test=args.n_test, seed=args.seed, verify=not args.no_verify)
        else:
            if args.cmd == "tsv":
                src_col, tgt_col = args.src_col, args.tgt_col
                if args.no_header and src_col == "de" and tgt_col == "en":
                    src_col, tgt_col = 0, 1
                pairs = read_tsv(args.file, src_col, tgt_col, header=not args.no_header)
                files = [args.file]
            else:
                pairs = read_moses(args.src, args.tgt)
                files = [args.src, args.tgt]
            info = {"name": ", ".join(str(Path(f).name) for f in files),
                    "file": ", ".join(str(Path(f).expanduser().resolve()) for f in files),
                    "sha256": ", ".join(sha256_file(Path(f).expanduser()) for f in files),
                    "license": "(not recorded: fill in)"}
            sheet = prepare_pairs(pairs, out, vocab_size=args.vocab_size, n_valid=args.n_valid,
                                  n_test=args.n_test, seed=args.seed, heldout_pool="auto", source_info=info)
    except (FileNotFoundError, FileExistsError, ValueError, RuntimeError) as exc:
        print(f"aiayn data {args.cmd}: error: {exc}", file=sys.stderr)
        return 1
    print(_summary(sheet, out))
    return 0
