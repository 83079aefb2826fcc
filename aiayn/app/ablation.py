"""The head-ablation page's Streamlit parts: the grid of head switches (kept in the URL as
``?off=cross.3.2,encoder.1.5``, layers and heads from 1), the cached model runs (teacher-forced maps with and
without the removed heads, reference scores, the per-checkpoint sweep of Michel et al. 2019) and the map
comparison (intact, ablated, difference). ``pages/7_Head_Ablation.py`` reads the sentence and calls these.
Not a paper section: head ablation (Michel et al. 2019; Voita et al. 2019) on the model of Section 3.2.2.
Importing this module does not import torch (the model runs import it when called).
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import streamlit as st

from ..analysis import view_stack
from ..analysis.ablation import (KINDS, Head, format_heads, head_mask_array, maps_difference_frame, parse_heads,
                                 sentence_chrf, unchanged_maps_note)
from ..figures.ablation import SWEEP_METRICS, difference_grid, head_comparison, mark_heads, sweep_figure
from ..figures.attention import AXIS_TITLES, model_view
from ..jobs import CANCELLED, DONE, FAILED, RUNNING, JobRegistry
from ..sweep import SWEEP_FILE, cached_head_sweep, forced_maps, load_sweep, reference_logprob, sweep_path
from .charts import chart_columns, show_figure
from .downloads import download_buttons
from .models import checkpoint_path, checkpoint_stamp, decode_queue, load_translator
from .params import query_param, warn_bad_param
from .pickers import head_picker, kind_picker, layer_picker
from .results import head_mask_key
from .state import write_view

KIND_NAMES = {"encoder": "Encoder self-attention", "decoder": "Decoder self-attention (masked)",
              "cross": "Encoder-decoder (cross) attention"}


def _switch_key(kind: str, layer: int) -> str:
    return f"ab_off_{kind}_{layer}"


def seed_switches(direction: str, n_layers: int, n_heads: int) -> None:
    """Set the head switches from the URL parameter ``off`` on the first visit, on a change of direction and
    whenever ``off`` is not what :func:`head_switches` last wrote (a link, the back button); warn about items
    of ``off`` that name no head of this model. The switches keep their values across pages otherwise."""
    url = query_param("off")
    same_dir = st.session_state.get("ab_switch_dir") == direction
    if same_dir and (url is None or url == st.session_state.get("ab_off_url")):
        return
    first = "ab_switch_dir" not in st.session_state
    heads, bad = parse_heads(url if first or same_dir else None, n_layers, n_heads)
    if bad:
        st.warning(f"Ignored in the URL parameter `off`: {', '.join(f'`{b[:30]}`' for b in bad[:6])}. Write removed "
                   f"heads as kind.layer.head (kind encoder, decoder or cross; layer 1 to {n_layers}; head 1 to "
                   f"{n_heads}), comma-separated, e.g. `cross.{n_layers}.2`.", icon=":material/warning:")
    for kind in KINDS:
        for layer in range(n_layers):
            st.session_state[_switch_key(kind, layer)] = [str(h + 1) for k, l, h in heads if k == kind and l == layer]
    st.session_state.ab_switch_dir = direction


def _all_on(n_layers: int) -> None:
    for kind in KINDS:
        for layer in range(n_layers):
            st.session_state[_switch_key(kind, layer)] = []


#: the Head ablation page (its key among the views of aiayn.app.state)
PAGE = "pages/7_Head_Ablation.py"

def head_switches(n_layers: int, n_heads: int) -> list[Head]:
    """One multi-select row of heads per layer and kind (selected = removed); returns the removed heads as
    ``(kind, layer, head)`` from 0 and writes them into the URL (``off``)."""
    options = [str(h + 1) for h in range(n_heads)]
    off: list[Head] = []
    # One full-width row per (kind, layer): with the three kinds side by side, eight head buttons did not fit a
    # column at 1366 px and the last heads were cut off.
    for kind in KINDS:
        st.markdown(f"**{KIND_NAMES[kind]}**: heads switched off")
        for layer in range(n_layers):
            label_col, switch_col = st.columns([1, 7], vertical_alignment="center")
            label_col.markdown(f"Layer {layer + 1}")
            picked = switch_col.segmented_control(f"{KIND_NAMES[kind]}, layer {layer + 1}: heads switched off", options,
                                                  selection_mode="multi", key=_switch_key(kind, layer),
                                                  label_visibility="collapsed", persist_state="session")
            off += [(kind, layer, int(h) - 1) for h in picked or [] if h in options]
    st.button("Switch every head back on", on_click=_all_on, args=(n_layers,), icon=":material/restart_alt:")
    spec = format_heads(off)
    write_view(PAGE, {"off": spec or None})  # in the URL and in the links to the page (aiayn.app.state)
    st.session_state.ab_off_url = spec or None  # what this page wrote (see seed_switches)
    return off


def mask_for(off: list[Head], n_layers: int, n_heads: int) -> np.ndarray:
    """The ``(3, L, H)`` float32 head mask of the removed heads."""
    return head_mask_array(off, n_layers, n_heads)


@st.cache_data(max_entries=64, show_spinner="Running the model with and without the heads…")
def _compared(direction: str, ckpt: str, stamp: str, src_ids: tuple, output_ids: tuple,  # noqa: ARG001
              mask: tuple | None):
    tr, queue = load_translator(direction), decode_queue(direction)  # the model's work takes its turn (aiayn.serving)
    intact = queue.run(forced_maps, tr, src_ids, output_ids)
    ablated = queue.run(forced_maps, tr, src_ids, output_ids,
                        head_mask=None if mask is None else np.asarray(mask, np.float32))
    return intact, ablated


def compared_maps(direction: str, src_ids, output_ids, mask) -> tuple[Any, Any]:
    """``(intact, ablated)`` :class:`~aiayn.model.maps.AttentionMaps` teacher-forced over the same ids
    (:func:`aiayn.sweep.forced_maps`), cached per checkpoint, ids and mask."""
    path = checkpoint_path(direction)
    return _compared(direction, str(path), checkpoint_stamp(path), tuple(int(i) for i in src_ids),
                     tuple(int(i) for i in output_ids), head_mask_key(mask))


@st.cache_data(max_entries=64, show_spinner=False)
def _ref_logprob(direction: str, ckpt: str, stamp: str, text: str, ref: str, mask: tuple | None) -> float:  # noqa: ARG001
    total, n = decode_queue(direction).run(reference_logprob, load_translator(direction), [(text, ref)],
                                           head_mask=None if mask is None else np.asarray(mask, np.float32))
    return total / max(n, 1)


def scores(direction: str, translation, reference: str | None, mask) -> dict[str, float]:
    """Beam score of ``translation`` and, with a reference, its sentence chrF and the reference's mean
    log-probability per piece (teacher-forced) under ``mask``."""
    out = {"score": float(translation.score)}
    if reference:
        path = checkpoint_path(direction)
        out["chrF"] = sentence_chrf(translation.text, reference)
        out["ref log-prob / piece"] = _ref_logprob(direction, str(path), checkpoint_stamp(path), translation.source,
                                                   reference, head_mask_key(mask))
    return out


def comparison_view(ctx, intact, ablated, off: list[Head]) -> None:
    """Kind, layer and head pickers (in the URL), then intact vs ablated maps and their difference (every head
    of the kind, or one head), and the CSV/JSON downloads of both maps."""
    L, H = intact.n_layers, intact.n_heads
    # the head picker gets a row of its own: beside the others its H + 1 buttons overflowed in presenter mode
    c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
    kind, layer = kind_picker(c1, kinds=KINDS), layer_picker(c2, L)
    head = head_picker(st, H, first="all")
    a, qa, ka = view_stack(intact, kind)
    b, _, _ = view_stack(ablated, kind)
    off_here = [(lay, h) for k, lay, h in off if k == kind]
    yt, xt = AXIS_TITLES[kind]
    diff = b - a
    note = unchanged_maps_note(diff, KIND_NAMES[kind]) if off else None
    if note:
        st.info(note)
    if head is None:  # every head of the kind
        t1, t2, t3 = st.tabs(["Difference", "Intact", "Ablated"])
        with t1:
            show_figure(difference_grid(diff, removed=off_here, template=ctx.template,
                                        title=f"{KIND_NAMES[kind]}: ablated − intact, all heads"),
                        key="ab_diff_grid", filename=f"ablation_diff_{kind}_{ctx.direction}")
        with t2:
            show_figure(model_view(a, q_labels=qa, k_labels=ka, colorscale=ctx.colorscale, template=ctx.template,
                                   title=f"{KIND_NAMES[kind]}: intact"), key="ab_intact_grid",
                        filename=f"ablation_intact_{kind}_{ctx.direction}")
        with t3:
            fig = model_view(b, q_labels=qa, k_labels=ka, colorscale=ctx.colorscale, template=ctx.template,
                             title=f"{KIND_NAMES[kind]}: with the heads removed")
            show_figure(mark_heads(fig, off_here), key="ab_ablated_grid",
                        filename=f"ablation_ablated_{kind}_{ctx.direction}")
    else:
        lay, h = layer - 1, head - 1
        figs = head_comparison(a[lay, h], b[lay, h], qa, ka, layer=layer, head=head, diff=diff[lay, h],
                               switched_off=(lay, h) in off_here, colorscale=ctx.colorscale, x_title=xt, y_title=yt,
                               template=ctx.template)
        for col, fig, name in zip(chart_columns(3, presenter=ctx.presenter), figs, ("intact", "ablated", "diff")):
            with col:
                show_figure(fig, key=f"ab_{name}_head", filename=f"ablation_{name}_{kind}_L{layer}_H{head}")
    st.caption("Download both maps of every kind, layer and head (long format; layer and head columns count from 0; "
               "difference = ablated − intact).")
    download_buttons(lambda: maps_difference_frame(intact, ablated),
                     lambda: json.dumps({"off": format_heads(off), "intact": intact.to_dict(), "ablated": ablated.to_dict()}),
                     f"ablated_maps_{ctx.direction}", key="ab-maps-dl")


@st.cache_data(max_entries=8, show_spinner=False)
def _fresh_sweep(direction: str, ckpt: str, stamp: str, pairs: tuple, beam_size: int, projection: str):  # noqa: ARG001
    return load_sweep(ckpt, [tuple(p) for p in pairs], beam_size=beam_size, projection=projection)


#: seconds between two looks of a visitor's page at the running sweep's progress
SWEEP_POLL_S = 1.0


@st.cache_resource(show_spinner=False)
def sweep_jobs() -> JobRegistry:
    """The server's long jobs (:class:`aiayn.jobs.JobRegistry`, one per process): every session sees the same
    running sweep of a checkpoint, and starting it again joins it."""
    return JobRegistry()


def _sweep_stamp(path, projection: str = "float32") -> str:
    """The checkpoint's stamp plus its sweep file's (a sweep written by the job is read at once)."""
    try:
        stat = sweep_path(path, projection).stat()
        sweep = f"{stat.st_mtime_ns}:{stat.st_size}"
    except OSError:
        sweep = "missing"
    return f"{checkpoint_stamp(path)}|{SWEEP_FILE}:{sweep}"


def sweep_job_key(path, beam_size: int = 4) -> tuple:
    """The registry key of a checkpoint's sweep: its path, its weights' stamp, the kind of work and the beam."""
    return str(path), checkpoint_stamp(path), "head_sweep", int(beam_size)


def _start_sweep(direction: str, path, pairs: list[tuple[str, str]], beam_size: int) -> None:
    """Start (or join) the server's sweep of ``path``: each model run a background piece of the direction's
    decode queue (:meth:`aiayn.serving.DecodeQueue.run_background`), so the class's requests go first."""
    tr, queue = load_translator(direction), decode_queue(direction)  # here: the job's thread has no session

    def work(report, should_stop):
        return cached_head_sweep(tr, pairs, checkpoint=path, beam_size=beam_size, progress=report,
                                 should_stop=should_stop, run=queue.run_background)

    sweep_jobs().start(sweep_job_key(path, beam_size), work, name=f"head sweep of {path.name}")


