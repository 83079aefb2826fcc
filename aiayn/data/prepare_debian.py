"""``aiayn data debian``: Ding plus German-English text from Debian packages.

:func:`prepare_debian` reads the gettext catalogues and help pages of Debian packages (:mod:`aiayn.data.debian`,
:mod:`aiayn.data.gettext_pairs`, :mod:`aiayn.data.help_pages`), cleans them by stated rules, adds the full-sentence
pairs to Ding's train split (Ding's valid and test stay exactly those of ``aiayn data ding``), draws two more test
splits (``test_general.tsv`` from the new sources, ``test_domain.tsv`` from the held-out packages), keeps every
split leak-free, trains the joint SentencePiece model on both sides of the combined train (Section 5.1) and writes
the datasheet (every source with package, version, file, sha256 and licence). :func:`debian_summary` is the
command's closing summary. See docs/data.md.
"""
from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Sequence

from tqdm import tqdm

from ..files import atomic_write_text, sha256_file
from ..tokenizer import train_sentencepiece
from .corpora import Pair, write_tsv
from .ding import DING_ATTRIBUTION, DING_DEBIAN_PACKAGE, DING_LICENSE, DING_VERSION, obtain_ding, parse_ding
from .game_text import GAME_RULES
from .gettext_pairs import RULES, clean_pairs
from .prepare import build_dictionary, length_histogram, nonempty_collapsed
from .splits import is_sentence, make_splits, normalize

__all__ = ["prepare_debian", "debian_summary", "load_train_weights"]


def prepare_debian(
    out_dir: str | os.PathLike = "~/.cache/aiayn/data/debian",
    deb_dir: str | os.PathLike = "~/.cache/aiayn/debs",
    ding_from: str | os.PathLike | None = None,
    packages: Sequence[str] | None = None,
    vocab_size: int = 8000,
    n_valid: int = 500,
    n_test: int = 1000,
    n_test_general: int = 1000,
    n_test_domain: int = 1000,
    seed: int = 1234,
    download: bool = True,
    progress: bool = True,
    verify: bool = True,
    domain_packages: Sequence[str] | None = None,
    hard_vocab_limit: bool = True,
) -> dict:
    """Ding plus German-English pairs from Debian packages (:mod:`aiayn.data.debian`), in one folder.

    Ding is split exactly as :func:`prepare_ding` splits it (same ``valid.tsv``/``test.tsv``). The Debian pairs
    (cleaned, deduplicated) lose every pair that equals or quotes a Ding valid/test sentence; ``n_test_general``
    full-sentence pairs drawn from them (seed ``seed``) form ``test_general.tsv``; the held-out packages'
    catalogues give ``test_domain.tsv``; every other Debian pair joins Ding's train, and the combined train loses
    every pair that equals or quotes a test_general/test_domain sentence. Then ``dictionary.tsv``, a joint
    SentencePiece model on both sides of the combined train, ``DATASHEET.md`` and ``datasheet.json`` (no
    timestamps: the same .debs give the same files; wall times go to ``timing.json``).

    ``packages`` (default :data:`~aiayn.data.debian.TRAIN_PACKAGES`) and ``domain_packages`` (default
    :data:`~aiayn.data.debian.HELD_OUT_DEBS`) name the packages read; ``verify`` and ``hard_vocab_limit`` are
    passed to :func:`obtain_ding` and SentencePiece training (tests use small fixtures).

    Raises:
        FileNotFoundError / RuntimeError: a package cannot be obtained or read (see :func:`obtain_debs`).
        ValueError: a held-out package in ``packages``, or too few held-out candidates.
    """
    from . import debian as deb  # function-level: polib and dpkg-deb are only needed here
    t0 = time.time()
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    packages = tuple(packages if packages is not None else deb.TRAIN_PACKAGES)
    for p in packages:
        deb.check_not_held_out(p)
    domain_packages = tuple(domain_packages if domain_packages is not None else deb.HELD_OUT_DEBS)
    companions = [deb.HELP_COMPANIONS[p] for p in packages if p in deb.HELP_COMPANIONS]
    paths = deb.obtain_debs(list(packages) + companions + list(domain_packages), deb_dir, download=download)
    corpus = obtain_ding(out, from_file=ding_from, verify=verify)
    ding_pairs, ding_report = parse_ding(corpus, progress=progress)
    cleaned, empty_dropped = nonempty_collapsed(ding_pairs)
    dsplits, drep = make_splits(cleaned, n_valid=n_valid, n_test=n_test, seed=seed, heldout_pool="sentences",
                                return_report=True)
    t_ding = time.time() - t0
    records, tagged = _read_train_packages(packages, paths, deb_dir, download, progress)
    domain_raw, domain_records = _read_domain_packages(domain_packages, paths)
    built = _combine(tagged, dsplits, domain_raw, n_test_general, n_test_domain, seed)
    splits = built["splits"]
    for name, sp in splits.items():
        write_tsv(sp, out / f"{name}.tsv")
    kinds = _train_kinds(splits["train"], set(dsplits["train"]), built["owner"])
    atomic_write_text(out / "train_kinds.txt", "".join(k + "\n" for k in kinds))
    dictionary = build_dictionary(splits["train"])
    write_tsv(dictionary, out / "dictionary.tsv")
    t_pairs = time.time() - t0

    t1 = time.time()
    train = splits["train"]
    if progress:
        print(f"training SentencePiece ({vocab_size} pieces) on {2 * len(train):,} train sides ...", file=sys.stderr)
    train_sentencepiece([q.de for q in train] + [q.en for q in train], out / "spm.model", vocab_size=vocab_size,
                        hard_vocab_limit=hard_vocab_limit)
    t_spm = time.time() - t1

    params = {"vocab_size": vocab_size, "n_valid": n_valid, "n_test": n_test, "n_test_general": n_test_general,
              "n_test_domain": n_test_domain, "seed": seed}
    ding = {"debian_package": DING_DEBIAN_PACKAGE, "version": DING_VERSION, "file": "de-en.txt",
            "sha256": sha256_file(corpus), "license": DING_LICENSE, "attribution": DING_ATTRIBUTION,
            "parse": {**ding_report.to_dict(), "source": "de-en.txt"}, "empty_pairs_dropped": empty_dropped,
            "split": drep.to_dict()}
    sheet = _datasheet(out, params, ding, records, domain_records, built, kinds, len(dictionary))
    atomic_write_text(out / "datasheet.json", json.dumps(sheet, ensure_ascii=False, indent=2) + "\n")
    atomic_write_text(out / "DATASHEET.md", _debian_datasheet_markdown(sheet, splits))
    timing = {"debs_found_ding_split_s": round(t_ding, 1), "until_pairs_written_s": round(t_pairs, 1),
              "sentencepiece_s": round(t_spm, 1), "total_s": round(time.time() - t0, 1)}
    atomic_write_text(out / "timing.json", json.dumps(timing, indent=2) + "\n")
    sheet["timing_s"] = timing
    return sheet


