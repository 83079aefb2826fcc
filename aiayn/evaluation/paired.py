"""Two evaluations of the same sentences compared pair by pair: which sentences changed, and whether the difference
in corpus chrF (or BLEU) is more than the luck of which sentences a set happens to hold.

The ship rule of ``aiayn train-on`` (a candidate replaces the shipped model only when it beats it on the Ding test
split and on every development set) compares corpus scores. On sets of 39 to 100 sentences one changed sentence can
decide it: session 26's seed-40 interpolation lost the classic set by 0.48 chrF through one sentence of 39, "Die Stadt
Ratgeber weigerten ..." against "Der Stadtrat weigerte ..." for "The city councilmen refused ...". This module
says so: for each set, the sentences whose output changed with each one's sentence chrF, and the **paired bootstrap
resampling** test of Koehn (2004), "Statistical Significance Tests for Machine Translation Evaluation", as
sacreBLEU implements it (:class:`sacrebleu.significance.PairedTest`, ``test_type="bs"``): both systems are scored on
the same resampled sets, and the p-value is the share of resamples whose (centred) absolute difference exceeds the
observed one. A two-sided test of "the two are equally good"; the candidate's bootstrap mean and 95% confidence
half-width come with it.

sacreBLEU's default, approximate randomization, is not used: it counts the shuffles whose difference is *strictly*
larger than the observed one, so with a single changed sentence every shuffle ties the observed difference up to
float rounding and the p-value comes out at its floor (1e-4 for 10,000 trials) however small the change.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..files import sha256_file
from .devsets import DEVSETS_DIR, EVAL_DEV_FILE, SET_NAMES, load_devsets

__all__ = ["ChangedSentence", "PairedResult", "compare_hypotheses", "compare_files", "compare_evaluations", "summary",
           "METRICS", "DEFAULT_RESAMPLES", "DEFAULT_SEED"]

#: the corpus metrics a comparison can test (sacreBLEU's defaults, as ``aiayn evaluate`` reports them)
METRICS = ("chrf", "bleu")
#: bootstrap resamples (sacreBLEU's default for the paired bootstrap)
DEFAULT_RESAMPLES = 1000
#: the resampling's seed (sacreBLEU's default), so a comparison reads the same every time
DEFAULT_SEED = 12345
EVAL_TEST_FILE = "eval_test.json"


@dataclass(frozen=True)
class ChangedSentence:
    """One sentence whose output differs between the two evaluations.

    Attributes:
        index: its 0-based line in the set (header not counted).
        source, reference: the pair.
        baseline, candidate: the two outputs.
        baseline_chrf, candidate_chrf: sentence chrF (0-100, sacreBLEU's ``sentence_chrf``) of each.
    """

    index: int
    source: str
    reference: str
    baseline: str
    candidate: str
    baseline_chrf: float
    candidate_chrf: float

    @property
    def delta(self) -> float:
        """``candidate_chrf - baseline_chrf``."""
        return self.candidate_chrf - self.baseline_chrf


@dataclass(frozen=True)
class PairedResult:
    """The comparison of one set.

    Attributes:
        name: the set ("short", "long", "classic", "test").
        n_sentences: pairs in the set.
        metric: "chrf" or "bleu" (sacreBLEU, 0-100).
        baseline_score, candidate_score: the corpus scores.
        p_value: paired bootstrap p-value of "equally good" (1.0 when no sentence changed: nothing to test; 1.0 when
            both corpus scores are equal: no difference was observed, while sacreBLEU's count says 1 / (resamples +
            1) when every resample ties as well, e.g. two different outputs that both score 0).
        candidate_mean, candidate_ci: the candidate's bootstrap mean and 95% half-width (None when nothing changed).
        resamples, seed: the bootstrap's settings.
        changed: the sentences whose outputs differ, in set order.
    """

    name: str
    n_sentences: int
    metric: str
    baseline_score: float
    candidate_score: float
    p_value: float
    candidate_mean: float | None
    candidate_ci: float | None
    resamples: int
    seed: int
    changed: tuple[ChangedSentence, ...] = field(default_factory=tuple)

    @property
    def delta(self) -> float:
        """``candidate_score - baseline_score``."""
        return self.candidate_score - self.baseline_score

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["delta"] = self.delta
        out["changed"] = [{**asdict(c), "delta": c.delta} for c in self.changed]
        return out


def _metric(name: str):
    from sacrebleu.metrics import BLEU, CHRF

    if name not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {name!r}")
    return CHRF() if name == "chrf" else BLEU()


def compare_hypotheses(name: str, sources: Sequence[str], references: Sequence[str], baseline: Sequence[str],
                       candidate: Sequence[str], *, metric: str = "chrf", resamples: int = DEFAULT_RESAMPLES,
                       seed: int = DEFAULT_SEED) -> PairedResult:
    """Compare two systems' outputs ``baseline`` and ``candidate`` for the same ``sources`` / ``references``
    (one reference each) with sacreBLEU's paired bootstrap test (Koehn 2004) on ``metric``.

    Raises:
        ValueError: lists of different lengths, an empty set, a non-string, an unknown ``metric`` or
            ``resamples`` < 2.
    """
    from sacrebleu.metrics import CHRF
    from sacrebleu.significance import PairedTest

    scorer = _metric(metric)
    lists = {"sources": sources, "references": references, "baseline": baseline, "candidate": candidate}
    lengths = {k: len(v) for k, v in lists.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"{name}: the two evaluations do not cover the same sentences ({lengths})")
    if not sources:
        raise ValueError(f"{name}: no sentences to compare")
    if any(not isinstance(x, str) for v in lists.values() for x in v):
        raise ValueError(f"{name}: every source, reference and output must be a string")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 2:
        raise ValueError(f"resamples must be an integer >= 2, got {resamples!r}")
    chrf = CHRF()
    changed = tuple(ChangedSentence(i, s, r, b, c, chrf.sentence_score(b, [r]).score, chrf.sentence_score(c, [r]).score)
                    for i, (s, r, b, c) in enumerate(zip(sources, references, baseline, candidate)) if b != c)
    base_score = scorer.corpus_score(list(baseline), [list(references)]).score
    if not changed:
        return PairedResult(name, len(sources), metric, base_score, base_score, 1.0, None, None, resamples, seed)
    test = PairedTest([("baseline", list(baseline)), ("candidate", list(candidate))], {metric: scorer},
                      [list(references)], test_type="bs", n_samples=resamples)
    test._seed = seed  # PairedTest takes it from $SACREBLEU_SEED (default 12345) in __init__; given here instead
    _, results = test()
    (res,) = [v for k, v in results.items() if k != "System"]
    base, cand = res[0], res[1]
    p_value = 1.0 if float(base.score) == float(cand.score) else float(cand.p_value)
    return PairedResult(name, len(sources), metric, float(base.score), float(cand.score), p_value,
                        float(cand.mean), float(cand.ci), resamples, seed, changed)


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"no evaluation at {path}") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} is not a readable evaluation ({exc})") from None


def _eval_file(given: Path, name: str) -> Path:
    """``given`` itself when it is a file, else ``given/name``."""
    return given if given.is_file() else given / name


def _decoding(ev: dict[str, Any]) -> dict[str, Any]:
    """The decoding settings that change outputs (the batch size does not; a setting recorded as None is the one
    older evaluations did not record: no domain tag, no reranking)."""
    return {k: v for k, v in (ev.get("decoding") or {}).items() if k != "batch_size" and v is not None}


def _dev_results(base: dict[str, Any], cand: dict[str, Any], devsets: Path, direction: str | None, **kw: Any
                 ) -> tuple[str, list[PairedResult]]:
    dirs = sorted(set(base.get("details") or {}) & set(cand.get("details") or {}))
    if direction is None:
        if len(dirs) != 1:
            raise ValueError(f"the evaluations share the directions {dirs or 'none'}: give --direction")
        direction = dirs[0]
    if direction not in dirs:
        raise ValueError(f"both evaluations must cover {direction} (they share {dirs or 'none'})")
    if _decoding(base) != _decoding(cand):
        raise ValueError(f"the two were decoded differently ({_decoding(base)} against {_decoding(cand)}): their "
                         "outputs differ for that reason too")
    names = [n for n in SET_NAMES if n in base["details"][direction] and n in cand["details"][direction]]
    sets = load_devsets(devsets, names)
    out = []
    for n in names:
        sha = sha256_file(devsets / f"{n}.tsv")
        for ev in (base, cand):
            if (ev.get("sets") or {}).get(n, {}).get("sha256") not in (None, sha):
                raise ValueError(f"{devsets / (n + '.tsv')} has changed since one of the evaluations was made "
                                 "(its sha256 differs): evaluate both again")
        src, ref = ([en for en, _ in sets[n]], [de for _, de in sets[n]]) if direction == "en-de" else \
            ([de for _, de in sets[n]], [en for en, _ in sets[n]])
        hyps = [ev["details"][direction][n].get("hypotheses") for ev in (base, cand)]
        if any(h is None for h in hyps):
            raise ValueError(f"an evaluation of the {n} set holds no outputs (evaluate it again with aiayn evaluate-dev)")
        out.append(compare_hypotheses(n, src, ref, *hyps, **kw))
    return direction, out


def _test_result(base: dict[str, Any], cand: dict[str, Any], data: Path | None, **kw: Any) -> PairedResult | None:
    """The test split's comparison, or None when either evaluation lacks its outputs (``aiayn evaluate
    --hypotheses`` stores them)."""
    from ..training.pipeline import load_split

    if "hypotheses" not in base or "hypotheses" not in cand:
        return None
    if base.get("direction") != cand.get("direction") or base.get("split") != cand.get("split"):
        raise ValueError(f"the test evaluations differ in direction or split ({base.get('direction')} "
                         f"{base.get('split')} against {cand.get('direction')} {cand.get('split')})")
    if _decoding(base) != _decoding(cand):
        raise ValueError(f"the test split was decoded differently ({_decoding(base)} against {_decoding(cand)})")
    shas = {(ev.get("data") or {}).get("split_file_sha256") for ev in (base, cand)}
    if len(shas) != 1:
        raise ValueError("the two test evaluations were made on different split files (their sha256 differ)")
    split = str(base["split"])
    folder = data or Path((cand.get("data") or {}).get("data_dir") or "")
    path = folder / f"{split}.tsv"
    if not path.is_file():
        raise FileNotFoundError(f"no {split}.tsv at {folder} to read the references from: give --data")
    if sha256_file(path) not in shas:
        raise ValueError(f"{path} is not the split file the evaluations were made on (its sha256 differs)")
    src, ref = load_split(folder, split, str(base["direction"]))
    if base.get("limit"):
        src, ref = src[:int(base["limit"])], ref[:int(base["limit"])]
    return compare_hypotheses(split, src, ref, base["hypotheses"], cand["hypotheses"], **kw)


def compare_files(baseline_dev: str | Path, candidate_dev: str | Path, baseline_test: str | Path | None = None,
                  candidate_test: str | Path | None = None, *, devsets: str | Path = DEVSETS_DIR,
                  data: str | Path | None = None, direction: str | None = None, metric: str = "chrf",
                  resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Compare two ``aiayn evaluate-dev`` JSONs (their outputs are always stored) and, when both test JSONs are given
    and hold their outputs (``aiayn evaluate --hypotheses``), the test split too (references from ``data``, else
    the data folder the evaluation names, checked against the split file's recorded sha256).

    Returns:
        ``{"direction": str, "sets": [PairedResult, ...] (the test split first), "test_skipped": str | None}`` (why
        the test split was left out, when it was).

    Raises:
        FileNotFoundError: a missing evaluation, or no references for the test split.
        ValueError: unreadable evaluations; different directions, decodings or set files; an unknown metric.
    """
    kw = dict(metric=metric, resamples=resamples, seed=seed)
    _metric(metric)
    b_dev, c_dev = _read(Path(baseline_dev).expanduser()), _read(Path(candidate_dev).expanduser())
    direction, sets = _dev_results(b_dev, c_dev, Path(devsets).expanduser(), direction, **kw)
    skipped = None
    if baseline_test is None or candidate_test is None:
        skipped = "no test evaluation for both"
    else:
        b_test, c_test = _read(Path(baseline_test).expanduser()), _read(Path(candidate_test).expanduser())
        if b_test.get("direction") != direction:
            skipped = f"the test evaluations are {b_test.get('direction')}, not {direction}"
        else:
            test = _test_result(b_test, c_test, Path(data).expanduser() if data else None, **kw)
            if test is None:
                skipped = "a test evaluation holds no outputs (aiayn evaluate --hypotheses stores them)"
            else:
                sets.insert(0, test)
    return {"direction": direction, "sets": sets, "test_skipped": skipped}


