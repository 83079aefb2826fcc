"""Translate: beam search (Section 6.1) on a typed sentence, n-best list, pieces, cross-attention alignment.
Input longer than SPLIT_ABOVE characters is split into sentences here (the Translator itself cuts over-long input
and flags it as truncated), translated one by one, and shown joined."""
from __future__ import annotations

import aiayn.app.preload  # noqa: F401 - first: a cold server's sessions import in one go (see that module)

import re

import pandas as pd
import streamlit as st

from aiayn import app as ui
from aiayn.app.pickers import head_picker, layer_picker
from aiayn.app.state import seed_form, write_view
from aiayn.analysis import kind_stack, query_labels, split_sentences, unique_labels, unseen_script_share
from aiayn.figures.attention import AXIS_TITLES, attention_heatmap
from aiayn.figures.reranking import recovery_bars
from aiayn.evaluation.modelcard import quality_verdict
from aiayn.reranking import DEFAULT_WEIGHT, reverse_direction
from aiayn.translation import LANGUAGE_NAMES

DEFAULTS = {"en-de": "I have no time.", "de-en": "Ich habe keine Zeit."}
BEAM_MAX = 16
MAX_INPUT = 5000  # characters the page accepts (longer input is cut, with a note)
SPLIT_ABOVE = 300  # input longer than this is split into sentences (aiayn.analysis.split_sentences)
UNSEEN_SHARE = 0.3  # share of letters in another script, or of byte pieces, from which the page says so
MARKUP = re.compile(r"([\\`*_\[\]<>$~|#])")  # markdown / LaTeX markup, escaped by plain()
BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")  # SentencePiece byte fallback: a character the vocabulary lacks


def plain(text: str) -> str:
    """``text`` shown literally in markdown (st.table cells are markdown): its markup characters escaped."""
    return MARKUP.sub(r"\\\1", text)


def chips(pieces: list[str]) -> str:
    return " ".join(f"`{p.replace('`', 'ˋ')}`" for p in pieces)


ctx = ui.setup_page("Translate", icon=":material/translate:")
tr = ctx.translator
cfg = tr.cfg

# -- form state: kept in the session across pages (persist_state="session"), seeded from the URL on the first visit
# and when the URL holds another view (a shared link, Back / Forward); see aiayn.app.state.
PAGE = "pages/1_Translate.py"


def _from_url() -> dict:
    text, alpha = st.query_params.get("text"), ui.number_param("alpha", 0.0, 2.0, kind=float)
    return {"tr_text": DEFAULTS[ctx.direction] if text is None else text,
            "tr_beam": ui.number_param("beam", 1, BEAM_MAX) or 4, "tr_alpha": 0.6 if alpha is None else alpha,
            "tr_maxlen": ui.number_param("maxlen", 1, cfg.max_len)}


def _for_direction(old: str) -> dict | None:  # the other language's default sentence
    return {"tr_text": DEFAULTS[ctx.direction]} if st.session_state.get("tr_text") == DEFAULTS.get(old) else None


seed_form(PAGE, ("text", "beam", "alpha", "maxlen"), ctx.direction, from_url=_from_url, for_direction=_for_direction)

with st.form("translate", enter_to_submit=True, border=True):
    text = st.text_input(f"Sentence in {'English' if ctx.src_lang == 'en' else 'German'}", key="tr_text",
                         max_chars=None, persist_state="session", placeholder="Type a sentence and press Enter")
    c1, c2, c3, c4 = st.columns([1, 1, 1, 1], vertical_alignment="bottom")
    beam = c1.number_input("Beam size", 1, BEAM_MAX, step=1, key="tr_beam", persist_state="session",
                           help="1 = greedy decoding; paper: 4")
    alpha = c2.slider("Length penalty α", 0.0, 2.0, step=0.1, key="tr_alpha", persist_state="session",
                      help="GNMT length penalty ((5+|Y|)/6)^α; paper: 0.6. 0 = raw log-probability.")
    max_len = c3.number_input("Max output pieces", 1, cfg.max_len, step=1, key="tr_maxlen", persist_state="session",
                              placeholder="source + 50", help="Empty: source length + 50 (Section 6.1)")
    c4.form_submit_button("Translate", type="primary", width="stretch")