def _read_train_packages(packages, paths, deb_dir, download, progress) -> tuple[list[dict], list]:
    """Census records and cleaned ``(Pair, package, normalised)`` of the training packages, in package order."""
    from . import debian as deb
    records, tagged = [], []
    for p in tqdm(packages, desc="Debian packages", unit="pkg", disable=not progress):
        info = deb.read_deb(paths[p], deb.STORY_SOURCES.get(p, ()))
        if not info["copyright"].strip() and info["doc_link"]:  # licence from the package the doc folder links to
            link = deb.read_deb(deb.obtain_debs([info["doc_link"]], deb_dir, download=download)[info["doc_link"]])
            info["copyright"] = link["copyright"]
        comp = deb.read_deb(paths[deb.HELP_COMPANIONS[p]]) if p in deb.HELP_COMPANIONS else None
        kept, rec = deb.package_pairs(info, comp)
        records.append(rec)
        tagged.extend((Pair(d, e), p, norm) for d, e, norm in kept)
    return records, tagged


def _read_domain_packages(domain_packages, paths) -> tuple[list[Pair], list[dict]]:
    """Placeholder-free cleaned pairs of the held-out packages' catalogues (for ``test_domain.tsv``) and their
    census records."""
    from . import debian as deb
    domain_raw, domain_records = [], []
    for p in domain_packages:
        info = deb.read_deb(paths[p])
        counts: dict = {}
        raw, n, _ = deb.catalogue_pairs(info, counts, skip_held_out=False)
        kept = clean_pairs(raw, counts)
        domain_raw.extend(Pair(d, e) for d, e, norm in kept if not norm)
        domain_records.append({"package": info["package"], "version": info["version"], "file": info["file"],
                               "sha256": info["sha256"], "licence": deb.licence_of(info["copyright"]),
                               "messages_read": n, "pairs_kept": len(kept)})
    return domain_raw, domain_records


