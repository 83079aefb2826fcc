"""Write ``MODEL_CARD.md`` for a checkpoint directory from what is measured, never typed by hand:
the checkpoint's own ``config.json`` (config, training summary), the data's ``datasheet.json``, the test-set
scores written by ``aiayn evaluate --out`` and live sample translations.

``aiayn card CHECKPOINT --eval EVAL.json --data DATA_DIR [--hardware TEXT] [--notes TEXT]``
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from ..checkpoint_format import CONFIG_FILE
from ..files import atomic_write_text
from ..lineage import backtranslation_records, distinct_paths, lifetime, short_path
from ..translation import LANGUAGE_NAMES

EVERYDAY = {
    "en": ["I have no time.", "The cat sat on the mat.", "Where is the train station?", "We will meet tomorrow morning.",
           "This book is very interesting.", "Can you help me, please?", "He won't be attending the conference."],
    "de": ["Ich habe keine Zeit.", "Die Katze saß auf der Matte.", "Wo ist der Bahnhof?", "Wir treffen uns morgen früh.",
           "Dieses Buch ist sehr interessant.", "Kannst du mir bitte helfen?", "Er wird an der Konferenz nicht teilnehmen."],
}


def _fmt_minutes(seconds: float | None) -> str:
    if not seconds:
        return "unknown"
    return f"{seconds / 60:.0f} min ({seconds / 3600:.2f} h)"


# Keys whose change does not alter what the model learns (time limits, logging, saving, threads).
_BOOKKEEPING = {"max_minutes", "max_steps", "max_epochs", "keep", "save_every", "valid_every", "valid_bleu_sentences",
                "valid_beam_size", "threads", "data_dir", "run_dir"}


def config_change_notes(changes: list[dict[str, Any]] | None, accumulation: int | None = None) -> list[tuple[int, str]]:
    """``[(step, "key old -> new, ...")]`` for the recipe changes made when a run was resumed with other flags
    (``meta["config_changes"]`` of a checkpoint, written by :func:`aiayn.training.state.record_config_change`).
    Bookkeeping keys (time limit, saving, logging, threads, paths) are left out, and ``tokens_per_step`` when the
    run's ``accumulation`` is fixed (> 0: the step size does not use it); so are records with nothing else."""
    notes = []
    for rec in changes or []:
        kept = {k: v for k, v in (rec.get("changed") or {}).items() if k not in _BOOKKEEPING
                and not (k == "tokens_per_step" and (accumulation or 0) > 0)}  # unused with a fixed accumulation
        if kept and isinstance(rec.get("step"), int):
            notes.append((rec["step"], ", ".join(f"{k} {a} -> {b}" for k, (a, b) in kept.items())))
    return notes


def _config_change_lines(changes: list[dict[str, Any]] | None, accumulation: int | None = None) -> list[str]:
    """One bullet of the card listing the recipe changes (see :func:`config_change_notes`)."""
    notes = config_change_notes(changes, accumulation)
    if not notes:
        return []
    return ["- Changed when the run was resumed (the recipe above is the final one): "
            + "; ".join(f"from step {step}: {text}" for step, text in notes) + "."]


def layer_order_note(norm_first: bool) -> str:
    """One sentence for a model card (and the app) on where LayerNorm sits: post-LN is the paper's
    ``LayerNorm(x + Sublayer(x))`` (Section 3.1); pre-LN (``x + Sublayer(LayerNorm(x))``, Xiong et al. 2020) is a
    departure, said plainly with the reason it is used (docs/training.md)."""
    if not norm_first:
        return "Post-LN as in the paper (`norm_first=False`: LayerNorm(x + Sublayer(x)), Section 3.1)."
    return ("**Pre-LN, a departure from the paper** (`norm_first=True`: x + Sublayer(LayerNorm(x)), plus a final "
            "LayerNorm on each stack; Xiong et al. 2020): in a short training budget the paper's post-LN at N = 6 did "
            "not leave the unigram plateau, pre-LN did (docs/training.md).")


