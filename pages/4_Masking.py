"""Masking lab (Section 3.2.3): look-ahead and padding masks, the four stages of one masked decoder head,
and what leaks when the look-ahead mask is removed."""
from __future__ import annotations

import aiayn.app.preload  # noqa: F401 - first: a cold server's sessions import in one go (see that module)

import json

import numpy as np
import pandas as pd
import streamlit as st

from aiayn import calls, lessons
from aiayn import app as ui
from aiayn.analysis import LANGUAGE_NAMES
from aiayn.examples import MASKING_DEFAULTS
from aiayn.figures import labs

EXAMPLES = {
    "en": ("The house is small.", "I like to read books in the garden.", "Thank you!"),
    "de": ("Das Haus ist klein.", "Ich lese gern Bücher im Garten.", "Danke!"),
}
DEFAULT_SENTENCE = {lang: sentence for lang, (sentence, _) in MASKING_DEFAULTS.items()}


@st.cache_data(max_entries=32, show_spinner="Translating…")
def pair_for(checkpoint: str, model_id: int, text: str, reference: str, _queue) -> dict:  # noqa: ARG001 - cache keys
    """Source ids/pieces, decoder input and target ids/pieces: the model's translation, or the reference. The
    model's work here and below runs in the turn of the server's decode queue (aiayn.serving), as every page's does;
    ``_queue.translator`` is the page's translator."""
    _tr = _queue.translator
    src_ids, _, _ = _tr.encode_source(text)
    cfg = _tr.cfg
    if reference.strip():
        tgt_ids = calls.encode_reference(_tr.tokenizer, cfg, reference).ids
        mode = "your reference"
    else:
        tgt_ids = list(_queue.run(_tr.translate, text, beam_size=4, return_attention=False).output_ids)
        mode = "the model's translation (beam 4)"
    dec_in = calls.decoder_input_ids(cfg, tgt_ids)
    return {"src_ids": src_ids, "src_pieces": _tr.pieces(src_ids), "dec_in": dec_in, "dec_in_pieces": _tr.pieces(dec_in),
            "target": tgt_ids, "target_pieces": _tr.pieces(tgt_ids), "mode": mode}


@st.cache_data(max_entries=64, show_spinner=False)
def steps_for(checkpoint: str, model_id: int, src: tuple, dec_in: tuple, layer: int, head: int, pieces: tuple,  # noqa: ARG001
              _queue):
    return _queue.run(lessons.decoder_mask_steps, _queue.translator.model, list(src), list(dec_in), layer, head,
                      labs.token_labels(pieces))


@st.cache_data(max_entries=32, show_spinner="Running the decoder without its mask…")
def leak_for(checkpoint: str, model_id: int, src: tuple, dec_in: tuple, target: tuple, _queue):  # noqa: ARG001
    return _queue.run(lessons.causal_leak, _queue.translator.model, list(src), list(dec_in), list(target))


@st.cache_data(max_entries=32, show_spinner="Greedy decoding with and without the mask…")
def greedy_pair(checkpoint: str, model_id: int, src: tuple, _queue) -> tuple[str, str, list[str], list[str]]:  # noqa: ARG001
    _tr = _queue.translator
    a = _queue.run(lessons.greedy_with_self_mask, _tr.model, list(src), causal=True)
    b = _queue.run(lessons.greedy_with_self_mask, _tr.model, list(src), causal=False)
    return _tr.tokenizer.decode(a), _tr.tokenizer.decode(b), _tr.pieces(a), _tr.pieces(b)


ctx = ui.setup_page("Masking", icon=":material/visibility_off:", intro=(
    "Two masks decide which keys a query may attend to (Section 3.2.3): the **padding mask** hides the pads that "
    "fill a batch, and the decoder's **look-ahead (causal) mask** hides future positions, \"ensuring that the "
    "predictions for position i can depend only on the known outputs at positions less than i\". Masked scores "
    "are set to −∞ before the softmax, so they get weight exactly 0."))