def compare_evaluations(baseline: str | Path, candidate: str | Path, **kw: Any) -> dict[str, Any]:
    """:func:`compare_files` of the evaluations stored beside two checkpoints (``eval_dev.json`` and, when both
    folders hold one, ``eval_test.json``); ``baseline`` / ``candidate`` may also name the ``eval_dev.json`` files
    themselves (the test split is then left out). Same keywords, returns and errors."""
    b, c = Path(baseline).expanduser(), Path(candidate).expanduser()
    tests = [p / EVAL_TEST_FILE if p.is_dir() and (p / EVAL_TEST_FILE).is_file() else None for p in (b, c)]
    return compare_files(_eval_file(b, EVAL_DEV_FILE), _eval_file(c, EVAL_DEV_FILE), *tests, **kw)


def summary(result: dict[str, Any], *, sentences_up_to: int = 25) -> dict[str, Any]:
    """A comparison as JSON for a verdict: per set its size, scores, delta, p-value and the count of changed
    sentences, and the changed sentences themselves when there are at most ``sentences_up_to`` of them."""
    out: dict[str, Any] = {"direction": result["direction"], "test_skipped": result["test_skipped"], "sets": {}}
    for r in result["sets"]:
        d = r.to_dict()
        d["n_changed"] = len(r.changed)
        if len(r.changed) > sentences_up_to:
            d.pop("changed")
        out["sets"][r.name] = d
    return out