def _on_gpu(hardware: str) -> bool:
    """Whether the card's hardware text names a GPU (``aiayn train`` autocasts to bf16 there unless ``--no-amp``);
    "no GPU" does not count."""
    said = re.sub(r"\bno (gpu|cuda)\b", "", hardware or "", flags=re.IGNORECASE)  # "no GPU was available"
    return bool(re.search(r"\b(gpu|cuda|nvidia|h100|h200|a100)\b", said, re.IGNORECASE))

def debian_data_lines(sheet: dict[str, Any], top: int = 12) -> list[str]:
    """The data section of a card for a model trained on ``aiayn data debian`` (Ding plus Debian packages'
    translations): Ding with its sha256 and licence, the number of Debian packages, pairs and their licences (every
    licence named, with its pair count), the largest sources, the held-out packages, and where the full census is.
    """
    ding = sheet.get("ding", {})
    sources = sheet.get("debian_sources", [])
    def train_pairs(s: dict[str, Any]) -> int:
        return s.get("pairs_in_train", s.get("pairs_kept", 0))

    by_licence: dict[str, int] = {}
    for s in sources:
        licence = s.get("licence") or "not stated"
        by_licence[licence] = by_licence.get(licence, 0) + train_pairs(s)
    n_pairs = sum(train_pairs(s) for s in sources)
    lines = [f"- Corpus 1: Ding German-English dictionary (Debian `{ding.get('debian_package', 'trans-de-en')}` "
             f"{ding.get('version', 'n/a')}), sha256 `{ding.get('sha256', 'n/a')}`, **{ding.get('license', 'GPL-2.0-or-later')}**. "
             f"{ding.get('attribution', '')}".rstrip(),
             f"- Corpus 2: German translations shipped in {len(sources)} Debian packages (gettext catalogues and help pages "
             f"in both languages), {n_pairs:,} pairs kept by `aiayn data debian`. Each package keeps its own licence; the "
             "licences of the data this model was trained on, with the pairs under each:",
             ""]
    lines += [f"  - {lic}: {n:,} pairs" for lic, n in sorted(by_licence.items(), key=lambda kv: -kv[1])[:top]]
    rest = sorted(by_licence.items(), key=lambda kv: -kv[1])[top:]
    if rest:
        lines.append(f"  - {len(rest)} more licence texts ({sum(n for _, n in rest):,} pairs)")
    big = sorted(sources, key=train_pairs, reverse=True)[:5]
    lines += ["", "- Largest sources: " + ", ".join(f"{s['package']} {s.get('version', '')} ({train_pairs(s):,})" for s in big) + ".",
              "- Never trained on (held out for `test_domain.tsv`): " + ", ".join(sheet.get("held_out_packages", [])) + ".",
              "- Every package with its version, .deb file, sha256, licence and counts: the data folder's `DATASHEET.md` "
              "(docs/data.md). A model derived from this data carries the obligations of all these licences (GPL, LGPL, "
              "MPL-2.0, GFDL, CC-BY-SA among them).",
              ""]
    return lines


def backtranslation_lines(sheet: dict[str, Any]) -> list[str]:
    """Card lines for the back-translated pairs of a data folder (``aiayn backtranslate``: the datasheet's
    ``backtranslation`` record, and the earlier records it keeps under ``previous``), one corpus line each, newest
    last: the language and count of the real sentences, their packages with version, sha256 and licence (or the
    file), the model that translated them and the kind. ``[]`` for a folder without back-translation."""
    lines = []
    for n, r in enumerate(backtranslation_records(sheet), start=3):
        src = r.get("source") or {}
        srcs = src if isinstance(src, list) else [src]
        what = ", ".join(f"Debian `{x['package']}` {x.get('version', '')} (sha256 `{x.get('sha256', 'n/a')}`, "
                         f"**{x.get('licence', 'see copyright file')}**)" if "package" in x else
                         f"`{x.get('file', '?')}` (sha256 `{x.get('sha256', 'n/a')}`)" for x in srcs)
        language = LANGUAGE_NAMES.get(r.get("language", "de"), r.get("language", "German"))
        lines.append(f"- Corpus {n} (back-translation, Sennrich et al. 2016): {r.get('pairs_added', 0):,} real {language} "
                     f"sentences of {what}, translated by `{r.get('checkpoint', '?')}` (beam {r.get('beam_size', '?')}) "
                     "into synthetic sources"
                     + (f" each tagged `{r['tag']}` (tagged back-translation, Caswell et al. 2019)" if r.get("tag") else "")
                     + f", added as kind `{r.get('kind', '?')}` (train "
                     f"{r.get('train_rows_before', 0):,} -> {r.get('train_rows_after', 0):,} pairs; the split table below "
                     "counts the folder before them).")
    return lines