ui.warn_bad_param("rerank", ui.is_bool, "it must be true or false")
rerank = st.toggle(
    "Rerank with the reverse model", key="rerank", bind="query-params",
    help=f"Not in the paper. Rescore the beam's n-best list by the forward score + {DEFAULT_WEIGHT:g} × log P(source | "
         "translation) per source piece, the probability that the model of the opposite direction gives the source "
         "back from each translation (Yee et al. 2019, without their language model). It favours translations that "
         "keep all of the source. Measured on the shipped models (docs/decoding.md): chrF up on the Ding test split "
         "for both directions; on the short and classic development sentences, de-en up on the short ones and level "
         "on the classic ones, en-de down on both. Off: the paper's beam search (Section 6.1).")

# keep the view in the URL (defaults left out)
write_view(PAGE, {"text": None if text == DEFAULTS[ctx.direction] else text, "beam": None if int(beam) == 4 else int(beam),
                  "alpha": None if round(float(alpha), 2) == 0.6 else round(float(alpha), 2), "maxlen": max_len})

# -- translate: long input sentence by sentence (the model was trained on single sentences) ---------------------
cleaned = ui.sentence_or_stop(text, max_chars=MAX_INPUT)
sentences = split_sentences(cleaned) if len(cleaned) > SPLIT_ABOVE else [cleaned]
try:
    results = [ui.explain_sentence(ctx.direction, s, beam_size=int(beam), length_penalty=float(alpha),
                                   max_len=None if max_len is None else int(max_len), n_best=int(beam))
               for s in sentences]
except ValueError as exc:
    st.error(f"Could not translate: {exc}")
    st.stop()
except ui.ModelUnavailable as exc:
    st.error(f"The model could not be loaded: {exc}")
    st.stop()
n = len(results)
reranked = None  # per sentence: the n-best list in the reverse model's order (dicts of aiayn.reranking.Reranked)
if rerank:
    try:
        reranked = [ui.reranked_nbest(ctx.direction, s, r.nbest, DEFAULT_WEIGHT) for s, r in zip(sentences, results)]
    except (ValueError, ui.ModelUnavailable) as exc:
        st.warning(f"Could not rerank with the {reverse_direction(ctx.direction)} model ({exc}); showing the beam's "
                   "output.", icon=":material/swap_horiz:")
texts = [r.text for r in results] if reranked is None else [rows[0]["text"] for rows in reranked]

# a script the model never saw: letters outside the Latin script, or source pieces that are raw bytes
share, scripts = unseen_script_share(cleaned)
src_pieces = [p for r in results for p in r.src_tokens if p not in ("</s>", "\u2581")]
n_bytes = sum(bool(BYTE_PIECE.fullmatch(p)) for p in src_pieces)
if share >= UNSEEN_SHARE or (src_pieces and n_bytes / len(src_pieces) >= UNSEEN_SHARE):
    names = ", ".join(x if x == "CJK" else x.title() for x in scripts)
    seen = f"{share:.0%} of the letters are in a script it never saw ({names}); " if scripts else ""
    st.warning(f"**This model only knows English and German** (it was trained on {LANGUAGE_NAMES[ctx.src_lang]} → "
               f"{LANGUAGE_NAMES[ctx.tgt_lang]} sentence pairs). {seen}{n_bytes} of the {len(src_pieces)} source pieces are "
               "raw bytes (`<0x..>`): its vocabulary has no piece for those characters. The output below is not a "
               f"translation; type {LANGUAGE_NAMES[ctx.src_lang]}.", icon=":material/translate:")
else:  # the other language of the pair: German typed into en-de, English into de-en
    ui.language_hint(cleaned, ctx.src_lang, ctx.tgt_lang)
if n > 1:
    st.info(f"The input is {len(cleaned):,} characters long (more than {SPLIT_ABOVE}), so it was split into **{n} "
            "sentences** (after . ! ? … followed by a space, and after the CJK full stop, exclamation and question "
            "marks) and each was translated on its own: the model was trained on single sentences. Pick a sentence "
            "below for its n-best list, pieces and alignment.", icon=":material/segment:")
cut = [i + 1 for i, r in enumerate(results) if r.truncated]
unfinished = [i + 1 for i, r in enumerate(results) if not r.finished]
numbers = (lambda idx: ("Sentence " if len(idx) == 1 else "Sentences ") + ", ".join(str(i) for i in idx[:8])
           + (f" and {len(idx) - 8} more" if len(idx) > 8 else ""))
if cut:
    st.warning(("The sentence is" if n == 1 else numbers(cut) + (" is" if len(cut) == 1 else " are"))
               + f" longer than the model accepts ({cfg.max_len} pieces); it was cut.", icon=":material/content_cut:")
