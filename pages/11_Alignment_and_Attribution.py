"""Alignment and attribution: which cross-attention heads align words (alignment error rate against our own gold
set, Och and Ney 2003), and whether attention agrees with gradient attribution (integrated gradients, Sundararajan
et al. 2017) - see docs/alignment.md."""
from __future__ import annotations

import aiayn.app.preload  # noqa: F401 - first: a cold server's sessions import in one go (see that module)

import json

import numpy as np
import pandas as pd
import streamlit as st

from aiayn import app as ui
from aiayn.alignment_eval import ALIGN_FILE, GOLD_PATH
from aiayn.analysis import alignment as al
from aiayn.app.alignment_history import across_training
from aiayn.app.charts import show_figure
from aiayn.app.downloads import download_buttons
from aiayn.attribution_eval import corpus_rows, corpus_table, gold_sentence, read_attribution
from aiayn import calls
from aiayn.app.models import decode_queue, load_translator, model_key as served_model
from aiayn.calls import ATTRIBUTION_METHODS
from aiayn.contrastive import alternatives, contrast, foil_from_text
from aiayn.figures.alignment import attribution_beside, contrast_figure, gold_alignment, head_grid

MEASURES = {"weights": "attention weights", "norms": "norm-based (Kobayashi et al. 2020)"}

ctx = ui.setup_page("Alignment and attribution", icon=":material/join_inner:", intro=(
    "Do heads align words? Each cross-attention head's **alignment error rate** (AER, Och and Ney 2003; lower is "
    "better) on our own hand-aligned German-English gold set, read with and without the *shift by one* (Chen et al. "
    "2020). Below, one gold sentence: the chosen head's word alignment with the gold links, and **integrated "
    "gradients** of each target piece's log-probability beside the head's attention, with their rank agreement."))
tr = ctx.translator
model_key = served_model(ctx.direction)
path = ctx.checkpoint / ALIGN_FILE
payload = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
# without alignment.json (an imported model, say) the gold-set grid is missing but one gold sentence still works
L, H = (payload["layers"], payload["heads"]) if payload else (tr.cfg.n_layers, tr.cfg.n_heads)

c1, c2, c3 = st.columns([2, 3, 2])
measure = c1.segmented_control("Maps", list(MEASURES), key="measure", bind="query-params", default="weights",
                               help="weights: the attention weights; norms: norm-based attention, alpha ||f(x)|| "
                                    "(Kobayashi et al. 2020)") or "weights"
readings = (list(payload[measure]["readings"]) if payload else
            [f"{m}{'_shift' if shift else ''}" for m in al.METHODS for shift in al.SHIFTS])
ui.warn_bad_param("reading", readings, "unknown reading")
reading = c2.selectbox("Reading", readings, index=readings.index("source_shift") if "source_shift" in readings else 0,
                       key="reading", bind="query-params",
                       help="target: argmax per target word; source: per source word; their intersection / union; "
                            "_shift: a decoder row belongs to the word it is fed (Chen et al. 2020).")
if payload is None:
    best = {"layer": L - 1, "head": 0}
    st.info(f"No `{ALIGN_FILE}` beside this checkpoint, so no AER per head over the gold set: run `aiayn align "
            f"--checkpoint {ctx.checkpoint}` (one teacher-forced pass per gold pair). One gold sentence below works "
            "without it.", icon=":material/grid_off:")
else:
    r = payload[measure]["readings"][reading]
    best = r["best_head"]
    aer = np.asarray(r["head_aer"], dtype=float)
    show_figure(head_grid(aer, title=f"AER per head ({MEASURES[measure]}, {reading}; {payload['pairs']} gold pairs)",
                              colorscale=ctx.colorscale + "_r", zmin=0, zmax=1, value_name="AER",
                              template=ctx.template, best=(best["layer"], best["head"])),
                key="aer_grid", filename="aer_per_head")
    c3.metric(f"Best head (AER {best['aer']:.3f})", f"layer {best['layer'] + 1} head {best['head'] + 1}")
    aer_df = pd.DataFrame([{"layer": l, "head": h, "aer": aer[l, h]} for l in range(L) for h in range(H)])
    download_buttons(aer_df, json.dumps(payload[measure]["readings"][reading]),
                     f"aer_{ctx.direction}_{measure}_{reading}", key="aer")
across_training(ctx, reading)

# -- one gold sentence ------------------------------------------------------------------------------------------
st.subheader("One gold sentence")
gold = al.read_gold(GOLD_PATH)
d1, d2, d3, d4 = st.columns([1.4, 1, 1, 3], vertical_alignment="bottom")
ui.warn_bad_param("sent", lambda v: v.isdigit() and int(v) < len(gold), f"the sentence must be 0 to {len(gold) - 1}")
sent = int(d1.number_input("Gold sentence", 0, len(gold) - 1, 0, key="sent", bind="query-params"))
layer = int(d2.number_input("Layer", 1, L, best["layer"] + 1, key="layer", bind="query-params"))
head = int(d3.number_input("Head", 1, H, best["head"] + 1, key="head", bind="query-params"))
method = d4.segmented_control("Attribution", ATTRIBUTION_METHODS, key="method", bind="query-params",
                              default="grad_x_input") or "grad_x_input"