def lineage_lines(meta: dict[str, Any]) -> list[str]:
    """The card's "Lineage" section (:mod:`aiayn.lineage`): every run the weights descend from, oldest first,
    with its lifetime steps, where it started, tokens, wall time, data and hardware, and the lifetime totals.
    ``[]`` when the checkpoint records a single run from scratch (the Training section says it all)."""
    life = lifetime(meta)
    if life is None or (len(life.stages) < 2 and not life.warm_starts):
        return []
    bound = "" if life.complete else "at least "
    lines = ["## Lineage", "",
             f"The weights descend from {len(life.stages)} recorded training run{'s' if len(life.stages) > 1 else ''}"
             + ("" if life.complete else " and an earlier parent whose training is not recorded")
             + f"; lifetime totals: {bound}{life.steps:,} steps, "
             + (f"{bound}{life.train_tokens:,} target tokens, " if life.train_tokens else "")
             + f"wall time {bound}{_fmt_minutes(life.wall_time_s)}. Each run after the first started from the weights "
             "the run before it ended with (`--init-from`: weights only; its optimizer, schedule and step count "
             "started at 0).", "",
             "| run | direction | lifetime steps | started from | target tokens | wall time | data | hardware |",
             "|---|---|---|---|---:|---:|---|---|"]
    for s in life.stages:
        e = s.entry
        start = (f"trained parent, lifetime step {s.start:,}" if s.start else
                 f"`{e['init_from']}` (training not recorded)" if e.get("init_from") else "scratch")
        tokens = e.get("train_tokens")
        lines.append(f"| `{e.get('run')}` | {e.get('direction')} | {s.start + 1:,}–{s.last:,} | {start} | "
                     f"{f'{tokens:,}' if isinstance(tokens, int) else 'unknown'} | {_fmt_minutes(e.get('wall_time_s'))} | "
                     f"{e.get('data')} | {e.get('hardware')} |")
    notes = [f"- `{s.entry.get('run')}`: {s.entry['note']}." for s in life.stages if s.entry.get("note")]
    return lines + ([""] + notes if notes else []) + [""]


def _intro_lines(ckpt: Path, config: dict[str, Any], datasheet: dict[str, Any] | None, notes: str) -> list[str]:
    """Title, the one-sentence summary (how it was started, on what data) and the optional notes."""
    meta = config.get("meta", {})
    direction = meta.get("direction", ckpt.name)
    src, tgt = direction.split("-") if "-" in direction else ("?", "?")
    init_from = (meta.get("train_config") or {}).get("init_from") or ""
    life = lifetime(meta)
    corpus = ("the Ding German-English dictionary corpus and the German translations of Debian packages"
              if (datasheet or {}).get("debian_sources") else "the Ding German-English dictionary corpus")
    if life is not None and len(life.stages) > 1:
        start = (f"trained with `aiayn` over {len(life.stages)} runs ({life.steps:,} steps in all, see Lineage); its last "
                 f"run started from the weights of `{short_path(init_from)}` at lifetime step {life.stages[-1].start:,} "
                 f"(warm start, `--init-from`) and trained on {corpus}")
    elif init_from:
        start = (f"trained with `aiayn`, starting from the weights of the run `{short_path(init_from)}` (warm start, "
                 f"`--init-from`), on {corpus}")
    else:
        start = f"trained from scratch with `aiayn` on {corpus}"
    lines = [f"# Model card: aiayn {direction} ({LANGUAGE_NAMES.get(src, src)} -> {LANGUAGE_NAMES.get(tgt, tgt)})", "",
             f"A Transformer (Vaswani et al. 2017) {start}. "
             f"{config.get('num_parameters', 0) / 1e6:.2f}M parameters, weights stored in {config.get('dtype')} "
             "(`model.safetensors`), joint SentencePiece BPE vocabulary (`spm.model`).", ""]
    return lines + ([notes.strip(), ""] if notes else [])