tr = ctx.translator
queue = ui.decode_queue(ctx.direction)
cfg = tr.cfg
key_id = (str(ctx.checkpoint), id(tr.model))

# -- 1. padding + causal masks on a real batch -----------------------------------------------------------------
st.header("1 · Padding and look-ahead masks of a real batch")
batch_text = st.text_area(f"A small batch of {LANGUAGE_NAMES[ctx.src_lang]} sentences, one per line (at most 8)",
                          value="\n".join(EXAMPLES.get(ctx.src_lang, EXAMPLES["en"])), key="batch", height=110)
try:
    batch = lessons.padded_batch(tr.tokenizer, batch_text.splitlines(), cfg.pad_id, eos_id=cfg.eos_id, max_len=min(cfg.max_len, 48))
except lessons.LessonInputError as exc:
    st.error(str(exc), icon=":material/block:")
    batch = None
if batch is not None:
    st.caption(f"Tokenised with the loaded model's SentencePiece model; shorter sentences are filled with `<pad>` "
               f"(id {cfg.pad_id}) up to the longest ({batch.ids.shape[1]} pieces).")
    ui.show_figure(labs.padding_figure(batch.pieces, batch.key_mask, presenter=ctx.presenter), key="padding", filename="padding_mask")
    row = st.selectbox("Sentence for the decoder masks", list(range(len(batch.sentences))), key="row",
                       format_func=lambda i: f"{i}: {batch.sentences[i][:60]}")
    labels = labs.token_labels(batch.pieces[row])
    c1, c2, c3 = ui.chart_columns(3)
    causal = lessons.causal_mask_np(batch.ids.shape[1])
    comb = lessons.combined_mask(batch.key_mask)[row]
    with c1:
        ui.show_figure(labs.mask_figure(causal, x_labels=labels, y_labels=labels, title="look-ahead (causal) mask",
                                        presenter=ctx.presenter), key="causal", filename="causal_mask")
    with c2:
        ui.show_figure(labs.mask_figure(np.broadcast_to(batch.key_mask[row], causal.shape), x_labels=labels, y_labels=labels,
                                        title="padding mask (per key)", presenter=ctx.presenter), key="pad_row", filename="padding_mask_row")
    with c3:
        ui.show_figure(labs.mask_figure(comb, x_labels=labels, y_labels=labels, title="combined: causal AND not pad",
                                        presenter=ctx.presenter), key="combined", filename="combined_mask")
    ui.download_buttons(
        pd.DataFrame([{"sentence": b, "position": j, "piece": batch.pieces[b][j], "id": int(batch.ids[b, j]),
                       "is_token": bool(batch.key_mask[b, j])} for b in range(len(batch.sentences)) for j in range(batch.ids.shape[1])]),
        lambda: json.dumps({"sentences": batch.sentences, "ids": batch.ids.tolist(), "pieces": batch.pieces,
                            "padding_mask": batch.key_mask.tolist(), "causal_mask": causal.tolist(),
                            "combined_mask_of_row": comb.tolist(), "row": row}),
        "masks")

# -- 2. one head, stage by stage -------------------------------------------------------------------------------
st.header("2 · One masked decoder head, stage by stage")
# dec_layer / dec_head, not layer / head: the explorer's head picker holds "mean" under "head", and a widget key is
# one value for the whole session, so sharing it made a visit here reset the explorer's head
ui.warn_bad_param("dec_layer", lambda r: r.isdigit() and 1 <= int(r) <= cfg.n_layers, f"dec_layer must be 1..{cfg.n_layers}")
ui.warn_bad_param("dec_head", lambda r: r.isdigit() and 1 <= int(r) <= cfg.n_heads, f"dec_head must be 1..{cfg.n_heads}")
ui.warn_bad_param("nomask", lambda r: r.lower() in ("true", "false"), "nomask must be true or false")
default_text = DEFAULT_SENTENCE.get(ctx.src_lang, DEFAULT_SENTENCE["en"])
c1, c2 = st.columns([3, 2])
text = c1.text_input(f"Source sentence ({LANGUAGE_NAMES[ctx.src_lang]})", value=default_text, key="text", bind="query-params", max_chars=400)
reference = c2.text_input(f"Decoder input ({LANGUAGE_NAMES[ctx.tgt_lang]}); empty = the model's own translation", value="", key="ref",
                          bind="query-params", max_chars=400)