@st.cache_data(max_entries=16, show_spinner="Attribution (one backward pass per target piece)…")
def _sentence(direction: str, model: tuple[str, str], index: int, method: str) -> dict:  # noqa: ARG001 - model: cache key
    """One gold pair's maps and attribution; ``model`` (the chosen checkpoint's path and stamp) keys the cache, so
    two sessions that picked different models of one direction do not share results."""
    return gold_sentence(tr, gold[index], direction, method=method, steps=64)


try:
    one = _sentence(ctx.direction, model_key, sent, method)
except ValueError as exc:
    st.error(f"This gold pair cannot be shown: {exc}")
    st.stop()
st.markdown(f"**Source:** {' '.join(one['src_words'])}  \n**Target:** {' '.join(one['tgt_words'])}")
shift = reading.endswith("_shift")
wmap = one["words"][measure][shift][layer - 1, head - 1]
show_figure(gold_alignment(wmap, one["tgt_words"], one["src_words"], one["sure"], one["possible"],
                               title=f"Layer {layer} head {head} ({'shift by one' if shift else 'no shift'}) and the gold "
                                     "links", colorscale=ctx.colorscale, template=ctx.template), key="gold_map")
cross = one["cross" if measure == "weights" else "norms"][layer - 1, head - 1]
attr = one["attribution"]
gap = ""
if method == "integrated_gradients":
    total = attr.source.sum(1) + attr.prefix.sum(1)
    diff = attr.log_prob - attr.baseline_log_prob
    gap = f" Completeness (64 steps): worst gap {np.nanmax(np.abs(total - diff) / np.abs(diff)):.1%}."
show_figure(attribution_beside(attr.source, cross, one["tgt_pieces"], one["src_pieces"],
                                   attention_title=f"layer {layer} head {head} ({MEASURES[measure]})",
                                   attribution_title=f"|{method.replace('_', ' ')}| (row max = 1)",
                                   colorscale=ctx.colorscale, template=ctx.template), key="attr_beside")
st.caption(f"Source share of each prediction (|attribution| to the source against the target prefix): mean "
           f"{np.nanmean(one['share']):.2f}.{gap}")
agree = one["agreement"]["norm_heads" if measure == "norms" else "heads"]
rho = np.nanmean(agree[..., 0], axis=-1)
corpus = read_attribution(ctx.checkpoint)
corpus = (corpus or {}).get("methods", {}).get(method)
g1, g2 = st.columns(2)
with g1:
    show_figure(head_grid(rho, title=f"Sentence {sent}: Spearman's rho per head",
                              colorscale="RdBu", zmin=-1, zmax=1, value_name="rho", template=ctx.template,
                              best=(layer - 1, head - 1)), key="agree_grid")
    rows = [{"reading": k, "spearman": float(np.nanmean(v[..., 0])), "kendall": float(np.nanmean(v[..., 1]))}
            for k, v in one["agreement"].items()]
    download_buttons(pd.DataFrame(rows), json.dumps({"sentence": sent, "method": method, "agreement": rows}),
                     f"agreement_{ctx.direction}_{sent}_{method}", key="agreement")
with g2:
    if corpus is None:
        st.info(f"No gold-set agreement for {method} beside this checkpoint: run `aiayn attribution "
                f"{ctx.checkpoint} --method {method} --sentences 40`.")
    else:
        cr = corpus["readings"]["norm_heads" if measure == "norms" else "heads"]["spearman"]
        show_figure(head_grid(np.array(cr["mean"], dtype=float),
                              title=f"{corpus['pairs']} gold pairs: mean rho per head", colorscale="RdBu", zmin=-1,
                              zmax=1, value_name="rho", template=ctx.template, best=(layer - 1, head - 1)),
                    key="agree_corpus")
        download_buttons(pd.DataFrame(corpus_rows(corpus)), json.dumps(corpus),
                         f"agreement_gold_{ctx.direction}_{method}", key="agreement_gold")
about = "Spearman's rho of |attribution| to the source with each attention row, the mean over a sentence's pieces."
if corpus is not None:
    st.dataframe(pd.DataFrame(corpus_table(corpus)).style.format(precision=2, na_rep="n/a"), hide_index=True,
                 width="stretch")
    sh = corpus["share"]
    about += (f" Gold set ({corpus['pairs']} of {corpus['sentences']['of']} pairs, `aiayn attribution`): the mean "
              f"over sentences and its standard deviation (sd), also for Kendall's tau. Source share "
              f"{sh['source_mean']:.2f} ± {sh['source_std']:.2f} per step, target prefix {sh['prefix_mean']:.2f}.")
st.caption(about)