def _data_section(datasheet: dict[str, Any] | None) -> list[str]:
    """The "Data and license" section: Ding alone, or Ding and the Debian packages; the split counts."""
    lines = ["## Data and license", ""]
    if (datasheet or {}).get("debian_sources"):
        lines += debian_data_lines(datasheet)
    lines += backtranslation_lines(datasheet or {})
    src_info = (datasheet or {}).get("source", {}) if not (datasheet or {}).get("debian_sources") else None
    if src_info is not None:
        lines += [f"- Corpus: {src_info.get('name', 'Ding German-English dictionary (trans-de-en)')}, version {src_info.get('version', '1.9-6')}, "
                  f"sha256 `{src_info.get('sha256', 'n/a')}`.",
                  f"- License: **{src_info.get('license', 'GPL-2.0-or-later')}**. {src_info.get('attribution', 'Ding, Copyright (c) Frank Richter, TU Chemnitz.')} "
                  "This model is derived from that data and is distributed under the same license (GPL-2.0-or-later).",
                  "- Prepared with `aiayn data ding` (parse, clean annotations, first synonym, deduplicate, leak-free splits)."]
    counts = (datasheet or {}).get("counts", {})
    if counts:
        lines += ["", "| split | pairs | full sentences | phrases |", "|---|---:|---:|---:|"]
        for name in ("train", "valid", "test"):
            c = counts.get(name)
            if c:
                lines.append(f"| {name} | {c.get('pairs', 0):,} | {c.get('sentences', 0):,} | {c.get('phrases', 0):,} |")
    return lines + ["", "Valid and test hold full sentences only; no held-out sentence appears in training, not even "
                    "inside a longer entry.", ""]


def _model_section(model: dict[str, Any]) -> list[str]:
    """The "Model" section: the configuration table and the layer order."""
    lines = ["## Model", "", "| field | value |", "|---|---|"]
    for key in ("d_model", "n_heads", "d_ff", "n_layers", "dropout", "attention_dropout", "vocab_size", "norm_first", "positional",
                "share_embeddings", "layer_norm_eps", "max_len"):
        lines.append(f"| {key} | {model.get(key)} |")
    return lines + ["", layer_order_note(bool(model.get("norm_first"))) + " Sinusoidal positions (Section 3.5), three-way "
                    "tied embeddings (Section 3.4).", ""]


def _training_section(meta: dict[str, Any], model: dict[str, Any], hardware: str) -> list[str]:
    """The "Training" section: the recipe, the warm start, resumed-run changes, this run's and the lifetime's
    steps, tokens and time, hardware, averaged states."""
    tc = meta.get("train_config", {})
    init_from = tc.get("init_from") or ""
    life = lifetime(meta)
    several = life is not None and len(life.stages) > 1
    return ["## Training", "",
            f"- Recipe (Section 5): Adam (beta1 0.9, beta2 0.98, eps 1e-9), learning rate of Equation 3 with warmup_steps = "
            f"{tc.get('warmup_steps')} and lr_scale = {tc.get('lr_scale')}, label smoothing epsilon_ls = {tc.get('epsilon_ls')}, "
            f"P_drop = {model.get('dropout')}, token-count batches of {tc.get('max_tokens')} padded tokens with length bucketing, "
            f"{tc.get('accumulation') or 'derived'} micro-batch(es) per step"
            + (f", full-sentence pairs repeated {tc['upsample_sentences']} times" if (tc.get('upsample_sentences') or 1) > 1 else "")
            + (", bf16 autocast on CPU (`--amp-cpu`)" if tc.get('amp_cpu') else "")
            + (", bf16 autocast on the GPU (`--amp`)" if tc.get('amp', True) and _on_gpu(hardware) else "") + ".",
            *([f"- Warm start: the weights (not the optimizer or schedule, which start at step 0) were copied from "
               f"`{short_path(init_from)}` before step 1. With the joint vocabulary every tensor fits, even from the other "
               "direction; transfer from a parent model is not part of the paper's recipe (Zoph et al. 2016; Kocmi and "
               "Bojar 2018)."] if init_from else []),
            *_data_mix_lines(meta.get("data_mix")),
            *_domain_tag_lines(model, tc.get("domain_tags")),
            *_config_change_lines(meta.get("config_changes", []), tc.get("accumulation")),
            f"- Steps{' (this run)' if several else ''}: {meta.get('step')} (epoch {meta.get('epoch')}), "
            f"{meta.get('train_tokens', 0):,} target tokens seen, wall time {_fmt_minutes(meta.get('train_wall_time_s'))}.",
            *([f"- Lifetime ({len(life.stages)} runs, see Lineage): {life.steps:,} steps, "
               f"{life.train_tokens or 0:,} target tokens, wall time {_fmt_minutes(life.wall_time_s)}."] if several else []),
            f"- Hardware: {hardware}.",
            f"- Weights: average of the last {len(meta.get('averaged_states', []))} saved states ({', '.join(meta.get('averaged_states', []))}), "
            "as in Section 6.1 (the paper averages the last 5 checkpoints)." + _interpolation_note(meta.get("interpolation"))
            + _soup_note(meta.get("soup")),
            "- The training curves are in `metrics.jsonl` (step, epoch, train_loss, valid_loss, valid_bleu, lr, tokens_per_s, wall_time)"
            + (" for the last run only." if several else "."), ""]