c3, c4, c5 = st.columns(3)
layer = c3.selectbox("Decoder layer", list(range(1, cfg.n_layers + 1)), key="dec_layer", bind="query-params")
head = c4.selectbox("Head", list(range(1, cfg.n_heads + 1)), key="dec_head", bind="query-params")
li, hi = int(layer) - 1, int(head) - 1  # layers and heads are numbered from 1 in the app, as in the explorer
no_mask = c5.toggle("Remove the look-ahead mask", key="nomask", bind="query-params",
                    help="Run the same decoder with a full (non-causal) self-attention mask: what leaks from the future?")
if not text or not text.strip():
    st.error("Type a source sentence to run the model on.", icon=":material/edit:")
    st.stop()
try:
    pair = pair_for(*key_id, text, reference or "", queue)
except ValueError as exc:
    st.error(str(exc), icon=":material/block:")
    st.stop()
st.markdown(f"Teacher-forced pass: the decoder is fed **{pair['mode']}**, "
            f"`{' '.join(pair['dec_in_pieces'])}`, and predicts `{' '.join(pair['target_pieces'])}`.")
steps = steps_for(*key_id, tuple(pair["src_ids"]), tuple(pair["dec_in"]), li, hi, tuple(pair["dec_in_pieces"]), queue)
lab = labs.token_labels(pair["dec_in_pieces"])
lim = float(np.abs(steps.raw).max()) or 1.0
s1, s2 = ui.chart_columns(2)
with s1:
    ui.show_figure(labs.stage_heatmap(steps.raw, lab, title="① raw scores QKᵀ", colorscale=ctx.colorscale, presenter=ctx.presenter),
                   key="raw", filename=f"dec_L{layer}H{head}_raw")
with s2:
    ui.show_figure(labs.stage_heatmap(steps.scaled, lab, title=f"② scaled QKᵀ/√d_k (÷ {np.sqrt(steps.d_k):.2f})",
                                      colorscale=ctx.colorscale, presenter=ctx.presenter),
                   key="scaled", filename=f"dec_L{layer}H{head}_scaled")
s3, s4 = ui.chart_columns(2)
with s3:
    ui.show_figure(labs.stage_heatmap(steps.masked, lab, title="③ masked: future keys → −∞", colorscale=ctx.colorscale,
                                      presenter=ctx.presenter), key="masked", filename=f"dec_L{layer}H{head}_masked")
with s4:
    ui.show_figure(labs.stage_heatmap(steps.weights, lab, title="④ softmax: attention weights", colorscale=ctx.colorscale,
                                      presenter=ctx.presenter, zmin=0, zmax=1), key="weights", filename=f"dec_L{layer}H{head}_weights")
st.caption(f"Grey cells (crossed in small maps) are −∞: no colour, since −∞ is not a number on the scale. The weights computed here from the model's scores match the weights the "
           f"model returned to {steps.max_weight_error:.1e}.")
ui.download_buttons(
    lambda: pd.DataFrame([{"query": lab[i], "key": lab[j], "raw": steps.raw[i, j], "scaled": steps.scaled[i, j],
                           "masked": steps.masked[i, j], "weight": steps.weights[i, j], "may_attend": bool(steps.mask[i, j])}
                          for i in range(len(lab)) for j in range(len(lab))]),
    lambda: json.dumps({"layer": li, "head": hi, "d_k": steps.d_k,  # exports count from 0 (aiayn.app.downloads) "tokens": lab, "raw": steps.raw.tolist(),
                        "scaled": steps.scaled.tolist(), "masked": [[None if np.isneginf(v) else v for v in r] for r in steps.masked.tolist()],
                        "weights": steps.weights.tolist()}),
    f"decoder_L{layer}H{head}_stages")