def _dedup(pairs) -> list[Pair]:
    seen, out = set(), []
    for q in pairs:
        k = (normalize(q.de), normalize(q.en))
        if k not in seen:
            seen.add(k)
            out.append(q)
    return out


def _combine(tagged, dsplits, domain_raw, n_test_general: int, n_test_domain: int, seed: int) -> dict:
    """The five splits from Ding's splits and the Debian pairs: dedup the Debian pairs (first occurrence in
    package order), remove Ding valid/test leaks, draw test_general (placeholder-free) and test_domain, join the
    rest to Ding's train (dedup) and remove test_general/test_domain leaks from it. Returns the splits, the
    owning package of each Debian pair, the Debian pairs kept and the counts of each step."""
    from . import debian as deb
    seen, uniq, owner, normalised = set(), [], {}, set()
    for pair, p, norm in tagged:
        k = (normalize(pair.de), normalize(pair.en))
        if k not in seen:
            seen.add(k)
            uniq.append(pair)
            owner[pair] = p
            if norm:
                normalised.add(pair)
    ding_held = {normalize(s) for sp in ("valid", "test") for q in dsplits[sp] for s in q}
    debian_pairs, ding_exact, ding_sub = deb.remove_leaks(uniq, ding_held)
    taken = set(ding_held)
    general = deb.draw_heldout([q for q in debian_pairs if q not in normalised], n_test_general, seed, taken)
    domain = deb.draw_heldout(list(dict.fromkeys(domain_raw)), n_test_domain, seed, taken)
    if len(general) < n_test_general:
        raise ValueError(f"only {len(general)} full-sentence Debian pairs for test_general (wanted {n_test_general})")
    new_held = {normalize(s) for q in general + domain for s in q}
    gset = set(general)
    train = _dedup(dsplits["train"] + [q for q in debian_pairs if q not in gset])
    cross_dups = len(dsplits["train"]) + len(debian_pairs) - len(gset) - len(train)
    train, new_exact, new_sub = deb.remove_leaks(train, new_held)
    stats = {"pairs_after_cleaning": len(tagged), "duplicates_removed": len(tagged) - len(uniq),
             "removed_equal_to_ding_heldout": ding_exact, "removed_quoting_ding_heldout": ding_sub,
             "duplicates_of_ding_train": cross_dups, "train_removed_equal_to_new_heldout": new_exact,
             "train_removed_quoting_new_heldout": new_sub}
    return {"splits": {"train": train, "valid": dsplits["valid"], "test": dsplits["test"],
                       "test_general": general, "test_domain": domain},
            "owner": owner, "debian_pairs": debian_pairs, "stats": stats}


def _train_kinds(train: list[Pair], ding_train: set, owner: dict) -> list[str]:
    """The kind of text of every train pair (``"ding"`` or :func:`~aiayn.data.debian.kind_of` its package)."""
    from . import debian as deb
    return ["ding" if q in ding_train else deb.kind_of(owner[q]) for q in train]


