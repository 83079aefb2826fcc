"""Attention explorer: every head of every layer, for a typed or curated sentence.

Kinds (Section 3.2.3): encoder self-attention, masked decoder self-attention, encoder-decoder attention.
Free-running (the model's own beam-search output) or teacher-forced (a reference fed to the decoder).
"""
from __future__ import annotations

import numpy as np
import streamlit as st

from aiayn import app as ui
from aiayn.analysis import bundle_maps, check_text, head_stats, kind_labels, view_stack
from aiayn.figures.attention import AXIS_TITLES, attention_heatmap, head_stats_figure, model_view, topk_bar
from aiayn.model.maps import KIND_TITLES

#: curated sentences per direction: (sentence, reference translation, what to look for)
EXAMPLES: dict[str, list[tuple[str, str, str]]] = {
    "en-de": [
        ("I have no time.", "Ich habe keine Zeit.",
         "Cross-attention: find the row that predicts **Zeit** and see which source piece it looks at (**time**)."),
        ("I would like to buy a new car.", "Ich möchte ein neues Auto kaufen.",
         "Word order: German puts **kaufen** at the end. Teacher-force the reference and follow the row "
         "predicting *kaufen* back to **buy**: the alignment leaves the diagonal."),
        ("The house is small.", "Das Haus ist klein.",
         "A short, monotonic sentence: in cross-attention the brightest cells run roughly down the diagonal."),
        ("The cat sat on the mat.", "Die Katze saß auf der Matte.",
         "Encoder self-attention: sort the head table by **previous** or **next** to find positional heads "
         "that look one word to the left or right."),
        ("Good morning!", "Guten Morgen!",
         "Sink heads: many heads park their weight on **</s>** when they have nothing to do. Sort the head "
         "table by **eos**."),
        ("He reads the book that she gave him.", "Er liest das Buch, das sie ihm gab.",
         "Decoder self-attention is masked: every row attends only to pieces already written (lower triangle). "
         "Use the step-by-step tab to watch it grow."),
    ],
    "de-en": [
        ("Ich habe keine Zeit.", "I have no time.",
         "Cross-attention: the row predicting **time** should look at **Zeit**."),
        ("Ich möchte ein neues Auto kaufen.", "I would like to buy a new car.",
         "Word order: *kaufen* comes last in German but **buy** comes early in English: find the row predicting "
         "*buy* and see it reach to the end of the source."),
        ("Das Haus ist klein.", "The house is small.",
         "A short, monotonic sentence: cross-attention runs roughly down the diagonal."),
        ("Der Hund schläft im Garten.", "The dog is sleeping in the garden.",
         "Encoder: sort the head table by **previous** / **next** to find positional heads."),
        ("Guten Morgen!", "Good morning!",
         "Sink heads: sort the head table by **eos** to find heads parking their weight on **</s>**."),
    ],
}
KINDS = ["encoder", "decoder", "cross"]
KIND_NAMES = {"encoder": "Encoder self", "decoder": "Decoder self (masked)", "cross": "Encoder-decoder (cross)"}
MODES = ["free", "forced"]
STAT_HELP = {
    "entropy": "mean entropy of a query's attention, bits (0 = all on one key; log2(n) = uniform)",
    "confidence": "mean over queries of the largest weight (Voita et al. 2019)",
    "self": "mean weight on the query's own position",
    "previous": "mean weight on the previous position (positional head when high)",
    "next": "mean weight on the next position (always 0 in the masked decoder)",
    "bos": "mean total weight on <s> (a 'sink' when high)",
    "eos": "mean total weight on </s> (a 'sink' when high)",
}

ctx = ui.setup_page("Attention explorer", icon="🔍")
tr = ctx.translator
cfg = tr.cfg
L, H = cfg.n_layers, cfg.n_heads
examples = EXAMPLES[ctx.direction]
by_sentence = {s: (ref, hint) for s, ref, hint in examples}

# -- sentence: URL seeds the form once per session; curated examples fill it -----------------------------------
if "ex_seeded" not in st.session_state or st.session_state.get("ex_dir") != ctx.direction:
    first = "ex_seeded" not in st.session_state
    url_text = st.query_params.get("text") if first else None
    prev = st.session_state.get("ex_text")
    old_defaults = {e[0] for ex in EXAMPLES.values() for e in ex}
    if url_text is not None:
        st.session_state.ex_text = url_text
        st.session_state.ex_ref = st.query_params.get("ref", by_sentence.get(url_text, ("", ""))[0])
    elif prev is None or prev in old_defaults:
        st.session_state.ex_text, st.session_state.ex_ref = examples[0][0], examples[0][1]
    st.session_state.ex_seeded, st.session_state.ex_dir = True, ctx.direction


