"""Overview page: the Transformer in one screen, the architecture (Figure 1), the model card (read from the
checkpoint's ``config.json`` / ``MODEL_CARD.md``: the model is not loaded and torch not imported here).

Run with ``streamlit run app.py``. Pages live in ``pages/`` (legacy auto-discovery); the sidebar is drawn by
:func:`aiayn.app.setup_page`.
"""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from aiayn import app as ui
from aiayn.evaluation.modelcard import quality_verdict

ASSETS = Path(__file__).resolve().parent / "assets"

PAGE_BLURBS = {
    "pages/1_Translate.py": "Type a sentence and translate it with beam search; see the n-best list, the "
    "SentencePiece pieces and the cross-attention alignment.",
    "pages/2_Attention_Explorer.py": "Every head of every layer: encoder self, masked decoder self and "
    "encoder-decoder attention, word-level merging, step-by-step decoding and per-head statistics.",
    "pages/3_Positional_Encoding.py": "The sinusoids of Section 3.5: frequencies, similarity of positions, "
    "relative offsets as linear maps.",
    "pages/4_Masking.py": "Padding and look-ahead masks: why the decoder cannot peek at the future.",
    "pages/5_Scaled_Dot_Product.py": "QKᵀ → scale by 1/√d_k → mask → softmax → ·V, step by step (Eq. 1), "
    "and why the scaling matters.",
    "pages/6_Model_and_Training.py": "Parameters per block, the learning-rate schedule of Eq. 3, label "
    "smoothing and the training curves of the shipped models.",
    "pages/7_Head_Ablation.py": "Switch heads off and watch the translation and every remaining map change; "
    "which heads matter, head by head, over a sentence set (Michel et al. 2019; Voita et al. 2019).",
    "pages/8_Attention_Rollout.py": "Raw attention beside attention rollout (Abnar and Zuidema 2020): how "
    "information flows across layers, for the encoder, the decoder and onto the source.",
    "pages/9_Compare_Sentences.py": "Two sentences side by side (one word changed, active vs passive): both "
    "translations, their maps aligned, and the difference for any kind, layer and head.",
}


def _bleu_entries(meta: dict) -> list[tuple[str, float]]:
    """(name, value) of every BLEU-like number in checkpoint metadata (top level and one level down)."""
    found = []
    for k, v in meta.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and "bleu" in k.lower():
            found.append((k, float(v)))
        elif isinstance(v, dict) and k != "train_config":
            for k2, v2 in v.items():
                if isinstance(v2, (int, float)) and not isinstance(v2, bool) and "bleu" in k2.lower():
                    found.append((f"{k}.{k2}", float(v2)))
    return found


