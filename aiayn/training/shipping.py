"""``aiayn ship``: put a candidate that ``aiayn train-on`` judged better into ``checkpoints/`` (issue 21, "training
that goes on"), and nothing else.

The rule of the project (README, docs/training.md): a candidate replaces a shipped checkpoint only when its chrF is
higher on the Ding test split *and* on every development set. ``aiayn train-on`` writes that judgement into
``<out>/verdict.json``; this command reads it back instead of trusting the caller:

1. **The verdict chain.** The candidate (``<out>/candidate``, or the interpolation ``<out>/interp-W`` the verdict
   chose) must have beaten the folder it was judged against, with a model card. When that folder is itself a judged
   candidate (a climb, ``train-on --climb``, in which each round starts from the last winner), its own verdict is
   followed, and so on, until a folder whose weights are the target's (``model.safetensors`` by SHA-256): strict
   "higher on every set" is transitive, so the last candidate beats the target. A verdict that judged other weights
   than the target holds (the target moved since, or it was judged against another model) is refused, and so is one
   judged on other development sets than today's (a set edited or grown since, as the classic set was in session 39,
   while a background run judged on the copy of the code it started with), or on sets it cannot name.
2. **The copy.** :func:`aiayn.training.continuous.ship` (atomic; the shipped IBM Model 1 baseline kept), without the
   candidate's ``eval_valid.json`` (the valid split chose the interpolation weight; the shipped folder carries the
   test split's and the development sets' evaluations).
3. **Paths.** A candidate judged against a copy of the shipped folder (``~/.cache/aiayn/shipped-en-de``, what a
   background run should start from so that a ship does not pull the weights from under it) names that copy in its
   ``config.json`` meta, its evaluation files and its card; they are rewritten to the target's name
   (``checkpoints/en-de``), which is what the copy was.

Not a part of the paper.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..checkpoint_format import weights_sha256
from ..lineage import short_path
from .continuous import REPO, devset_digests, ship
from .continuous import _json_or_empty as _read_json

#: the files of a shipped checkpoint that may name the folder a candidate started from
TEXT_FILES = ("config.json", "MODEL_CARD.md", "eval_test.json", "eval_test_general.json", "eval_dev.json")
#: how to judge a checkpoint again (a soup of one ingredient is that checkpoint as it is)
_REJUDGE = "`aiayn soup {here} --out DIR --judge --data DATA` (a soup of one is the checkpoint as it is)"
#: a climb longer than this is a loop of verdicts, not a climb
MAX_LINKS = 50


class ShipRefused(ValueError):
    """The candidate cannot be shipped over the target; the message says why and what to do."""


def _same(a: str | Path | None, b: Path) -> bool:
    return a is not None and Path(a).expanduser().resolve() == b.resolve()


def _weights_sha(folder: Path) -> str | None:
    try:
        return weights_sha256(folder)
    except FileNotFoundError:
        return None


def _judged_against_sha(report: dict[str, Any], against: Path) -> str | None:
    """SHA-256 of the weights the verdict ``report`` judged against: as recorded (``shipped_sha256``, written since
    session 29), else those of the folder if it is still there, else the ``model_sha256`` of the shipped side's
    development-set evaluation the verdict names."""
    if report.get("shipped_sha256"):
        return report["shipped_sha256"]
    sha = _weights_sha(against)
    if sha is None:
        dev = (report.get("shipped_evals") or {}).get("dev")
        sha = _read_json(Path(dev)).get("model_sha256") if dev else None
    return sha


def _judged_on_devsets(report: dict[str, Any]) -> dict[str, str] | None:
    """``{set name: SHA-256}`` of the development sets the verdict ``report`` was judged on: as recorded
    (``devsets``, written since session 39), else the sets the shipped side's development-set evaluation it names
    recorded (both sides are scored on the same files), else None (unknown)."""
    if isinstance(report.get("devsets"), dict):
        return report["devsets"]
    dev = (report.get("shipped_evals") or {}).get("dev")
    sets = _read_json(Path(dev)).get("sets") if dev else None
    if not isinstance(sets, dict) or not sets:
        return None
    return {name: s.get("sha256") if isinstance(s, dict) else None for name, s in sets.items()}


def verdict_link(candidate: Path) -> dict[str, Any]:
    """What ``<candidate>/../verdict.json`` says of ``candidate``: ``{"candidate", "against" (Path), "against_sha256",
    "beats", "carded", "scores", "against_scores", "devsets", "verdict_file"}``, for the plain candidate
    (``<out>/candidate``) or the interpolation the verdict chose (``<out>/interp-W``); ``devsets``:
    :func:`_judged_on_devsets`.

    Raises:
        ShipRefused: no verdict beside it, or one that does not name it.
    """
    vfile = candidate.parent / "verdict.json"
    report = _read_json(vfile)
    if not report:
        raise ShipRefused(f"{candidate} has no verdict beside it ({vfile}): only a candidate that `aiayn train-on` "
                          "judged can be shipped")
    against = Path(report.get("shipped", "")).expanduser()
    link = {"candidate": candidate, "against": against, "against_sha256": _judged_against_sha(report, against),
            "against_scores": (report.get("scores") or {}).get("shipped") or {}, "devsets": _judged_on_devsets(report),
            "verdict_file": vfile}
    interp = report.get("interpolation") or {}
    if _same(report.get("candidate"), candidate):
        stage = _read_json(candidate.parent / "finish_status.json").get("card", 0)
        return {**link, "beats": bool(report.get("beats")), "carded": stage == 0 and (candidate / "MODEL_CARD.md").is_file(),
                "scores": (report.get("scores") or {}).get("candidate") or {}}
    if _same(interp.get("checkpoint"), candidate):
        return {**link, "beats": bool(interp.get("beats")), "carded": (interp.get("stages") or {}).get("card") == 0,
                "scores": interp.get("scores") or {}}
    raise ShipRefused(f"{vfile} does not judge {candidate} (it judges {report.get('candidate')}"
                      + (f" and {interp['checkpoint']}" if interp.get("checkpoint") else "") + ")")


def judged_chain(candidate: Path, target: Path, devsets: Path | None = None) -> list[dict[str, Any]]:
    """The verdicts from ``candidate`` back to weights equal to ``target``'s (:func:`verdict_link` each; the first
    is the candidate's own, the last judged against the target's weights), each judged on the development sets in
    ``devsets`` as they are now (default: the repository's ``assets/devsets``).

    Raises:
        ShipRefused: a link that did not beat, has no card, was judged against weights that are neither the
            target's nor another judged candidate's, or on development sets other than today's (or on sets it does
            not name); a chain of more than :data:`MAX_LINKS`.
    """
    target_sha = _weights_sha(target)
    if target_sha is None:
        raise ShipRefused(f"{target} holds no model.safetensors to replace")
    today = devset_digests(devsets if devsets is not None else REPO / "assets" / "devsets")
    chain: list[dict[str, Any]] = []
    here = candidate
    while len(chain) < MAX_LINKS:
        link = verdict_link(here)
        if not link["beats"]:
            raise ShipRefused(f"{here} did not beat {link['against']} on every set ({link['verdict_file']}): nothing to ship")
        if not link["carded"]:
            raise ShipRefused(f"{here} beat {link['against']} but has no model card; run `aiayn card {here}` first")
        if link["devsets"] is None:
            raise ShipRefused(f"{link['verdict_file']} does not say which development sets it was judged on (and the "
                              "shipped side's evaluation it names is gone): judge it again, e.g. "
                              f"{_REJUDGE.format(here=here)}")
        changed = sorted(n for n in today if link["devsets"].get(n) != today[n])
        if changed:
            raise ShipRefused(f"{here} was judged on another version of the development set(s) "
                              f"{', '.join(f'{n}.tsv' for n in changed)} than today's ({link['verdict_file']}): judge it "
                              f"again on today's sets, e.g. {_REJUDGE.format(here=here)}")
        chain.append(link)
        if link["against_sha256"] == target_sha:
            return chain
        if not (link["against"].parent / "verdict.json").is_file():
            raise ShipRefused(f"{here} was judged against {link['against']}, whose weights are not {target}'s (the "
                              f"target changed since, or another model was the parent): judge it again against {target}")
        here = link["against"]
    raise ShipRefused(f"more than {MAX_LINKS} verdicts lead from {candidate} without reaching {target}'s weights")


def target_name(target: Path, repo: Path) -> str:
    """How a shipped folder is named in its files: relative to the repository (``checkpoints/en-de``), else its
    last two path parts."""
    try:
        return target.resolve().relative_to(repo.resolve()).as_posix()
    except ValueError:
        return short_path(target) or str(target)


def rename_parent(folder: Path, parent: Path, name: str) -> list[str]:
    """Rewrite the spellings of ``parent`` (as given, resolved, and its last two parts as the lineage writes it) to
    ``name`` in the :data:`TEXT_FILES` of ``folder``; returns the files changed. A spelling that JSON would have
    to escape is left alone (never rewrite a file into something else than it said)."""
    spellings = sorted({str(parent), str(parent.expanduser().resolve())} | ({short_path(parent)} - {None}),
                       key=len, reverse=True)  # the full paths first: the short one is a part of them
    spellings = [s for s in spellings if s and s != name and json.dumps(s)[1:-1] == s]
    changed = []
    for fname in TEXT_FILES:
        path = folder / fname
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        new = text
        for s in spellings:
            new = new.replace(s, name)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(fname)
    return changed


def ship_judged(candidate: Path, target: Path, repo: Path, *, dry_run: bool = False,
                devsets: Path | None = None) -> dict[str, Any]:
    """Ship ``candidate`` over ``target`` after :func:`judged_chain` (on the development sets in ``devsets``, default
    the repository's); returns ``{"chain", "name", "renamed"}`` (``renamed``: the files whose parent path was
    rewritten, :func:`rename_parent`). With ``dry_run`` nothing is written.

    Raises:
        ShipRefused: what :func:`judged_chain` refuses.
    """
    chain = judged_chain(candidate, target, devsets)
    name = target_name(target, repo)
    renamed: list[str] = []
    if not dry_run:
        ship(candidate, target)
        (target / "eval_valid.json").unlink(missing_ok=True)
        renamed = rename_parent(target, chain[-1]["against"], name)
    return {"chain": chain, "name": name, "renamed": renamed}


def _score_lines(chain: list[dict[str, Any]]) -> list[str]:
    """Per set: the target's chrF (what the last link was judged against) -> the candidate's."""
    new, old = chain[0]["scores"], chain[-1]["against_scores"]
    return [f"  {k}: chrF {old[k]['chrf']:.3f} -> {new[k]['chrf']:.3f}" for k in new if k in old]


def cli_main(argv: list[str]) -> int:
    """``aiayn ship CANDIDATE [--to checkpoints/<direction>] [--dry-run]``. Returns 0 shipped (or would be), 2
    refused (nothing written)."""
    ap = argparse.ArgumentParser(prog="aiayn ship", description="Copy a candidate that `aiayn train-on` judged better "
                                 "than the shipped checkpoint (on the test split and every development set) over it. "
                                 "Refuses a candidate without such a verdict, or one judged against other weights "
                                 "or on other development sets than today's.")
    ap.add_argument("candidate", help="<out>/candidate or <out>/interp-W of an `aiayn train-on` call")
    ap.add_argument("--to", default=None, help="the shipped folder (default: checkpoints/<direction of the candidate>)")
    ap.add_argument("--dry-run", action="store_true", help="check the verdicts and say what would happen; write nothing")
    args = ap.parse_args(argv)
    candidate = Path(args.candidate).expanduser()
    direction = (_read_json(candidate / "config.json").get("meta") or {}).get("direction")
    if args.to is None and direction not in ("en-de", "de-en"):
        print(f"aiayn ship: {candidate} names no direction in its config.json; say where it goes with --to", file=sys.stderr)
        return 2
    target = Path(args.to).expanduser() if args.to else REPO / "checkpoints" / direction
    try:
        done = ship_judged(candidate, target, REPO, dry_run=args.dry_run)
    except ShipRefused as exc:
        print(f"aiayn ship: {exc}", file=sys.stderr)
        return 2
    chain = done["chain"]
    how = " <- ".join(str(link["candidate"]) for link in chain)
    print(("would ship" if args.dry_run else "shipped") + f" {candidate} over {target} ({done['name']}); verdicts: {how}"
          f" <- {chain[-1]['against']} (the weights of {target})")
    print("\n".join(_score_lines(chain)))
    if done["renamed"]:
        print(f"the parent's path is now {done['name']!r} in " + ", ".join(done["renamed"]))
    if not args.dry_run:
        print("README.md, docs/ and the tests that quote the shipped model (tests/test_lineage.py, tests/test_curated.py) "
              "follow by hand")
    return 0