def _pick_example() -> None:
    choice = st.session_state.get("ex_pick")
    if choice in by_sentence:
        st.session_state.ex_text = choice
        st.session_state.ex_ref = by_sentence[choice][0]


top_left, top_right = st.columns([3, 2], gap="large")
with top_right:
    st.selectbox("Curated examples", [e[0] for e in examples], index=None, key="ex_pick", on_change=_pick_example,
                 placeholder="Pick a sentence with a hint…")
    ui.warn_bad_param("mode", MODES, "the mode must be free or forced")
    mode = st.radio("Decoder input", MODES, key="mode", bind="query-params", horizontal=True,
                    captions=["model's own output (beam 4)", "a reference you give"],
                    help="Free-running: the model decodes with beam search and we show the maps of its output. "
                         "Teacher-forced: the reference is fed to the decoder (as in training).")
    mode = mode if mode in MODES else "free"
with top_left:
    with st.form("explore", enter_to_submit=True, border=True):
        text = st.text_input(f"Sentence ({ctx.src_lang.upper()})", key="ex_text", placeholder="Type a sentence")
        ref = st.text_input(f"Reference translation ({ctx.tgt_lang.upper()}, teacher-forced mode)", key="ex_ref",
                            disabled=False, placeholder="Used only when the decoder input is 'forced'")
        st.form_submit_button("Show attention", type="primary")

st.query_params["text"] = text or ""
if mode == "forced" and ref:
    st.query_params["ref"] = ref
else:
    st.query_params.pop("ref", None)

cleaned, notes = check_text(text)
for note in notes:
    (st.warning if cleaned is not None else st.info)(note)
if cleaned is None:
    st.stop()
reference = None
if mode == "forced":
    reference, ref_notes = check_text(ref, what="reference")
    for note in ref_notes:
        st.warning(note)
    if reference is None:
        st.warning("Teacher-forced mode needs a reference translation; showing the model's own output instead.")
        mode = "free"
if cleaned in by_sentence:
    st.info(f"**What to look for.** {by_sentence[cleaned][1]}", icon="💡")

try:
    b = ui.sentence_bundle(ctx.direction, cleaned, reference=reference)
except ValueError as exc:
    st.error(f"Could not run the model: {exc}")
    st.stop()
if b["truncated"]:
    st.warning(f"The sentence is longer than the model accepts ({cfg.max_len} pieces); it was cut.")

label = "Model output" if b["mode"] == "free-running" else "Teacher-forced reference"
st.markdown(f"**{label}:** {b['text'] or '∅'}  \n<small>source pieces: {len(b['src_tokens'])} · "
            f"decoder positions: {len(b['out_tokens'])} · {b['elapsed_ms']:.0f} ms</small>", unsafe_allow_html=True)

# -- the view: a fragment, so a change of kind / layer / head / tab options reruns only this part ----------------
@st.cache_resource(max_entries=16, show_spinner=False)
def _model_view_figure(stack: np.ndarray, q_lab: list[str], k_lab: list[str], colorscale: str, template: str,
                       title: str, presenter: bool):
    """The L x H grid (it does not depend on the head picked): built once per (maps, labels, look), shared
    read-only (``ui.show_figure(..., prepared=True)``)."""
    return ui.prepare_figure(model_view(stack, q_labels=q_lab, k_labels=k_lab, colorscale=colorscale,
                                        template=template, title=title), presenter=presenter)


@st.cache_resource(max_entries=16, show_spinner=False)
def _stats_figure(stats, metric: str, colorscale: str, template: str, presenter: bool):
    """The head-statistics map (does not depend on the head picked), cached like :func:`_model_view_figure`."""
    return ui.prepare_figure(head_stats_figure(stats, metric, colorscale=colorscale, template=template),
                             presenter=presenter)


TABS = ("🔎 One head", "🧩 All heads", "⏯ Step by step", "📊 Head statistics")


def _track_tab() -> None:
    st.session_state.tab_tracked = True