def _datasheet(out: Path, params: dict, ding: dict, records: list, domain_records: list, built: dict,
               kinds: list[str], n_dictionary: int) -> dict:
    """The datasheet (``datasheet.json``): sources with their per-split counts, rules, leak removal, the kinds of
    text and their default weights, and the sha256 of every file written."""
    from . import debian as deb
    splits, owner = built["splits"], built["owner"]
    train_set = set(splits["train"])
    in_train: dict = {}
    for q in built["debian_pairs"]:
        if q in train_set:
            in_train[owner[q]] = in_train.get(owner[q], 0) + 1
    for r in records:
        r["pairs_in_train"] = in_train.get(r["package"], 0)
        r["pairs_in_test_general"] = sum(1 for q in splits["test_general"] if owner[q] == r["package"])
    counts = {name: {"pairs": len(sp), "sentences": sum(1 for q in sp if is_sentence(q.de) and is_sentence(q.en)),
                     "words_hist_de": length_histogram(q.de for q in sp),
                     "words_hist_en": length_histogram(q.en for q in sp)} for name, sp in splits.items()}
    n_debian_train = sum(in_train.values())
    counts["train"]["from_ding"] = len(splits["train"]) - n_debian_train
    counts["train"]["from_debian"] = n_debian_train
    rule_totals: dict = {}
    for r in records:
        for k, v in r["rules"].items():
            rule_totals[k] = rule_totals.get(k, 0) + v
    kind_counts = {k: kinds.count(k) for k in deb.KIND_WEIGHTS}
    files = ("train.tsv", "valid.tsv", "test.tsv", "test_general.tsv", "test_domain.tsv", "dictionary.tsv",
             "spm.model", "train_kinds.txt")
    return {
        "name": "Ding + German-English text from Debian packages (aiayn data debian)",
        "parameters": params, "ding": ding, "debian_sources": records, "held_out_sources": domain_records,
        "held_out_packages": sorted(deb.HELD_OUT), "rules": {**RULES, **GAME_RULES}, "rule_counts": rule_totals,
        "debian": built["stats"], "counts": counts, "dictionary_entries": n_dictionary,
        "kinds": {"file": "train_kinds.txt", "train_pairs": kind_counts, "default_weights": dict(deb.KIND_WEIGHTS),
                  "what": "one kind per train.tsv row (header excluded); a training mix may repeat a pair of kind k "
                          "default_weights[k] times per epoch"},
        "tokenizer": {"file": "spm.model", "type": "bpe", "vocab_size": params["vocab_size"],
                      "trained_on": "combined train split, both sides (joint vocabulary, Section 5.1)"},
        "files_sha256": {f: sha256_file(out / f) for f in files},
    }


def load_train_weights(data_dir: str | os.PathLike, weights: dict[str, float] | None = None) -> list[float]:
    """One weight per ``train.tsv`` row of a folder prepared by :func:`prepare_debian`: the weight of its kind in
    ``train_kinds.txt`` (``weights``, default the folder's ``datasheet.json`` default weights).

    Raises:
        FileNotFoundError: the folder has no ``train_kinds.txt`` (prepared before kinds were recorded).
        ValueError: a kind without a weight.
    """
    d = Path(data_dir).expanduser()
    kinds = (d / "train_kinds.txt").read_text(encoding="utf-8").split()
    if weights is None:
        weights = json.loads((d / "datasheet.json").read_text(encoding="utf-8"))["kinds"]["default_weights"]
    missing = sorted(set(kinds) - set(weights))
    if missing:
        raise ValueError(f"no weight for kind(s) {', '.join(missing)} (weights given: {', '.join(sorted(weights))})")
    return [float(weights[k]) for k in kinds]