if unfinished:
    st.warning(("The translation" if n == 1 else f"{numbers(unfinished)}: the translation") + " stopped at the "
               "maximum output length before the end-of-sentence token.", icon=":material/timer:")

st.markdown("#### Translation")
if n == 1:
    st.subheader(texts[0] or "∅ (empty output)", anchor=False)
else:
    st.text(" ".join(texts))
if reranked is not None:
    moved = [i + 1 for i, rows in enumerate(reranked) if rows[0]["beam_rank"] != 0]
    other = reverse_direction(ctx.direction)
    if not moved:
        st.caption(f"Reranked with the {other} model: the beam's own output stays first.")
    elif n == 1:
        st.caption(f"Reranked with the {other} model: this is the beam's #{reranked[0][0]['beam_rank'] + 1}. The beam's "
                   f"own output: “{results[0].text}” The pieces and maps below are those of the forward model "
                   "writing this translation (a teacher-forced pass).")
    else:
        st.caption(f"Reranked with the {other} model: {numbers(moved).lower()} changed from the beam's output.")
verdict = quality_verdict(tr.meta)
if verdict is not None:
    level, message = verdict
    if level == "beats":
        st.caption(message)
    else:
        st.info(message, icon=":material/straighten:")
m1, m2, m3, m4 = st.columns(4)
shared = max(r.batch_size for r in results)
m1.metric("Time", f"{sum({s: r.elapsed_ms for s, r in zip(sentences, results)}.values()):.0f} ms",
          help="Wall time of the beam search, this server" + (" (each distinct sentence once)" if n > 1 else "")
          + (f". Decoded in one batch with other sentences that reached the server at the same moment ({shared} in "
             "all): the time is the batch's; the result is the sentence's own (equal to a lone translation up to "
             "float rounding)." if shared > 1 else ""))
if n == 1 and reranked is not None:
    m2.metric("Reranked score", f"{reranked[0][0]['score']:.3f}", help="The beam's length-normalised log-probability "
              f"+ {DEFAULT_WEIGHT:g} × the reverse model's log P(source | translation) per source piece")
elif n == 1:
    m2.metric("Score", f"{results[0].score:.3f}", help="Length-normalised log-probability (natural log) the beam "
              "ranked by")
else:
    m2.metric("Sentences", n, help=f"Input longer than {SPLIT_ABOVE} characters is translated sentence by sentence")
m3.metric("Source pieces", sum(len(r.src_tokens) for r in results))
m4.metric("Output pieces", sum(len(r.output_tokens) for r in results))

pick = 1
if n > 1:
    with st.expander(f"Sentence by sentence ({n})"):
        scores = [r.score for r in results] if reranked is None else [rows[0]["score"] for rows in reranked]
        st.table(pd.DataFrame({"#": range(1, n + 1),
                               "reranked score" if reranked else "score": [f"{v:.3f}" for v in scores],
                               "source": [plain(x) for x in sentences],
                               "translation": [plain(t) for t in texts]}), hide_index=True)
    ui.warn_bad_param("sent", [str(i) for i in range(1, n + 1)], f"the sentence must be 1 to {n}")
    s1, s2 = st.columns([1, 3], vertical_alignment="bottom")
    pick = s1.selectbox("Sentence shown below", list(range(1, n + 1)), key="sent", bind="query-params",
                        help="Its n-best list, pieces and alignment")
    pick = pick if pick in range(1, n + 1) else 1
    s2.markdown(f"**{pick}:** {plain(sentences[pick - 1])}")
result = results[pick - 1]
if reranked is not None and reranked[pick - 1][0]["beam_rank"] != 0:  # the maps of the translation shown
    try:
        result = ui.explain_sentence(ctx.direction, sentences[pick - 1], reference=reranked[pick - 1][0]["text"])
    except (ValueError, ui.ModelUnavailable) as exc:
        st.error(f"Could not run the model on the reranked translation: {exc}")
        st.stop()