@st.fragment
def view(b: dict) -> None:
    """Controls (kind, layer, head, words, specials, values; all in the URL), the four tabs and the
    downloads for one sentence bundle ``b`` (:func:`aiayn.app.sentence_bundle`)."""
    # Widgets of a tab that is not drawn in a run would lose their value (Streamlit drops the state of
    # widgets not seen in a run): re-store it, so the step and the mapped statistic survive a tab change.
    for key in ("step", "stat_metric"):
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]
    layer_opts = [str(i) for i in range(1, L + 1)]
    head_opts = ["mean"] + [str(i) for i in range(1, H + 1)]
    ui.warn_bad_param("kind", KINDS, "the kind must be encoder, decoder or cross")
    ui.warn_bad_param("layer", layer_opts, f"the layer must be 1 to {L}")
    ui.warn_bad_param("head", head_opts, f"the head must be 1 to {H} or mean")
    for flag in ("words", "nospecial", "values"):
        ui.warn_bad_param(flag, ("true", "false", "True", "False", "1", "0"), f"{flag} must be true or false")
    c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
    kind = c1.segmented_control("Attention", KINDS, default="cross", key="kind", bind="query-params", required=True,
                                help="encoder = encoder self-attention; decoder = masked decoder self-attention; "
                                     "cross = encoder-decoder attention (Section 3.2.3)")
    layer = c2.selectbox("Layer", layer_opts, index=L - 1, key="layer", bind="query-params")
    head = st.segmented_control("Head", head_opts, default="mean", key="head", bind="query-params", required=True)
    kind = kind if kind in KINDS else "cross"
    layer = layer if layer in layer_opts else layer_opts[-1]
    head = head if head in head_opts else "mean"
    t1, t2, t3 = st.columns(3)
    words = t1.toggle("Merge into words", key="words", bind="query-params",
                      help="Attention to a word = sum over its pieces; from a word = mean over its pieces.")
    hide = t2.toggle("Hide <s> and </s>", key="nospecial", bind="query-params",
                     help="Leave out the special tokens (rows are not renormalised).")
    values = t3.toggle("Write weights in cells", key="values", bind="query-params")

    st.caption(f"{KIND_NAMES[kind]}: {KIND_TITLES[kind]}. Rows are queries, columns keys; each row sums to 1. "
               + ("Decoder rows are labelled *fed → predicted*: the piece fed at that position (BOS-shifted) and the "
                  "piece the model predicted there." if kind != "encoder" else ""))

    stack, q_lab, k_lab = view_stack(b, kind, words=words, hide_special=hide)
    what = "mean over heads" if head == "mean" else f"head {head}"
    stem = f"{kind}_{ctx.direction}_L{layer}_{'mean' if head == 'mean' else 'H' + head}"

    # All four tabs are drawn on a page's first run, so browsing them is instant. Once a tab has been
    # clicked, the open tab is tracked and only it is drawn: a change of head, layer or option then
    # re-renders one tab, not four (the others are drawn when opened: a rerun of this fragment).
    tab_head, tab_all, tab_step, tab_stats = st.tabs(list(TABS), key="tab", on_change=_track_tab)
    only_open = bool(st.session_state.get("tab_tracked"))

    def _render(tab) -> bool:
        return not only_open or bool(tab.open)

    with tab_head:
        if _render(tab_head):
            w = stack[int(layer) - 1]
            w = w.mean(axis=0) if head == "mean" else w[int(head) - 1]
            yt, xt = AXIS_TITLES[kind]
            fig = attention_heatmap(w, q_lab, k_lab, title=f"{KIND_TITLES[kind].capitalize()}, layer {layer}, {what}",
                                    colorscale=ctx.colorscale, x_title=xt, y_title=yt, show_values=values,
                                    zmax=1.0 if values else None, template=ctx.template)
            ui.show_figure(fig, key="head_view", filename=stem)

    with tab_all:
        if _render(tab_all):
            st.caption(f"All {L} × {H} heads of the {KIND_TITLES[kind]}, one shared colour scale. Hover for values; "
                       "pick a layer and head above to zoom in.")
            mv = _model_view_figure(stack, q_lab, k_lab, ctx.colorscale, ctx.template,
                                    f"{KIND_TITLES[kind].capitalize()}: all heads", ctx.presenter)
            ui.show_figure(mv, key="model_view", filename=f"{kind}_{ctx.direction}_all_heads", prepared=True)

    with tab_step:
        if _render(tab_step):
            T = len(b["out_tokens"])
            step_opts = list(range(1, T + 1))
            ui.warn_bad_param("step", [str(s) for s in step_opts], f"the step must be 1 to {T}")
            if T > 1:
                step = st.slider("Decoding step", 1, T, key="step", bind="query-params",
                                 help="At step t the decoder has been fed t pieces and predicts the next one.")
            else:
                step = 1
            step = int(step) if step in step_opts else 1
            t = step - 1
            fed, out = b["dec_in"], b["out_tokens"]
            st.markdown(f"**Step {step} of {T}.** Fed so far: " + " ".join(f"`{p}`" for p in fed[: t + 1])
                        + f" → predicts **`{out[t]}`**")
            l_idx = int(layer) - 1
            dec = b["decoder"][l_idx]
            crs = b["cross"][l_idx]
            dec_w = dec.mean(axis=0) if head == "mean" else dec[int(head) - 1]
            crs_w = crs.mean(axis=0) if head == "mean" else crs[int(head) - 1]
            dq = [f"{i}:{fed[i]}→{out[i]}" for i in range(t + 1)]
            s1, s2 = st.columns([1, 1], gap="medium")
            with s1:
                fig = attention_heatmap(dec_w[: t + 1, : t + 1], dq, [f"{j}:{fed[j]}" for j in range(t + 1)],
                                        title=f"Decoder self-attention, rows 0..{t} (layer {layer}, {what})",
                                        colorscale=ctx.colorscale, x_title=AXIS_TITLES["decoder"][1],
                                        y_title=AXIS_TITLES["decoder"][0], zmax=1.0, template=ctx.template,
                                        height=int(min(620, 260 + 28 * (t + 1))))
                ui.show_figure(fig, key="step_decoder", filename=f"step{step}_decoder_{stem}")
            with s2:
                fig = attention_heatmap(crs_w[t : t + 1], dq[t:], [f"{j}:{p}" for j, p in enumerate(b["src_tokens"])],
                                        title=f"Cross-attention of step {step} over the source", colorscale=ctx.colorscale,
                                        x_title=AXIS_TITLES["cross"][1], y_title="query", zmax=1.0, template=ctx.template,
                                        height=300)
                ui.show_figure(fig, key="step_cross", filename=f"step{step}_cross_{stem}")
                if b["topk_pieces"] is not None:
                    pieces, probs = b["topk_pieces"][t], b["topk_probs"][t]
                    fig = topk_bar(pieces, probs, chosen=out[t], template=ctx.template,
                                   title=f"Top {len(pieces)} next pieces at step {step} (next: {out[t]}, "
                                         f"p = {float(b['chosen_prob'][t]):.3f})")
                    ui.show_figure(fig, key="step_topk", filename=f"step{step}_topk_{ctx.direction}")
                else:
                    st.info(f"Next-piece probabilities are not available for this output: {b['probs_note']}.")

    with tab_stats:
        if _render(tab_stats):
            qp, kp = kind_labels(b, kind)
            stats = head_stats(b[kind], qp, kp, kind=kind)
            st.caption("One row per head of the " + KIND_TITLES[kind] + " for this sentence. Click a column header "
                       "to sort: low entropy / high confidence = focused heads; high previous/next = positional heads; "
                       "high bos/eos = sink heads." + (" Self/previous/next are not defined for cross-attention."
                                                       if kind == "cross" else ""))
            num = {c: st.column_config.NumberColumn(c, help=STAT_HELP[c], format="%.3f") for c in STAT_HELP}
            st.dataframe(stats, hide_index=True, width="stretch", column_config=num, key="stats_table",
                         height=min(36 * (len(stats) + 1) + 4, 900))
            metric = st.selectbox("Map a statistic over layers × heads", list(STAT_HELP), key="stat_metric")
            if stats[metric].notna().any():
                ui.show_figure(_stats_figure(stats, metric, ctx.colorscale, ctx.template, ctx.presenter),
                               key="stats_grid", filename=f"{kind}_{ctx.direction}_{metric}", prepared=True)
            else:
                st.info(f"'{metric}' is not defined for {KIND_TITLES[kind]}.")
            st.download_button("⬇ Head statistics (CSV)", lambda: stats.to_csv(index=False),
                               file_name=f"head_stats_{kind}_{ctx.direction}.csv", mime="text/csv", on_click="ignore",
                               key="stats_csv")

    st.markdown("##### Download the maps")
    st.caption(f"All layers and heads of the {KIND_TITLES[kind]} for this sentence (long format; layer and head "
               "columns count from 0).")
    ui.download_buttons(lambda: bundle_maps(b).to_dataframe(kinds=[kind]), lambda: bundle_maps(b).to_json(),
                        f"attention_{kind}_{ctx.direction}", key="ex-dl")


view(b)