def _cancel_sweep(key: tuple) -> None:
    job = sweep_jobs().get(key)
    if job is not None:
        job.cancel()


@st.fragment(run_every=SWEEP_POLL_S)
def _sweep_progress(key: tuple) -> None:
    """The running sweep's progress bar and Cancel button, redrawn every :data:`SWEEP_POLL_S`; the whole page
    reruns once the job has ended (its heatmap, or why it stopped)."""
    job = sweep_jobs().get(key)
    status = None if job is None else job.status()
    if status is None or status.state != RUNNING:
        st.rerun(scope="app")
    st.progress(status.fraction, text=f"Sweep: {status.label} ({status.fraction:.0%}). It runs behind every "
                                      "translation of the server, so a class's requests go first.")
    st.button("Cancelling…" if status.cancelling else "Cancel the sweep", on_click=_cancel_sweep, args=(key,),
              disabled=status.cancelling, icon=":material/stop:", key="ab_sweep_cancel",
              help="Stops the sweep for every visitor after the model run under way; nothing is stored.")


def _sweep_job_view(ctx, path, pairs: list[tuple[str, str]], beam_size: int):
    """No fresh sweep beside the checkpoint: the result of the server's sweep job, else its progress, else why
    the last one stopped and the button that starts it. Returns the sweep's table or None."""
    key = sweep_job_key(path, beam_size)
    job = sweep_jobs().get(key)
    status = None if job is None else job.status()
    if status is not None and status.state == DONE:
        df = job.result()  # also written beside the checkpoint, unless its directory is read-only
        if df is not None and df.attrs.get("not_stored"):
            st.warning(f"This sweep could not be stored beside the checkpoint ({path.name}: "
                       f"{df.attrs['not_stored']}): this server keeps it until it restarts. Run `aiayn sweep "
                       "--checkpoint DIR` where the folder is writable to keep one.", icon=":material/warning:")
        return df
    if status is None or status.state != RUNNING:
        runs = 2 * (3 * ctx.translator.cfg.n_layers * ctx.translator.cfg.n_heads + 1)
        stored = sweep_path(path, ctx.translator.projection.precision).name
        st.info(f"No up-to-date sweep is stored beside this checkpoint ({path.name}/{stored}). Computing it "
                f"runs the model {runs} times on the {len(pairs)} curated sentences, in the server's background: "
                "every visitor's translations go first, every visitor sees its progress, and it is stored beside the "
                "checkpoint when done (or kept by this server, if the folder is read-only).")
        if status is not None and status.state == CANCELLED:
            st.warning("The last sweep was cancelled; nothing was stored.", icon=":material/stop:")
        elif status is not None and status.state == FAILED:
            st.error(f"The last sweep failed: {status.error}", icon=":material/error:")
        # a callback: it runs once, before the script, even when the script reruns before reaching this button
        st.button("Run the sweep", type="primary", icon=":material/play_arrow:", key="ab_sweep_run",
                  on_click=_start_sweep, args=(ctx.direction, path, pairs, beam_size))
        return None
    _sweep_progress(key)
    return None