# -- contrastive attribution on the student's own sentence --------------------------------------------------------
st.subheader("Why this piece and not that one?")
st.markdown("Your own sentence, translated by beam search. Pick an output step and another piece the model could "
            "have written there: gradient attribution of **log p(chosen) − log p(other)** shows which source and "
            "output pieces pushed the model toward its choice (blue) and which toward the other piece (red) "
            "(contrastive explanations, Yin and Neubig 2022).")
CONTRAST_DEFAULT = {"en-de": "The cat sat on the mat.", "de-en": "Ich lese gern Bücher im Garten."}


@st.cache_data(max_entries=32, show_spinner="Translating and scoring every step…")
def _contrast_output(direction: str, model: tuple[str, str], text: str):  # noqa: ARG001 - model: cache key
    """The beam output of ``text`` and the 10 most probable pieces at each of its steps (teacher-forced)."""
    t, queue = load_translator(direction), decode_queue(direction)
    out = queue.run(t.translate, text, beam_size=4, length_penalty=0.6, return_attention=False)
    return out, queue.run(alternatives, t, out.src_ids, out.output_ids, min(10, t.cfg.vocab_size))


@st.cache_data(max_entries=64, show_spinner="Attribution of the contrast…")
def _contrast(direction: str, model: tuple[str, str], src_ids: tuple, out_ids: tuple, step: int, foil: int,  # noqa: ARG001
              method: str):
    # in this session's own thread, not the decode queue's turn (as the gold sentence's attribution above):
    # integrated gradients' 65 backward passes of the whole prefix are seconds on a paper-size model, and a class's
    # translations must not wait behind them (issue 22)
    return contrast(load_translator(direction), src_ids, out_ids, step, foil, method=method, steps=64)


own = st.text_input(f"Sentence ({ctx.src_lang.upper()})", value=CONTRAST_DEFAULT.get(ctx.direction, "I have no time."),
                    key="ctext", bind="query-params", max_chars=400)
own = ui.sentence_or_stop(own)
try:
    out, alt = _contrast_output(ctx.direction, model_key, own)
except ValueError as exc:
    st.error(f"Could not translate this sentence: {exc}")
    st.stop()
st.markdown(f"**Beam search output:** {out.text or '∅'}")
steps_ = [str(i) for i in range(len(alt.output_tokens))]
least = int(np.argmin(alt.chosen_probs))  # the least certain choice is the first worth asking about
e1, e2, e3 = st.columns([2, 2, 2], vertical_alignment="bottom")
# the step and the other piece are not in the URL: they belong to this sentence's output (a bound widget would
# also write its format_func's label into the URL)
cstep = int(e1.selectbox("Output step (the least certain first)", steps_, index=least, key=f"cstep:{own}",
                         format_func=lambda i: f"{i}: {alt.output_tokens[int(i)]} (p = {alt.chosen_probs[int(i)]:.2f})"))
others = [(int(i), p, q) for i, p, q in zip(alt.ids[cstep], alt.pieces[cstep], alt.probs[cstep])
          if int(i) != out.output_ids[cstep]]
choice = e2.selectbox("Instead of it", [str(i) for i, _, _ in others], key=f"cfoil:{own}:{cstep}",
                      format_func=lambda i: next(f"{p} (p = {q:.3f})" for j, p, q in others if str(j) == i))
typed = e3.text_input("… or type a piece (`der`, `atte`) or a word", key="cword", max_chars=40,
                      help="A piece of the vocabulary (`der` means the word-initial `▁der`; `atte` a word's rest), "
                           "else the first piece of the word you type.").strip()
foil = int(choice) if choice is not None else None
if typed:
    foil = foil_from_text(tr.tokenizer, typed)
    if foil == out.output_ids[cstep]:
        st.warning(f"`{typed}` starts with the piece the model chose (`{alt.output_tokens[cstep]}`); type another "
                   "piece, e.g. the rest of the word as the model would cut it.", icon=":material/warning:")
        foil = None
if foil is None:
    st.stop()
try:
    c = _contrast(ctx.direction, model_key, tuple(out.src_ids), tuple(out.output_ids), cstep, foil, method)
except ValueError as exc:
    st.error(f"Could not attribute this contrast: {exc}")
    st.stop()
show_figure(contrast_figure(c, template=ctx.template), key="contrast", filename=f"contrast_{ctx.direction}_{cstep}")
top_src = int(np.argmax(np.abs(c.source)))
st.caption(f"{method.replace('_', ' ')} of the log-probability difference {c.difference:+.2f} nats at step {cstep}; "
           f"the source piece that matters most is `{c.src_tokens[top_src]}` ({c.source[top_src]:+.3f}, "
           f"{'toward' if c.source[top_src] >= 0 else 'against'} `{c.chosen}`). Pieces after step {cstep} cannot "
           "matter: the decoder is masked (Section 3.2.3)."
           + (f" Here the model gives `{c.foil}` more probability than `{c.chosen}`: beam search kept `{c.chosen}` "
              "for the score of the whole output (Section 6.1), not of this step." if c.difference < 0 else ""))
