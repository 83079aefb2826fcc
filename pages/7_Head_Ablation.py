"""Head ablation: switch attention heads off and watch the translation and every remaining map change
(Michel et al. 2019, "Are Sixteen Heads Really Better than One?"; Voita et al. 2019), then the sweep: what each
head alone costs on the curated sentences. Heads are removed before W^O (Section 3.2.2)."""
from __future__ import annotations

import aiayn.app.preload  # noqa: F401 - first: a cold server's sessions import in one go (see that module)

import streamlit as st

from aiayn import app as ui
from aiayn.app.state import reference_follows, remember_form, seed_form, write_view
from aiayn.app.ablation import (
    compared_maps, comparison_view, head_switches, mask_for, scores, seed_switches, sweep_view,
)
from aiayn.examples import EXAMPLES, sentence_pairs
from aiayn.sweep import sweep_path

ctx = ui.setup_page("Head ablation", icon=":material/block:")
tr = ctx.translator
cfg = tr.cfg
L, H = cfg.n_layers, cfg.n_heads
examples = EXAMPLES[ctx.direction]
by_sentence = {s: ref for s, ref, _ in examples}

st.caption("Each head's output softmax(QKᵀ/√d_k)V is multiplied by 0 before the heads are concatenated and "
           "projected by W^O (Section 3.2.2); everything else is unchanged. A removed head's attention weights are "
           "still computed: its maps show what it *would* attend to, but nothing it reads reaches the next layer.")

# -- sentence: kept in the session across pages (persist_state="session"), seeded from the URL on the first visit
# and when the URL holds another view (a link, Back / Forward; see aiayn.app.state). A newly typed sentence gets its
# curated reference, or an empty box: never the previous sentence's reference.
PAGE = "pages/7_Head_Ablation.py"
DEFAULT_TEXT, DEFAULT_REF = examples[0][0], examples[0][1]


def _from_url() -> dict:
    text = st.query_params.get("text", DEFAULT_TEXT)
    return {"ab_text": text, "ab_ref": st.query_params.get("ref", by_sentence.get(text, ""))}


def _for_direction(old: str) -> dict | None:  # the other language's example
    return ({"ab_text": DEFAULT_TEXT, "ab_ref": DEFAULT_REF}
            if st.session_state.get("ab_text") in {e[0] for e in EXAMPLES.get(old, ())} else None)


if seed_form(PAGE, ("text", "ref"), ctx.direction, from_url=_from_url, for_direction=_for_direction) is None:
    reference_follows("ab_text", "ab_ref", lambda t: by_sentence.get(t, ""))


def _pick_example() -> None:
    choice = st.session_state.get("ab_pick")
    if choice in by_sentence:
        st.session_state.ab_text, st.session_state.ab_ref = choice, by_sentence[choice]


left, right = st.columns([3, 2], gap="large")
with right:
    st.selectbox("Curated examples", list(by_sentence), index=None, key="ab_pick", on_change=_pick_example,
                 placeholder="Pick a sentence…")
with left:
    with st.form("ablate", enter_to_submit=True, border=True):
        text = st.text_input(f"Sentence ({ctx.src_lang.upper()})", key="ab_text", persist_state="session",
                             placeholder="Type a sentence")
        ref = st.text_input(f"Reference ({ctx.tgt_lang.upper()}, optional: scores the outputs with chrF)", key="ab_ref",
                            persist_state="session")
        st.form_submit_button("Translate", type="primary")
write_view(PAGE, {"text": None if text == DEFAULT_TEXT else text or "",
                     "ref": None if ref == by_sentence.get(text, "") else ref or ""})
remember_form("ab_text", text, ref)

cleaned = ui.sentence_or_stop(text)
ui.language_hint(cleaned, ctx.src_lang, ctx.tgt_lang)
reference = ui.optional_reference(ref)

# -- the head switches ----------------------------------------------------------------------------------------
st.markdown("#### Switch heads off")
st.caption(f"Pick the heads to remove, per kind and layer (layers and heads from 1; {L} layers × {H} heads). The "
           "removed heads are kept in the link (`off=cross.3.2,encoder.1.5`).")
seed_switches(ctx.direction, L, H)
off = head_switches(L, H)
mask = mask_for(off, L, H)

try:
    intact = ui.explain_sentence(ctx.direction, cleaned)
    ablated = ui.explain_sentence(ctx.direction, cleaned, head_mask=mask) if off else intact
    s_intact = scores(ctx.direction, intact, reference, None)
    s_ablated = scores(ctx.direction, ablated, reference, mask) if off else s_intact
except ValueError as exc:
    st.error(f"Could not run the model: {exc}")
    st.stop()

# -- the two translations side by side --------------------------------------------------------------------------
c1, c2 = st.columns(2, gap="large")
with c1:
    st.markdown(f"**Intact model** (beam 4)  \n{intact.text or '∅'}")
    for name, value in s_intact.items():
        st.metric(name, f"{value:.2f}")
with c2:
    st.markdown(f"**Without {len(off)} head{'s' if len(off) != 1 else ''}** (beam 4)  \n{ablated.text or '∅'}")
    for name, value in s_ablated.items():
        delta = f"{value - s_intact[name]:+.2f}" if off else None
        if delta in ("+0.00", "-0.00"):  # unchanged at the shown precision: no green rise, no red fall
            st.metric(name, f"{value:.2f}", delta="0.00", delta_color="off", delta_arrow="off")
        else:
            st.metric(name, f"{value:.2f}", delta=delta)
if not off:
    st.info("Every head is on: pick heads above to remove them.")
elif ablated.text == intact.text:
    st.success("Same translation without these heads; the maps below show what changed inside.")
st.caption("score: length-normalised log-probability of the beam output (Section 6.1); chrF: sentence chrF "
           "against the reference (0–100); ref log-prob / piece: the reference teacher-forced, nats per piece.")

# -- how every remaining map changes ------------------------------------------------------------------------------
st.markdown("#### How the maps change")
ON = ["intact", "ablated"]
ui.warn_bad_param("on", ON, "compare on must be intact or ablated")
on = st.segmented_control("Decoder input of both runs", ON, default="intact", key="on", bind="query-params",
                          required=True, help="Both models are teacher-forced on the same pieces so that their maps "
                                              "line up: the intact model's output or the ablated model's output.")
base = ablated if on == "ablated" and off else intact
if not base.output_ids:
    st.info("The output is empty: there are no decoder maps to compare.")
else:
    m_intact, m_ablated = compared_maps(ctx.direction, base.src_ids, base.output_ids, mask)
    comparison_view(ctx, m_intact, m_ablated, off)

# -- the sweep ----------------------------------------------------------------------------------------------------
st.markdown("#### Sweep: each head removed alone")
pairs = sentence_pairs(ctx.direction)
st.caption(f"For each head alone: the drop in corpus chrF of the beam output and in the reference's mean "
           f"log-probability per piece, on the {len(pairs)} curated sentences of this direction. "
           f"Cached beside the checkpoint in {sweep_path(ctx.checkpoint, ctx.translator.projection.precision).name}.")
sweep_view(ctx, pairs)