def _interpolation_note(interp: dict[str, Any] | None) -> str:
    """The Weights line's end for a weight interpolation (``meta["interpolation"]``, ``aiayn interpolate``), or ""."""
    if not interp:
        return ""
    w, a = interp["weight"], interp.get("a", {})
    step = f" (step {a['step']:,})" if isinstance(a.get("step"), int) else ""
    return (f" The weights shipped are {1 - w:g} x `{short_path(a.get('path', 'A'))}`{step} + {w:g} x this average, "
            "parameter by parameter (a weight interpolation, WiSE-FT: Wortsman et al. 2022).")


def _soup_note(soup: dict[str, Any] | None) -> str:
    """The Weights line's end for a model soup (``meta["soup"]``, ``aiayn soup``), or ""."""
    if not soup or len(soup.get("ingredients") or []) < 2:
        return ""
    items = soup["ingredients"]
    how = (f" (a greedy soup: {len(items)} of {len(soup.get('scores') or items)} ingredients kept by chrF on the valid "
           "split)") if soup.get("method") == "greedy" else ""
    return (f" The weights shipped are the mean of {len(items)} such checkpoints, parameter by parameter, this one and "
            + ", ".join(f"`{name}`" for name in distinct_paths([str(i.get("path")) for i in items])[1:])
            + f": fine-tunes of one parent (a model soup, Wortsman et al. 2022){how}.")


def _domain_tag_lines(model: dict[str, Any], spec: str | None) -> list[str]:
    """One line on the domain tags (``aiayn train --domain-tags``) of a model that has them, or none."""
    tags = model.get("domain_tags") or []
    if not tags:
        return []
    return [f"- Domain tags (`--domain-tags {spec or ', '.join(tags)}`): each training pair's decoder input started "
            f"with the tag of its kind's domain ({', '.join(f'`<{t}>`' for t in tags)}) instead of `<s>` (domain "
            f"control, Kobus et al. 2017; not in the paper). It decodes with `<{model.get('domain')}>` unless asked "
            "for another (`aiayn translate --domain`); the scores below are with that tag."]


def _data_mix_lines(mix: dict[str, Any] | None) -> list[str]:
    """One line on the data mix by kind (``meta["data_mix"]``, ``aiayn train --kind-weights``), or none."""
    if not mix or not mix.get("kinds"):
        return []
    parts = [f"{k} x{v['weight']:g}: {v['pairs']:,} pairs -> {v['examples']:,}" for k, v in mix["kinds"].items()]
    return [f"- Data mix by kind (`--kind-weights {mix.get('kind_weights')}`), examples per epoch: " + "; ".join(parts)
            + f" ({mix.get('examples', 0):,} in all)."]