def model_card_brief(ctx: ui.PageContext) -> None:
    """The model card, read from the checkpoint's ``config.json`` and ``MODEL_CARD.md``: the model itself
    is not loaded and torch is not imported, so this page renders in a fraction of a second."""
    try:
        info = ui.checkpoint_info(ctx.direction)
    except ui.ModelUnavailable as exc:
        st.error(f"**No {ui.DIRECTION_LABELS[ctx.direction]} model could be loaded.** {exc}\n\n"
                 f"Expected a checkpoint directory at `{ctx.checkpoint}`. The pages that need a model "
                 "will say so; the others still work.", icon="🚫")
        return
    cfg, meta = info.cfg, info.meta
    n_params = meta.get("num_parameters")
    cols = st.columns(6)
    cols[0].metric("d_model", cfg.d_model)
    cols[1].metric("N (layers)", cfg.n_layers)
    cols[2].metric("h (heads)", cfg.n_heads, help=f"d_k = d_v = d_model / h = {cfg.d_model // cfg.n_heads}")
    cols[3].metric("d_ff", cfg.d_ff)
    cols[4].metric("Parameters", "n/a" if not isinstance(n_params, int) else
                   f"{n_params / 1e6:.1f} M" if n_params >= 1e5 else f"{n_params:,}")
    cols[5].metric("Vocabulary", f"{cfg.vocab_size:,}", help="joint SentencePiece BPE pieces, shared embeddings")
    facts = [f"**Direction:** {ui.DIRECTION_LABELS[ctx.direction]}",
             f"**P_drop:** {cfg.dropout}", f"**Max length:** {cfg.max_len} pieces",
             f"**Layer order:** {'pre-LN' if cfg.norm_first else 'post-LN (as in the paper)'}"]
    if meta.get("step") is not None:
        facts.append(f"**Training steps:** {meta['step']:,}")
    if meta.get("train_tokens"):
        facts.append(f"**Tokens seen:** {meta['train_tokens'] / 1e6:.1f} M")
    if meta.get("train_wall_time_s"):
        facts.append(f"**Training time:** {meta['train_wall_time_s'] / 3600:.1f} h")
    tc = meta.get("train_config") or {}
    data = meta.get("data") or tc.get("data") or tc.get("corpus") or tc.get("train")
    if data:
        facts.append(f"**Data:** {data if isinstance(data, str) else ', '.join(map(str, data))}")
    if meta.get("note"):
        facts.append(f"**Note:** {meta['note']}")
    st.markdown(" · ".join(facts))
    verdict = quality_verdict(meta)
    if verdict is not None:
        (st.success if verdict[0] == "beats" else st.info)(verdict[1], icon="✅" if verdict[0] == "beats" else "📏")
    bleus = _bleu_entries(meta)
    if bleus:
        st.markdown("**BLEU** (sacreBLEU, detokenised): " + ", ".join(f"{k} = {v:.1f}" for k, v in bleus))
    else:
        st.caption("No test BLEU recorded in this checkpoint's metadata (see MODEL_CARD.md when present).")
    card = ui.model_card(info.path)
    if card:
        with st.expander("Full model card (MODEL_CARD.md)"):
            st.markdown(card)


def main() -> None:
    ctx = ui.setup_page("Attention Is All You Need, inside out", icon="🏠")
    left, right = st.columns([3, 2], gap="large")
    with left:
        st.markdown(
            """
The **Transformer** (Vaswani et al., 2017) translates a sentence with **attention alone**: no recurrence,
no convolution. An **encoder** of *N* identical layers reads the source; each layer lets every word look at
every other word (**self-attention**), then passes each position through a small feed-forward network. A
**decoder** of *N* layers writes the translation one piece at a time: it looks back at what it has written
(**masked self-attention**, so it cannot peek at the future) and at the encoded source
(**encoder-decoder attention**). Each attention is split into *h* **heads** that attend in parallel, each
computing softmax(QKᵀ/√d_k)·V (Eq. 1). Position is added with **sinusoidal encodings** (Section 3.5).

This app runs a real, small Transformer trained on German–English dictionary pairs and lets you look
inside **every head of every layer**, for any sentence you type. Everything runs offline.
            """
        )
        st.markdown("#### Pages")
        carry = ui.nav_query_params()
        for path, label, icon in ui.PAGES[1:]:
            if ui.page_exists(path):
                ui.page_link(path, label=f"**{label}**", icon=icon, query_params=carry or None)
                st.caption(PAGE_BLURBS.get(path, ""))
    with right:
        fig1 = ASSETS / "architecture.svg"
        if fig1.is_file():
            st.image(str(fig1), caption="The Transformer (after Figure 1 of the paper): encoder left, decoder right.",
                     width="stretch")
        else:
            st.info("Architecture figure missing (assets/architecture.svg).")
    st.subheader(f"The model ({ui.DIRECTION_LABELS[ctx.direction]})")
    model_card_brief(ctx)
    # The page is drawn: import torch and the model code in the background, so that the next page that
    # needs the model (loaded once per process, st.cache_resource) does not wait for it.
    ui.warm_imports()


main()