def sweep_view(ctx, pairs: list[tuple[str, str]], *, beam_size: int = 4) -> None:
    """The sweep (:func:`aiayn.sweep.head_sweep`) of the direction's checkpoint: read from its
    ``head_sweep.json`` (``head_sweep.<precision>.json`` when the server's output layer is not float32) when fresh, else computed on request as a server-wide background job
    (:func:`sweep_jobs`: one per checkpoint, progress bar and Cancel button for every visitor); a layer x head
    heatmap per kind of a chosen metric (in the URL, ``metric``), the table and CSV/JSON downloads."""
    path = checkpoint_path(ctx.direction)
    projection = ctx.translator.projection.precision  # the sweep's translations run at the server's precision
    df = _fresh_sweep(ctx.direction, str(path), _sweep_stamp(path, projection), tuple(map(tuple, pairs)), beam_size,
                      projection)
    df = df if df is not None else _sweep_job_view(ctx, path, pairs, beam_size)
    if df is None:
        return
    metrics = list(SWEEP_METRICS)
    warn_bad_param("metric", metrics, "the metric must be " + ", ".join(metrics))
    metric = st.segmented_control("Measure", metrics, default="chrf_drop", key="metric", bind="query-params",
                                  required=True)
    metric = metric if metric in metrics else "chrf_drop"
    st.caption(f"{SWEEP_METRICS[metric]}. Intact model: corpus chrF {df.attrs.get('chrf_intact', float('nan')):.2f}, "
               f"log-prob {df.attrs.get('logprob_intact', float('nan')):.3f} nats per reference piece. Red: removing "
               "the head alone hurts; blue: it helps; near 0: the head can go (Michel et al. 2019).")
    show_figure(sweep_figure(df, metric, template=ctx.template, stacked=ctx.presenter), key="ab_sweep",
                filename=f"head_sweep_{ctx.direction}")
    show = df.assign(layer=df["layer"] + 1, head=df["head"] + 1)
    st.dataframe(show.sort_values("chrf_drop", ascending=False), hide_index=True, width="stretch", height=260,
                 key="ab_sweep_table")
    st.caption("The table counts layers and heads from 1; the downloads count them from 0.")
    download_buttons(df, lambda: {"attrs": dict(df.attrs), "pairs": [list(p) for p in pairs],
                                  "rows": df.to_dict(orient="records")}, f"head_sweep_{ctx.direction}", key="ab-sweep-dl")