def _debian_datasheet_markdown(sheet: dict, splits: dict[str, list[Pair]]) -> str:
    d, c = sheet["ding"], sheet["counts"]
    L = [f"# Datasheet: {sheet['name']}\n", "## Splits\n",
         "| split | pairs | full sentences (both sides) | what |", "|---|---:|---:|---|"]
    what = {"train": f"Ding train ({c['train']['from_ding']:,}) + Debian ({c['train']['from_debian']:,})",
            "valid": "Ding, exactly as `aiayn data ding`", "test": "Ding, exactly as `aiayn data ding`",
            "test_general": "full sentences drawn from the Debian sources (general test)",
            "test_domain": "full sentences from the held-out packages' catalogues (domain test)"}
    for name, cc in c.items():
        L.append(f"| {name} | {cc['pairs']:,} | {cc['sentences']:,} | {what[name]} |")
    L.append("\nNo held-out sentence (valid, test, test_general, test_domain; either side, compared case- and "
             "whitespace-normalised) is a side of a train pair or a substring of one (4+ words), and no sentence "
             "occurs in two held-out sets.")
    L.append("\n## Sources\n")
    L.append(f"- Ding: Debian `{d['debian_package']}` {d['version']}, `{d['file']}` sha256 `{d['sha256']}`, "
             f"{d['license']}. {d['attribution']}.")
    L.extend(_sources_table(sheet["debian_sources"]))
    L.append("\nFull sha256 digests and .deb file names: `datasheet.json` (`debian_sources`). Each package keeps its "
             "own licence (see its `/usr/share/doc/PACKAGE/copyright`); models trained on this data must name them.")
    L.append("\nHeld out (never training data): the catalogues of " + ", ".join(sheet["held_out_packages"]) +
             "; they feed `test_domain.tsv` only:\n")
    for r in sheet["held_out_sources"]:
        L.append(f"- {r['package']} {r['version']} ({r['licence'][:40]}): {r['messages_read']:,} messages, "
                 f"{r['pairs_kept']:,} pairs kept")
    k = sheet["kinds"]
    L.append("\n## Kinds of text and weights\n")
    L.append(f"`{k['file']}`: {k['what']}.\n")
    L.append("| kind | train pairs | default weight |")
    L.append("|---|---:|---:|")
    L.extend(f"| {name} | {n:,} | {k['default_weights'][name]} |" for name, n in k["train_pairs"].items())
    L.append("\n## Cleaning rules (counts: pairs or messages each rule changed or dropped)\n")
    for k, v in sheet["rules"].items():
        L.append(f"- `{k}` ({sheet['rule_counts'].get(k, 0):,}): {v}")
    for k, v in sheet["rule_counts"].items():
        if k not in sheet["rules"]:
            L.append(f"- `{k}`: {v:,}")
    L.append("- help pages: blocks paired in document order when both pages have the same block structure, else by "
             "element `id`; a block pair is cut into sentences when both sides give the same number of sentences")
    L.append("\n## Deduplication and leaks\n")
    for k, v in sheet["debian"].items():
        L.append(f"- {k.replace('_', ' ')}: {v:,}")
    L.append("\n## Files\n")
    L.append("- `*.tsv`: UTF-8, tab-separated, header `de\\ten`, no quoting; `spm.model`: SentencePiece BPE, "
             f"{sheet['tokenizer']['vocab_size']:,} pieces, trained on both sides of the combined train")
    for name, digest in sheet["files_sha256"].items():
        L.append(f"- `{name}`: `{digest}`")
    L.append("\n## Examples\n")
    rng = random.Random(0)
    for name in ("test_general", "test_domain"):
        if splits[name]:
            L.append(f"{name}:")
            L.extend(f"- `{q.de}` → `{q.en}`" for q in rng.sample(splits[name], min(5, len(splits[name]))))
            L.append("")
    return "\n".join(L) + "\n"


def _sources_table(records: list[dict]) -> list[str]:
    L = ["- Debian packages (Debian 12 bookworm; messages = catalogue messages + aligned help blocks + game texts "
         "read; kept = pairs after cleaning; train/test_general = after deduplication and leak removal):\n",
         "| package | version | licence | kind | .mo | help pages | game files | messages | kept | train | "
         "test_general | .deb sha256 |",
         "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    recs = sorted(records, key=lambda r: -r["pairs_kept"])
    for r in recs:
        comp = f" (+ `{r['companion']['package']}` {r['companion']['version']}, sha256 `{r['companion']['sha256'][:16]}…`)" \
            if r.get("companion") else ""
        L.append(f"| {r['package']}{comp} | {r['version']} | {r['licence'][:60]} | {r['kind']} | {r['mo_files']} | "
                 f"{r['help_pages']} | {r['story_files']} | {r['messages_read']:,} | {r['pairs_kept']:,} | "
                 f"{r['pairs_in_train']:,} | {r['pairs_in_test_general']:,} | `{r['sha256'][:16]}…` |")
    tot = lambda k: sum(r[k] for r in recs)  # noqa: E731
    L.append(f"| **total** ({len(recs)} packages) | | | | {tot('mo_files')} | {tot('help_pages')} | "
             f"{tot('story_files')} | {tot('messages_read'):,} | {tot('pairs_kept'):,} | {tot('pairs_in_train'):,} | "
             f"{tot('pairs_in_test_general'):,} | |")
    return L


def debian_summary(sheet: dict, out: Path) -> str:
    lines = [f"wrote {out}"]
    for name, c in sheet["counts"].items():
        lines.append(f"  {name:<12} {c['pairs']:>8,} pairs ({c['sentences']:,} full sentences)")
    lines.append(f"  train from Debian: {sheet['counts']['train']['from_debian']:,} pairs from "
                 f"{sum(1 for r in sheet['debian_sources'] if r['pairs_in_train'])} packages; datasheet: "
                 f"{out / 'DATASHEET.md'}")
    lines.append(f"  took {sheet['timing_s']['total_s']} s")
    return "\n".join(lines)
