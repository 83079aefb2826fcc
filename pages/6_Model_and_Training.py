"""Model and training lab: parameters per component (Table 3), the config, training curves from the shipped
metrics log, the learning-rate schedule (Section 5.3, Equation 3) and label smoothing (Section 5.4)."""
from __future__ import annotations

import aiayn.app.preload  # noqa: F401 - first: a cold server's sessions import in one go (see that module)

import json

import numpy as np
import pandas as pd
import streamlit as st

from aiayn import lessons
from aiayn import app as ui
from aiayn.model.config import TransformerConfig
from aiayn.figures import labs
from aiayn.evaluation.modelcard import config_change_notes
from aiayn.catalog import imported_from
from aiayn.lineage import lifetime, lineage_markdown
from aiayn.training.recipe import noam_lr


@st.cache_data(max_entries=16, show_spinner="Counting parameters…")
def summary(cfg_json: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    cfg = TransformerConfig.from_dict(json.loads(cfg_json))
    return lessons.parameter_summary(cfg), lessons.parameter_breakdown(cfg)


@st.cache_data(max_entries=8, show_spinner=False, ttl=60)
def metrics(path: str, stamp: float) -> tuple[pd.DataFrame, list[str]]:  # noqa: ARG001 - stamp = mtime, a cache key
    return lessons.load_metrics(path)


#: what section 3 says for a model imported by ``aiayn import-marian`` (trained elsewhere, no log of it here)
IMPORTED_CURVES = ("This model was imported ({source}), trained elsewhere: its training was not recorded here, so it "
                   "has no training curves to show. The sections below hold for it as for any model.")

ctx = ui.setup_page("Model and training", icon=":material/monitoring:", intro=(
    "Where the parameters are, what the chosen model was trained with, and two training ingredients of Section 5: "
    "the warm-up learning-rate schedule (Equation 3) and label smoothing."))
tr = ctx.translator_or_none()

# -- 1. parameters -------------------------------------------------------------------------------------------------
st.header("1 · Parameters per component")
models: dict[str, TransformerConfig] = {}
if tr is not None:
    models[f"loaded ({ctx.checkpoint.name})"] = tr.cfg
else:
    st.info("No model could be loaded for this direction; showing the paper's presets only.")
vocab = tr.cfg.vocab_size if tr is not None else 37000
models["paper base"] = TransformerConfig.preset("base", vocab_size=37000)
models["paper big"] = TransformerConfig.preset("big", vocab_size=37000)
summaries = {name: summary(cfg.to_json())[0] for name, cfg in models.items()}
log_scale = st.toggle("Logarithmic axis", key="logp", bind="query-params", value=True)
ui.show_figure(labs.parameters_figure(summaries, presenter=ctx.presenter, log=log_scale), key="params", filename="parameters")
table = pd.concat([df.assign(model=name) for name, df in summaries.items()], ignore_index=True)
wide = table.pivot_table(index=["stack", "component"], columns="model", values="parameters", sort=False).reset_index()
st.dataframe(wide, hide_index=True, column_config={n: st.column_config.NumberColumn(format="%d") for n in summaries})
totals = {name: int(df["parameters"].sum()) for name, df in summaries.items()}
st.caption("Totals: " + " · ".join(f"{n}: {v:,}" for n, v in totals.items())
           + ". The paper reports 65M (base) and 213M (big) with a 37000-piece shared vocabulary; tied matrices count once.")
if tr is not None:
    n_model = tr.model.num_parameters()
    st.caption(f"Check: the loaded model's `num_parameters()` = {n_model:,}; the per-component sum = "
               f"{totals[f'loaded ({ctx.checkpoint.name})']:,}.")
    with st.expander("Per layer and sub-layer (loaded model)"):
        st.dataframe(summary(tr.cfg.to_json())[1], hide_index=True)
ui.download_buttons(table, table.to_json(orient="records"), "parameters")

# -- 2. config ------------------------------------------------------------------------------------------------------
st.header("2 · The configuration")
if tr is not None:
    c1, c2 = st.columns(2)
    with c1:
        st.json(tr.cfg.to_dict())
    with c2:
        tc = (tr.meta or {}).get("train_config")
        if tc:
            st.markdown("**Training settings**")
            st.json(tc, expanded=False)
        st.markdown(f"d_k = d_v = d_model / h = {tr.cfg.d_k}; {tr.cfg.n_layers} encoder and {tr.cfg.n_layers} decoder layers; "
                    f"{'shared source/target/output embedding' if tr.cfg.share_embeddings else 'separate embeddings'}.")
else:
    st.info("Needs a loaded model.")

# -- 3. training curves ---------------------------------------------------------------------------------------------
st.header("3 · Training curves")
try:  # every run the weights descend from (config.json only; no torch)
    lineage_meta = ui.checkpoint_info(ctx.direction).meta
except ui.ModelUnavailable:
    lineage_meta = {}
runs = lessons.lineage_table(lineage_meta)
life = lifetime(lineage_meta)
if life is not None and (len(runs) > 1 or life.warm_starts):
    st.markdown(lineage_markdown(lineage_meta).split("  \n")[0])
    st.dataframe(runs, hide_index=True)
    start = life.stages[-1].start
    st.caption("The curves below are the last run's log (`metrics.jsonl`): its step 0 is "
               + (f"lifetime step {start:,}, " if start else "") + "the weights of a trained parent, not a random "
               "start; the earlier runs' logs do not ship with this checkpoint.")
log_path = ctx.checkpoint / "metrics.jsonl"
imported = imported_from(ctx.checkpoint)
try:
    mdf, notes = metrics(str(log_path), log_path.stat().st_mtime if log_path.is_file() else 0.0)
except lessons.MetricsLogError as exc:
    if imported and not log_path.is_file():  # trained elsewhere: no log is expected, so no warning
        st.info(IMPORTED_CURVES.format(source=imported), icon=":material/history:")
    else:
        st.warning(f"**No training curves to show.** {exc}", icon=":material/inbox:")
    mdf, notes = None, []
for n in notes:
    st.warning(n, icon=":material/warning:")
if mdf is not None:
    last = mdf.iloc[-1]
    cols = st.columns(4)
    last_run = " (last run)" if life is not None and len(life.stages) > 1 else ""
    cols[0].metric("steps logged" + last_run, f"{int(last['step']):,}")
    if "valid_bleu" in mdf and mdf["valid_bleu"].notna().any():
        cols[1].metric("best valid BLEU", f"{mdf['valid_bleu'].max():.2f}")
    if "valid_loss" in mdf and mdf["valid_loss"].notna().any():
        cols[2].metric("last valid loss", f"{mdf['valid_loss'].dropna().iloc[-1]:.3f}")
    if "wall_time" in mdf and pd.notna(last.get("wall_time")):
        cols[3].metric("wall time" + last_run, f"{last['wall_time'] / 3600:.2f} h")
    try:  # recipe changes of a resumed run, drawn on the curves (config.json only; no torch)
        meta = ui.checkpoint_info(ctx.direction).meta
        changes = config_change_notes(meta.get("config_changes"), (meta.get("train_config") or {}).get("accumulation"))
    except ui.ModelUnavailable:
        changes = []
    changes = sorted(changes, key=lambda c: c[0])  # numbered (1), (2)... in step order, as on the chart
    if changes:
        st.caption("Dotted lines (1), (2)...: the run was resumed with another recipe from that step on — "
                   + "; ".join(f"({n}) step {s:,}: {t}" for n, (s, t) in enumerate(changes, 1)) + ".")
    ui.show_figure(labs.training_curves_figure(mdf, presenter=ctx.presenter, marks=changes), key="curves",
                   filename=f"training_{ctx.direction}")
    ui.download_buttons(mdf, mdf.to_json(orient="records"), f"metrics_{ctx.direction}")

# -- 4. learning rate ------------------------------------------------------------------------------------------------
st.header("4 · The learning-rate schedule (Equation 3)")
st.markdown("$lrate = d_{model}^{-0.5}\\cdot\\min(step^{-0.5},\\ step\\cdot warmup\\_steps^{-1.5})$: linear warm-up for "
            "warmup_steps steps, then decay with the inverse square root of the step; the peak is at step = warmup_steps. "
            "The paper used warmup_steps = 4000.")
for name in ("lr_d_model", "warmup", "steps"):
    ui.warn_bad_param(name, ui.is_int, f"{name} must be a whole number")
c1, c2, c3 = st.columns(3)
lr_d = c1.number_input("d_model", value=tr.cfg.d_model if tr is not None else 512, step=1, key="lr_d_model", bind="query-params")
warm = c2.number_input("warmup_steps", value=4000, step=100, key="warmup", bind="query-params")
steps = c3.number_input("steps shown", value=100000, step=1000, key="steps", bind="query-params")
try:
    mine = lessons.lr_schedule(lr_d, warm, steps)
    base = lessons.lr_schedule(512, 4000, steps)
except lessons.LessonInputError as exc:
    st.error(str(exc), icon=":material/block:")
else:
    peak = (int(warm), noam_lr(int(warm), int(lr_d), int(warm))) if warm <= steps else None
    sched = {f"d_model={int(lr_d)}, warmup_steps={int(warm)}": mine, "paper base (512, 4000)": base}
    ui.show_figure(labs.lr_figure(sched, presenter=ctx.presenter, peaks={"chosen": peak} if peak else None), key="lr",
                   filename="lr_schedule")
    if peak:
        st.caption(f"Peak learning rate {peak[1]:.3e} at step {peak[0]:,} (= d_model^-0.5 · warmup_steps^-0.5).")
    ui.download_buttons(mine, mine.to_json(orient="records"), "lr_schedule")

# -- 5. label smoothing ---------------------------------------------------------------------------------------------
st.header("5 · Label smoothing (ε_ls = 0.1 in the paper)")
st.markdown("Training targets put 1 − ε_ls on the true token and spread ε_ls uniformly over the vocabulary: "
            "$q = (1-\\epsilon_{ls})\\,\\mathrm{onehot}(y) + \\epsilon_{ls}/V$. \"This hurts perplexity, as the model "
            "learns to be more unsure, but improves accuracy and BLEU score.\"")
ui.warn_bad_param("eps", ui.is_float, "eps must be a number")
c1, c2, c3, c4 = st.columns(4)
eps = c1.number_input("ε_ls", value=0.1, step=0.05, format="%.2f", key="eps", bind="query-params")
V = c2.number_input("vocabulary size V (illustration)", value=10, step=1, key="V", bind="query-params")
conf = c3.slider("confident prediction: p(true)", 0.5, 0.999, 0.99, step=0.001, format="%.3f", key="p_conf")
hedge = c4.slider("hedged prediction: p(true)", 0.05, 0.99, 0.9, step=0.01, key="p_hedge")
try:
    y = 0
    q = lessons.smoothed_target(V, y, eps)
    curve = lessons.label_smoothing_table(V, y, eps, np.linspace(0.02, 0.999, 200))
    marks = lessons.label_smoothing_table(V, y, eps, (conf, hedge)).assign(label=["confident", "hedged"])
except lessons.LessonInputError as exc:
    st.error(str(exc), icon=":material/block:")
else:
    s1, s2 = st.columns(2)
    with s1:
        ui.show_figure(labs.smoothing_target_figure(q, y, presenter=ctx.presenter), key="ls_target", filename="label_smoothing_target")
    with s2:
        ui.show_figure(labs.smoothing_loss_figure(curve, marks, presenter=ctx.presenter), key="ls_loss", filename="label_smoothing_loss")
    best = 1 - float(eps) + float(eps) / int(V)
    st.dataframe(marks[["label", "p_true", "cross_entropy", "smoothed_loss"]], hide_index=True)
    st.caption(f"The smoothed loss is lowest at p(true) = 1 − ε_ls + ε_ls/V = {best:.3f}, not at 1: over-confidence is penalised.")
    ui.download_buttons(curve, json.dumps({"epsilon_ls": float(eps), "V": int(V), "target": q.tolist(),
                                           "marks": marks.to_dict(orient="records")}), "label_smoothing")