def _fmt_set(r: PairedResult) -> str:
    ci = "" if r.candidate_ci is None else f"{r.candidate_mean:.2f} ± {r.candidate_ci:.2f}"
    return (f"{r.name:<10}{r.n_sentences:>10,}{len(r.changed):>9,}{r.baseline_score:>10.2f}{r.candidate_score:>11.2f}"
            f"{r.delta:>+8.2f}{r.p_value:>8.3f}  {ci}")


def _fmt_changed(r: PairedResult, show: int) -> list[str]:
    """The set's changed sentences, losses first: all of them, or the ``show`` largest losses and gains."""
    if not r.changed or show <= 0:
        return []
    ranked = sorted(r.changed, key=lambda c: (c.delta, c.index))
    picked = ranked if len(ranked) <= 2 * show else ranked[:show] + ranked[-show:]
    lines = [f"\n{r.name}: {len(r.changed)} of {r.n_sentences} sentences changed"
             + ("" if picked is ranked else f" (the {show} largest losses and gains in sentence chrF)")]
    for c in picked:
        lines += [f"  [{c.index}] {c.source}", f"       reference  {c.reference}",
                  f"       baseline  {c.baseline_chrf:5.1f}  {c.baseline}",
                  f"       candidate {c.candidate_chrf:5.1f}  {c.candidate}   ({c.delta:+.1f})"]
    return lines