def _scores_section(evaluation: dict[str, Any] | None, samples: list[tuple[str, str]]) -> list[str]:
    """The test-set scores against the dictionary baseline, their signatures, and the sample translations."""
    lines = ["## Test-set scores", ""]
    if evaluation:
        sc = evaluation.get("scores", {})
        dec = evaluation.get("decoding", {})
        lines += [f"{evaluation.get('n_sentences')} held-out test sentences, beam {dec.get('beam_size')}, length penalty alpha "
                  f"{dec.get('alpha')}, max length {dec.get('max_len')}; detokenised sacreBLEU and chrF.", "",
                  "| system | BLEU | chrF |", "|---|---:|---:|"]
        m, b = sc.get("model", {}), sc.get("dictionary_baseline") or {}
        lines.append(f"| this model | {m.get('bleu', float('nan')):.2f} | {m.get('chrf', float('nan')):.2f} |")
        if b:
            lines.append(f"| Ding word-by-word dictionary baseline | {b.get('bleu', float('nan')):.2f} | {b.get('chrf', float('nan')):.2f} |")
        sig = evaluation.get("signatures", {})
        lines += ["", f"- BLEU signature: `{sig.get('bleu')}`", f"- chrF signature: `{sig.get('chrf')}`", ""]
    else:
        lines += ["Not evaluated yet.", ""]
    if samples:
        lines += ["## Sample translations (beam 4, alpha 0.6)", "", "| input | output |", "|---|---|"]
        lines += [f"| {a} | {b} |" for a, b in samples] + [""]
    return lines


def limitations_lines(datasheet: dict[str, Any] | None) -> list[str]:
    """The "Limitations" section, its domain line from the datasheet: Ding alone, or Ding and the Debian packages'
    text by kind (``datasheet["kinds"]["train_pairs"]``, when the build recorded kinds)."""
    kinds = ((datasheet or {}).get("kinds") or {}).get("train_pairs") or {}
    if (datasheet or {}).get("debian_sources"):
        share = ", ".join(f"{k} {v / max(sum(kinds.values()), 1):.0%}" for k, v in kinds.items())
        bt = ", and back-translated sentences (their sources machine translations; Corpus 3 above)" \
            if (datasheet or {}).get("backtranslation") else ""
        domain = ("- Domain: Ding's dictionary entries and example sentences plus the translations of Debian packages "
                  f"(software messages, documentation, the story text of games){bt}"
                  + (f"; training pairs by kind: {share}" if share else "")
                  + ". No news or web text, and few everyday sentences: everyday speech is where it errs most.")
    else:
        domain = "- Domain: dictionary entries and example sentences; no news, web or dialogue text."
    return ["## Limitations", "",
            "- Small model and short training: most training pairs are dictionary entries (1-3 word phrases), so the "
            "model knows many words but less long-range syntax; longer or unusual sentences can come out wrong, "
            "repeated or truncated. Treat translations as a teaching artefact, not a translation service.",
            domain,
            "- Attention maps show what this model attends to; attention is not an explanation of its output.", ""]


def render_card(ckpt: Path, evaluation: dict[str, Any] | None, datasheet: dict[str, Any] | None, samples: list[tuple[str, str]],
                hardware: str, notes: str = "") -> str:
    """The Markdown text of the model card (pure: no I/O besides reading ``ckpt/config.json``): intro, data and
    licence, model, training, lineage (when the weights descend from more than one run), scores, samples, limits."""
    config = json.loads((ckpt / "config.json").read_text())
    meta, model = config.get("meta", {}), config["model"]
    lines = _intro_lines(ckpt, config, datasheet, notes) + _data_section(datasheet) + _model_section(model)
    lines += _training_section(meta, model, hardware) + lineage_lines(meta)
    return "\n".join(lines + _scores_section(evaluation, samples) + limitations_lines(datasheet))


def record_scores(ckpt: str | Path, evaluation: dict[str, Any]) -> None:
    """Copy the test scores of an ``aiayn evaluate`` JSON into the checkpoint's ``config.json`` meta
    (``meta["test_scores"]``), so the app can show them without reading the card."""
    path = Path(ckpt) / CONFIG_FILE
    config = json.loads(path.read_text())
    sc = evaluation.get("scores", {})
    base = sc.get("dictionary_baseline") or {}
    config.setdefault("meta", {})["test_scores"] = {
        "test_bleu": sc.get("model", {}).get("bleu"),
        "test_chrf": sc.get("model", {}).get("chrf"),
        "dictionary_baseline_bleu": base.get("bleu"),
        "dictionary_baseline_chrf": base.get("chrf"),
        "n_sentences": evaluation.get("n_sentences"),
        "bleu_signature": evaluation.get("signatures", {}).get("bleu"),
        "chrf_signature": evaluation.get("signatures", {}).get("chrf"),
    }
    atomic_write_text(path, json.dumps(config, indent=2, sort_keys=True))


