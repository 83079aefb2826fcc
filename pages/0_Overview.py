"""Overview page: the Transformer in one screen, the architecture (Figure 1), the model card (read from the
checkpoint's ``config.json`` / ``MODEL_CARD.md``: the model is not loaded and torch not imported here).

Run by the app's frame (``app.py``, :func:`aiayn.app.frame.run_app`) as its default page.
"""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from aiayn import app as ui
from aiayn.app.state import link_params
from aiayn.catalog import imported_from, imported_source
from aiayn.evaluation.modelcard import quality_verdict
from aiayn.lineage import lineage_markdown

ASSETS = Path(__file__).resolve().parents[1] / "assets"

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
    "smoothing, the training curves of the shipped models and every run each one descends from.",
    "pages/7_Head_Ablation.py": "Switch heads off and watch the translation and every remaining map change; "
    "which heads matter, head by head, over a sentence set (Michel et al. 2019; Voita et al. 2019).",
    "pages/8_Attention_Rollout.py": "Raw attention beside attention rollout (Abnar and Zuidema 2020): how "
    "information flows across layers, for the encoder, the decoder and onto the source.",
    "pages/9_Compare_Sentences.py": "Two sentences side by side (one word changed, active vs passive): both "
    "translations, their maps aligned, and the difference for any kind, layer and head.",
    "pages/10_Figure_1.py": "Figure 1 walked block by block on your sentence: every block's real tensors, a guided "
    "lesson, the beam search as a tree, the logit lens, greedy and sampling beside the beam.",
    "pages/11_Alignment_and_Attribution.py": "How well heads align words (AER against hand-made links and IBM Model "
    "1), across training, and how attention agrees with gradient attribution.",
}


#: readable names of the scores a checkpoint records (``meta["test_scores"]``, :func:`record_scores`)
SCORE_NAMES = {"test_bleu": "test BLEU", "test_chrf": "chrF", "dictionary_baseline_bleu": "dictionary baseline BLEU",
               "dictionary_baseline_chrf": "chrF"}


def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v else None


def _readable(key: str) -> str:
    """``"valid_bleu"`` -> ``"valid BLEU"``: a metadata key as words."""
    return " ".join({"bleu": "BLEU", "chrf": "chrF"}.get(w.lower(), w) for w in key.split("_"))


def score_line(meta: dict) -> str | None:
    """The checkpoint's scores as one readable line, e.g. ``"test BLEU 6.5, chrF 27.0 (dictionary baseline BLEU
    1.7, chrF 25.9) on 1,000 held-out test sentences"``; other BLEU-like numbers of the metadata (top level)
    are named in words. None when there is no score."""
    sc = meta.get("test_scores") if isinstance(meta.get("test_scores"), dict) else {}
    model = [f"{SCORE_NAMES[k]} {v:.1f}" for k in ("test_bleu", "test_chrf") if (v := _number(sc.get(k))) is not None]
    base = [f"{SCORE_NAMES[k]} {v:.1f}" for k in ("dictionary_baseline_bleu", "dictionary_baseline_chrf")
            if (v := _number(sc.get(k))) is not None]
    parts = []
    if model or base:
        text = ", ".join(model) if model else "no test score"
        if base:
            text += f" ({', '.join(base)})"
        n = sc.get("n_sentences")
        if isinstance(n, int) and not isinstance(n, bool):
            text += f" on {n:,} held-out test sentences"
        parts.append(text)
    parts += [f"{_readable(k)} {_number(v):.1f}" for k, v in meta.items()
              if "bleu" in k.lower() and _number(v) is not None]
    return "; ".join(parts) or None


def about_model(checkpoint: Path) -> str:
    """What the intro says the app runs: the shipped model's training data, or the imported model the sidebar chose
    (its name and origin, from ``config.json`` alone: :func:`aiayn.catalog.imported_from`; no torch)."""
    source = imported_from(checkpoint)
    if source:
        return (f"This app runs **{checkpoint.name}**, a Transformer imported from {source} (trained elsewhere and "
                "converted with `aiayn import-marian`),")
    return ("This app runs a real, small Transformer trained on German–English dictionary pairs and on sentences "
            "from the translations shipped in Debian packages,")


def model_card_brief(ctx: ui.PageContext) -> None:
    """The model card, read from the checkpoint's ``config.json`` and ``MODEL_CARD.md``: the model itself
    is not loaded and torch is not imported, so this page renders in a fraction of a second."""
    try:
        info = ui.checkpoint_info(ctx.direction)
    except ui.ModelUnavailable as exc:
        st.error(f"**No {ui.DIRECTION_LABELS[ctx.direction]} model could be loaded.** {exc}\n\n"
                 f"Expected a checkpoint directory at `{ctx.checkpoint}`. The pages that need a model "
                 "will say so; the others still work.", icon=":material/block:")
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
    cols[5].metric("Vocabulary", f"{cfg.vocab_size:,}", help=(
        "one vocabulary of the source and the target SentencePiece models (Marian's), shared embeddings"
        if imported_source(meta) else "joint SentencePiece BPE pieces, shared embeddings"))
    facts = [f"**Direction:** {ui.DIRECTION_LABELS[ctx.direction]}",
             f"**P_drop:** {cfg.dropout}", f"**Max length:** {cfg.max_len} pieces",
             f"**Layer order:** {'pre-LN (a departure from the paper, see the model card)' if cfg.norm_first else 'post-LN (as in the paper)'}"]
    training = lineage_markdown(meta)  # lifetime totals over every run the weights descend from
    tc = meta.get("train_config") or {}
    data = meta.get("data") or tc.get("data") or tc.get("corpus") or tc.get("train")
    if data:
        facts.append(f"**Data:** {data if isinstance(data, str) else ', '.join(map(str, data))}")
    if meta.get("note"):
        facts.append(f"**Note:** {meta['note']}")
    st.markdown(" · ".join(facts))
    if training:
        st.markdown(training)
    verdict = quality_verdict(meta)
    if verdict is not None:
        (st.success if verdict[0] == "beats" else st.info)(verdict[1], icon=":material/check_circle:" if verdict[0] == "beats" else ":material/straighten:")
    scores = score_line(meta)
    if scores:
        st.markdown(f"**Scores** (sacreBLEU and chrF on detokenised text): {scores}.")
    else:
        st.caption("No test BLEU recorded in this checkpoint's metadata (see MODEL_CARD.md when present).")
    card = ui.model_card(info.path)
    if card:
        with st.expander("Full model card (MODEL_CARD.md)"):
            st.markdown(card)


def main() -> None:
    ctx = ui.setup_page("Attention Is All You Need, inside out", icon=":material/home:")
    # equal columns: the architecture figure needs ~420 px at 1366 px for its labels to read at >= 12 px
    left, right = st.columns([1, 1], gap="large")
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

"""
        )
        st.markdown(f"{about_model(ctx.checkpoint)} and lets you look inside **every head of every layer**, for any "
                    "sentence you type. Everything runs offline.")
        st.markdown("#### Pages")
        for path, label, icon in ui.PAGES[1:]:
            if ui.page_exists(path):
                ui.page_link(path, label=f"**{label}**", icon=icon, query_params=link_params(path) or None)
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