def report_lines(result: dict[str, Any], *, show: int = 5) -> list[str]:
    """The comparison as the text ``aiayn compare-evals`` prints."""
    sets = result["sets"]
    first = sets[0]
    lines = [f"{result['direction']}, {first.metric}: paired bootstrap resampling (Koehn 2004, sacreBLEU; "
             f"{first.resamples:,} resamples, seed {first.seed}); p: the chance of a difference this large if the two "
             "were equally good",
             f"{'set':<10}{'sentences':>10}{'changed':>9}{'baseline':>10}{'candidate':>11}{'delta':>8}{'p':>8}  "
             "candidate mean ± 95%"]
    lines += [_fmt_set(r) for r in sets]
    if result["test_skipped"]:
        lines.append(f"(test split left out: {result['test_skipped']})")
    for r in sets:
        lines += _fmt_changed(r, show)
    return lines


def cli_main(argv: list[str] | None = None) -> int:
    """``aiayn compare-evals BASELINE CANDIDATE``: :func:`compare_evaluations` printed (and ``--out`` JSON).
    Returns 0, or 2 with one line on stderr for missing or mismatched evaluations and bad options."""
    import argparse
    import sys

    from ..files import atomic_write_text

    ap = argparse.ArgumentParser(prog="aiayn compare-evals", description=(
        "Compare two checkpoints' stored evaluations sentence by sentence: which outputs changed on each development "
        "set (and the test split, when both eval_test.json hold their outputs: aiayn evaluate --hypotheses), and "
        "whether each difference in corpus chrF is more than chance (paired bootstrap resampling, Koehn 2004)."))
    ap.add_argument("baseline", help="checkpoint folder (its eval_dev.json, eval_test.json) or an eval_dev.json, e.g. "
                                     "checkpoints/en-de")
    ap.add_argument("candidate", help="the same for the other side, e.g. a train-on candidate")
    ap.add_argument("--devsets", default=str(DEVSETS_DIR), help="development sets folder (default: assets/devsets)")
    ap.add_argument("--data", default=None, help="data folder holding the test split's references (default: the one "
                                                  "the evaluation names)")
    ap.add_argument("--direction", choices=["en-de", "de-en"], default=None,
                    help="the direction to compare (default: the one both evaluations hold)")
    ap.add_argument("--metric", choices=METRICS, default="chrf", help="corpus metric tested (default chrf)")
    ap.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES, help="bootstrap resamples (default 1000)")
    ap.add_argument("--show", type=int, default=5, help="changed sentences shown per set: all when at most twice "
                                                         "this many, else this many largest losses and gains (0: none)")
    ap.add_argument("--out", default=None, help="also write the comparison as JSON here (every changed sentence)")
    args = ap.parse_args(argv)
    try:
        result = compare_evaluations(args.baseline, args.candidate, devsets=args.devsets, data=args.data,
                                     direction=args.direction, metric=args.metric, resamples=args.resamples)
    except (FileNotFoundError, ValueError) as exc:
        print(f"aiayn compare-evals: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report_lines(result, show=max(0, args.show))))
    if args.out:
        atomic_write_text(Path(args.out), json.dumps(summary(result, sentences_up_to=10**9), indent=2) + "\n")
        print(f"\nwrote {args.out}")
    return 0