# -- 3. remove the mask ------------------------------------------------------------------------------------------
st.header("3 · What if the decoder could see the future?")
if not no_mask:
    st.info("Switch on **Remove the look-ahead mask** above to run the same trained decoder with a full self-attention "
            "mask (the model itself is not changed) and see what leaks.", icon=":material/touch_app:")
else:
    leak = leak_for(*key_id, tuple(pair["src_ids"]), tuple(pair["dec_in"]), tuple(pair["target"]), queue)
    total = float(leak.future_mass.mean())
    changed = int((leak.pred_masked != leak.pred_unmasked).sum())
    m1, m2, m3 = st.columns(3)
    m1.metric("mean attention mass on future tokens", f"{total:.1%}", help="0 exactly with the mask")
    m2.metric("positions whose prediction changes", f"{changed} / {len(lab)}")
    gain = f"{leak.p_next_unmasked.mean() - leak.p_next_masked.mean():+.3f}"
    if float(gain) == 0:  # unchanged at the shown precision: no red "-0.000" fall, no green "+0.000" rise
        m3.metric("mean p(next reference token)", f"{leak.p_next_unmasked.mean():.3f}", delta="0.000 vs masked",
                  delta_color="off", delta_arrow="off")
    else:
        m3.metric("mean p(next reference token)", f"{leak.p_next_unmasked.mean():.3f}", delta=f"{gain} vs masked")
    ui.show_figure(labs.future_mass_figure(leak.future_mass, lab, colorscale=ctx.colorscale, presenter=ctx.presenter),
                   key="future_mass", filename="future_mass")
    u1, u2 = ui.chart_columns(2)
    with u1:
        ui.show_figure(labs.stage_heatmap(leak.weights_unmasked[li, hi], lab,
                                          title=f"weights without the mask (layer {layer}, head {head})",
                                          colorscale=ctx.colorscale, presenter=ctx.presenter, zmin=0, zmax=1),
                       key="unmasked_weights", filename=f"dec_L{layer}H{head}_unmasked")
    with u2:
        ui.show_figure(labs.leak_predictions_figure(leak.p_next_masked, leak.p_next_unmasked, lab, presenter=ctx.presenter),
                       key="p_next", filename="p_next_masked_vs_unmasked")
    table = pd.DataFrame({"decoder input": pair["dec_in_pieces"], "reference next": pair["target_pieces"],
                          "predicted (mask)": tr.pieces(leak.pred_masked), "predicted (no mask)": tr.pieces(leak.pred_unmasked),
                          "p next (mask)": leak.p_next_masked, "p next (no mask)": leak.p_next_unmasked,
                          "future mass (mean over heads)": leak.future_mass.mean(axis=(0, 1))})
    st.dataframe(table, hide_index=True)
    g_m, g_u, p_m, p_u = greedy_pair(*key_id, tuple(pair["src_ids"]), queue)
    st.markdown("At **training** time an unmasked decoder could simply copy the next token from its input; the mask "
                "forces it to predict. At **inference** the future does not exist yet, but recomputing the prefix "
                "without the mask still changes what earlier positions see, "
                + ("so the output changes:" if p_m != p_u else
                   "which can change the output; for this sentence greedy decoding writes the same pieces either way:"))
    st.dataframe(pd.DataFrame({"decoder": ["with look-ahead mask (as trained)", "without mask"], "greedy output": [g_m, g_u],
                               "pieces": [" ".join(p_m), " ".join(p_u)]}), hide_index=True)
    ui.download_buttons(table, lambda: json.dumps({"future_mass": leak.future_mass.tolist(), "tokens": lab,
                                                   "greedy_masked": g_m, "greedy_unmasked": g_u}), "causal_leak")
