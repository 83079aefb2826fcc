"""The explorer's "Across training" tab (Streamlit): the attention of the curated sentences
recorded at each saved training state (:mod:`aiayn.training.history`), with a training-step slider bound to
the URL (``?tstep=``, the sentence in ``?tsent=``), the map at that step, a strip of steps and the mean row
entropy over training (low entropy = a focused head, as in Voita et al. 2019): the student watches
alignments emerge. Kind, layer, head, word merging and hidden specials are the explorer's own controls. A
checkpoint without a history (trained before it was recorded) gets a plain notice saying how to get one.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import streamlit as st

from ..analysis import entropy, pieces_view
from ..catalog import imported_from
from ..figures.attention import AXIS_TITLES, attention_heatmap
from ..figures.history import history_curve, history_strip, trend_words
from ..lineage import lifetime
from ..model.maps import KIND_TITLES
from ..training.history import HISTORY_FILE, AttentionHistory, load_history
from .charts import show_figure
from .downloads import download_buttons
from .params import warn_bad_param

#: what the tab says for a checkpoint without a history
NOTICE = ("This checkpoint was trained before the attention history was recorded; checkpoints trained with "
          "this version carry it.")
HOW_TO = ("To get one, train a model with `aiayn train` (recording is on by default; `--no-record-attention` "
          "turns it off) and export it with `aiayn average RUN_DIR OUT_DIR`: the run and the checkpoint then hold "
          f"`{HISTORY_FILE}`, the attention of the first curated sentences at every saved state.")
#: what the tab says for a model imported by ``aiayn import-marian`` (trained elsewhere)
IMPORTED_NOTICE = ("This model was imported ({source}), trained elsewhere: its training was not recorded here, so "
                   "it has no attention history to show. The other tabs show the finished model.")


#: most small maps in the strip of steps
STRIP_STEPS = 8


@st.cache_resource(max_entries=4, show_spinner=False)
def _load(path: str, stamp: tuple[int, int]) -> AttentionHistory | None:
    """:func:`load_history` once per file version (``stamp`` = mtime in ns, size); shared read-only."""
    return load_history(path)


def cached_history(checkpoint: str | Path) -> AttentionHistory | None:
    """The history of a checkpoint directory, read once per file version; None when it has none.

    Raises:
        ValueError: the file is damaged (from :func:`aiayn.training.history.load_history`).
    """
    f = Path(checkpoint) / HISTORY_FILE
    if not f.is_file():
        return None
    s = f.stat()
    return _load(str(Path(checkpoint)), (s.st_mtime_ns, s.st_size))


def history_view(hist: AttentionHistory, sentence: int, kind: str, layer: int, head: int | None, *,
                 words: bool = False, hide_special: bool = False) -> tuple[np.ndarray, list[str], list[str]]:
    """One head (or the mean over heads) of one layer of a recorded sentence at every step, as the explorer
    shows it: ``(weights (N, Q', K'), query labels (Q'), key labels (K'))``; ``layer`` and ``head`` count
    from 1 (``head`` None = the mean over heads). Labels and the word / special options are those of
    :func:`aiayn.analysis.view_stack`.

    Raises:
        ValueError: sentence, kind, layer or head out of range.
    """
    w = hist.stack(sentence, kind)  # (N, L, H, Q, K)
    if not 1 <= layer <= w.shape[1] or (head is not None and not 1 <= head <= w.shape[2]):
        raise ValueError(f"layer {layer} / head {head} out of range (1..{w.shape[1]} / 1..{w.shape[2]})")
    m = w[:, layer - 1].mean(axis=1) if head is None else w[:, layer - 1, head - 1]  # (N, Q, K)
    q, k = hist.sentences[sentence].labels(kind)
    predicted = hist.sentences[sentence].output_tokens if kind != "encoder" else None
    return pieces_view(m, q, k, predicted, words=words, hide_special=hide_special)


def lifetime_start(checkpoint: str | Path) -> tuple[int, bool]:
    """Where a checkpoint's attention history starts on the model's lifetime (:mod:`aiayn.lineage`): ``(offset,
    warm)``, the lifetime step of the last run's step 0 and whether step 0 holds a trained parent's weights
    (``offset`` is 0 when that parent's training is not recorded). ``(0, False)`` for a run from scratch or an
    unreadable ``config.json``."""
    try:
        meta = json.loads((Path(checkpoint) / "config.json").read_text(encoding="utf-8")).get("meta")
    except (OSError, ValueError, AttributeError):
        return 0, False
    life = lifetime(meta)
    if life is None:
        return 0, False
    return life.stages[-1].start, life.stages[-1].warm


def strip_indices(n: int, current: int, most: int = STRIP_STEPS) -> list[int]:
    """At most ``most`` indices of ``n`` steps, evenly spread, first and last included, plus ``current``."""
    idx = set(np.linspace(0, n - 1, min(n, most)).round().astype(int).tolist()) if n else set()
    return sorted(idx | {current}) if n else []


def history_tab(v: Any) -> None:
    """The tab: ``v`` is the explorer's :class:`~aiayn.app.explorer.ExplorerView` (its ctx, kind, layer,
    head, words, hide_special and values are used; its sentence is not: the history holds its own)."""
    ctx = v.ctx
    try:
        hist = cached_history(ctx.checkpoint)
    except ValueError as exc:
        st.error(f"The checkpoint's attention history cannot be read: {exc}")
        return
    if hist is None:
        imported = imported_from(ctx.checkpoint)
        if imported:
            st.info(IMPORTED_NOTICE.format(source=imported), icon=":material/history:")
            return
        st.info(NOTICE, icon=":material/history:")
        st.caption(HOW_TO)
        return
    names = [s.source for s in hist.sentences]
    warn_bad_param("tsent", names, "the sentence must be one of the recorded ones: " + " | ".join(names))
    source = st.selectbox("Recorded sentence (teacher-forced on its reference)", names, key="tsent",
                          bind="query-params")
    i = names.index(source) if source in names else 0
    s = hist.sentences[i]
    offset, warm = lifetime_start(ctx.checkpoint)
    shown = (lambda t: f"{int(t) + offset:,}") if offset else str
    steps = [str(t + offset) for t in hist.steps]  # lifetime steps when the run started from a trained parent
    warn_bad_param("tstep", steps, "the training step must be one of the recorded steps: " + ", ".join(steps))
    if len(steps) > 1:
        picked = st.select_slider("Training step" + (" (over the model's lifetime)" if offset else ""), steps,
                                  value=steps[-1], key="tstep", bind="query-params",
                                  help="The optimizer step at which the maps were recorded. " + (
                                      f"This run started from a trained parent: its first map ({shown(0)}) shows the "
                                      "parent's weights, before this run's first update." if warm else
                                      "0 = the random initial weights."))
    else:
        picked = steps[0]
        st.caption(f"One recorded step: {shown(hist.steps[0])}.")
    step = int(picked) - offset if picked in steps else hist.steps[-1]
    j = hist.step_index(step)
    st.markdown(f"**{s.source}** → *{s.reference}*  \n<small>{len(hist.steps)} recorded steps "
                f"({shown(hist.steps[0])} to {shown(hist.steps[-1])}) · {len(hist.sentences)} sentences · "
                f"{hist.n_layers} layers × {hist.n_heads} heads</small>", unsafe_allow_html=True)
    if warm:
        where = f"lifetime step {offset:,}" if offset else "step 0 (the parent's own training is not recorded)"
        st.caption(f"This history starts from a trained parent, not from random weights: its first map, {where}, "
                   "shows the weights this run was warm-started from (`--init-from`)"
                   + (", and the steps count over every run the model descends from (see the Overview)." if offset else "."))
    w, q_lab, k_lab = history_view(hist, i, v.kind, v.layer, v.head, words=v.words, hide_special=v.hide_special)
    yt, xt = AXIS_TITLES[v.kind]
    stem = f"history_{v.stem}_s{i}"
    title = f"{KIND_TITLES[v.kind].capitalize()}, layer {v.layer}, {v.what}: step {shown(step)}"
    fig = attention_heatmap(w[j], q_lab, k_lab, title=title,
                            colorscale=ctx.colorscale, x_title=xt, y_title=yt, show_values=v.values,
                            zmax=1.0, template=ctx.template)
    show_figure(fig, key="history_map", filename=f"{stem}_step{step}")
    idx = strip_indices(len(hist.steps), j)
    show_figure(history_strip(w[idx], [hist.steps[t] for t in idx], q_lab, k_lab, current=step, zmax=1.0,
                              colorscale=ctx.colorscale, template=ctx.template, offset=offset,
                              title="The same map across training (one shared colour scale)",
                              columns=3 if ctx.presenter else 6),
                key="history_strip", filename=f"{stem}_strip")
    full = history_view(hist, i, v.kind, v.layer, v.head)[0]  # entropy of whole piece-level rows (sum to 1)
    ent = entropy(full).mean(axis=-1)
    trend = trend_words(ent, "bits")  # the title says what this curve does, not what curves usually do
    show_figure(history_curve(ent, hist.steps, current=step, y_title="bits", offset=offset, template=ctx.template,
                              title="Mean row entropy over training" + (f": {trend}" if trend else "")
                              + " (lower = a more focused map)"), key="history_entropy", filename=f"{stem}_entropy")
    head0 = None if v.head is None else v.head - 1
    st.caption("Downloads: every recorded step of layer "
               f"{v.layer} ({'all heads' if v.head is None else f'head {v.head}'}) for this sentence, on pieces "
               "(layer, head, query and key count from 0 in the files; from 1 in the controls above).")
    download_buttons(lambda: hist.to_dataframe(i, v.kind, layer=v.layer - 1, head=head0),
                     lambda: hist.to_json(i, v.kind, layer=v.layer - 1, head=head0), stem, key="history-dl")