left, right = st.columns([1, 1], gap="large")
with left:  # a table that wraps (even inside long words): long hypotheses are shown in full, the score stays in view
    st.html("<style>[data-testid=stTable] td:last-child p { overflow-wrap: anywhere !important; }</style>")
    if reranked is None:
        nbest = results[pick - 1].nbest
        st.markdown(f"**n-best list** (beam size {int(beam)}, α = {float(alpha):.1f})")
        st.table(pd.DataFrame({"rank": range(1, len(nbest) + 1), "score": [f"{s:.3f}" for _, s in nbest],
                               "translation": [plain(t) or "∅" for t, _ in nbest]}), hide_index=True)
    else:
        rows = reranked[pick - 1]
        st.markdown(f"**n-best list, reranked** (beam size {int(beam)}, α = {float(alpha):.1f}, reverse weight "
                    f"{DEFAULT_WEIGHT:g})")
        st.table(pd.DataFrame({
            "rank": range(1, len(rows) + 1), "beam": [r["beam_rank"] + 1 for r in rows],
            "beam score": [f"{r['forward_score']:.3f}" for r in rows],
            "log P(src | out)": ["—" if r["reverse_log_prob"] == float("-inf") else f"{r['reverse_log_prob']:.2f}"
                                 for r in rows],
            "score": ["—" if r["score"] == float("-inf") else f"{r['score']:.3f}" for r in rows],
            "translation": [plain(r["text"]) or "∅" for r in rows]}), hide_index=True)
        st.caption(f"score = beam score + {DEFAULT_WEIGHT:g} × log P(source | translation) / {rows[0]['source_pieces']} "
                   f"source pieces, under the {reverse_direction(ctx.direction)} model.")
with right:
    st.markdown("**SentencePiece pieces** (`▁` marks the start of a word)")
    st.markdown("Source: " + chips(result.src_tokens))
    st.markdown("Output: " + chips(result.output_tokens))

# -- what the translation keeps of the source: the reverse model reads it back ------------------------------------
if reranked is not None:
    rows = reranked[pick - 1]
    st.markdown("#### What the translation keeps of the source")
    st.caption(f"The {reverse_direction(ctx.direction)} model reads a translation and predicts the source piece by "
               "piece: a low bar is a piece it cannot get back, something the translation may have left out or "
               "changed. Its log-probabilities summed are the log P(source | translation) of the table above.")
    readable = [k for k, r in enumerate(rows) if r["reverse_piece_log_probs"]]  # an empty output reads back nothing
    if readable:
        k = st.selectbox("Translation read back", readable, key="tr_recover",
                         format_func=lambda k: f"#{k + 1}: {rows[k]['text']}")
        r = rows[k if k in readable else readable[0]]
        ui.show_figure(recovery_bars(r["source_tokens"], r["reverse_piece_log_probs"], template=ctx.template),
                       key="recovery", filename=f"source_recovery_{ctx.direction}")

# -- cross-attention alignment --------------------------------------------------------------------------------
st.markdown("#### Alignment: encoder-decoder attention")
st.caption("Each row is an output piece (what the decoder was fed → what it predicted); each column a source "
           "piece. A bright cell means that output position looked at that source piece.")
a1, a2 = st.columns([1, 4])
layer, head = layer_picker(a1, cfg.n_layers), head_picker(a2, cfg.n_heads)
cross = kind_stack(result.attention, "cross")[layer - 1]
w = cross.mean(axis=0) if head is None else cross[head - 1]
what = "mean over heads" if head is None else f"head {head}"
fig = attention_heatmap(
    w, query_labels(result.decoder_input_tokens, result.output_tokens), unique_labels(result.src_tokens),
    title=f"Cross-attention, layer {layer}, {what}", colorscale=ctx.colorscale,
    x_title=AXIS_TITLES["cross"][1], y_title=AXIS_TITLES["cross"][0], template=ctx.template,
)
ui.show_figure(fig, key="alignment", filename=f"alignment_{ctx.direction}_L{layer}_{what.replace(' ', '_')}")
ui.download_buttons(lambda: result.attention.to_dataframe(kinds=["cross"]), lambda: result.attention.to_json(),
                    f"attention_{ctx.direction}" + (f"_sentence{pick}" if n > 1 else ""), key="tr-dl")

forced = result.mode == "teacher-forced"  # a reranked translation the beam did not put first: the explorer feeds it
explorer_params = ui.nav_query_params(text=result.source, kind="cross", layer=layer, head=head or "mean",
                                      **({"mode": "forced", "ref": result.reference} if forced else {}))
ui.page_link("pages/2_Attention_Explorer.py", label="Open this sentence in the attention explorer"
             + (" (this translation, teacher-forced)" if forced else ""), icon=":material/search:",
             query_params=explorer_params)