def _score(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:  # NaN
        return None
    return float(value)


def quality_verdict(meta: dict[str, Any] | None) -> tuple[str, str] | None:
    """How the checkpoint's test scores compare with the word-by-word dictionary baseline, in one sentence
    for the app (Translate page, Overview), so nobody mistakes a weak model's output for a translation.

    Reads ``meta["test_scores"]`` (written by :func:`record_scores`): sacreBLEU and chrF of the model and of
    the baseline on the test split. Returns ``(level, markdown)`` with level ``"beats"`` (higher on both
    BLEU and chrF), ``"mixed"`` (higher on one), ``"below"`` (on neither; ties count as not higher), or None
    when the scores are missing or not numbers (nothing to say). Never raises on malformed metadata.
    """
    sc = (meta or {}).get("test_scores")
    if not isinstance(sc, dict):
        return None
    bleu, chrf = _score(sc.get("test_bleu")), _score(sc.get("test_chrf"))
    base_bleu, base_chrf = _score(sc.get("dictionary_baseline_bleu")), _score(sc.get("dictionary_baseline_chrf"))
    if None in (bleu, chrf, base_bleu, base_chrf):
        return None
    n = sc.get("n_sentences")
    on = f"{n:,} held-out test sentences" if isinstance(n, int) and not isinstance(n, bool) else "the held-out test sentences"
    numbers = (f"sacreBLEU {bleu:.1f} / chrF {chrf:.1f} on {on}; a word-by-word dictionary lookup scores "
               f"{base_bleu:.1f} / {base_chrf:.1f}")
    wins = (bleu > base_bleu) + (chrf > base_chrf)
    if wins == 2:
        return "beats", f"This model beats the word-by-word dictionary baseline: {numbers}."
    if wins == 1:
        return "mixed", (f"This model beats the word-by-word dictionary baseline on one score only ({numbers}): "
                         "expect some wrong or made-up translations.")
    return "below", (f"This model is still weak: {numbers}. Expect fluent-looking but often wrong translations; "
                     "the attention maps still show exactly what this model computes.")


def write_card(ckpt: str | Path, *, eval_path: str | Path | None, data_dir: str | Path | None, hardware: str, notes: str = "") -> Path:
    """Render and write ``MODEL_CARD.md`` into ``ckpt`` (translating the everyday sample sentences live)."""
    from ..translator import Translator  # imports torch: the app's first page imports this module

    ckpt = Path(ckpt)
    evaluation = json.loads(Path(eval_path).read_text()) if eval_path else None
    sheet_path = Path(data_dir).expanduser() / "datasheet.json" if data_dir else None
    datasheet = json.loads(sheet_path.read_text()) if sheet_path and sheet_path.is_file() else None
    tr = Translator.load(ckpt, device="cpu")
    src = tr.meta.get("src_lang", "en")
    samples = [(s, tr.translate(s, return_attention=False).text) for s in EVERYDAY.get(src, EVERYDAY["en"])]
    if evaluation:
        record_scores(ckpt, evaluation)
    text = render_card(ckpt, evaluation, datasheet, samples, hardware, notes)
    return atomic_write_text(ckpt / "MODEL_CARD.md", text)


def cli_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="aiayn card", description="Write MODEL_CARD.md for a checkpoint from measured results.")
    ap.add_argument("checkpoint")
    ap.add_argument("--eval", default=None, help="JSON written by `aiayn evaluate --out`")
    ap.add_argument("--data", default=None, help="prepared data directory (for datasheet.json)")
    ap.add_argument("--hardware", default="unknown")
    ap.add_argument("--notes", default="")
    args = ap.parse_args(argv)
    try:
        out = write_card(args.checkpoint, eval_path=args.eval, data_dir=args.data, hardware=args.hardware, notes=args.notes)
    except (FileNotFoundError, ValueError) as exc:
        print(f"aiayn card: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0
