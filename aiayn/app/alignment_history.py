"""The "Across training" section of the Alignment and attribution page: the alignment error rate of the recorded
training states (``alignment_history.json``, written by ``aiayn align``: :mod:`aiayn.alignment_history`) as a line
chart and, at a chosen state (a slider bound to the URL, ``?astate=``), per head."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from ..alignment_history import HISTORY_ALIGN_FILE
from ..figures.alignment import head_grid
from ..figures.alignment_history import aer_across_training
from ..training.history import HISTORY_FILE
from .charts import chart_columns, show_figure
from .downloads import download_buttons
from .history import imported_from, lifetime_start
from .params import warn_bad_param


def missing_notice(checkpoint: Path) -> str:
    """What the section says when the checkpoint has no ``alignment_history.json``."""
    imported = imported_from(checkpoint)
    if imported:
        return (f"This model was imported ({imported}), trained elsewhere: its training was not recorded here, so "
                "there is no alignment error rate across training to show.")
    if (checkpoint / HISTORY_FILE).is_file():
        return (f"The attention history has not been scored yet: run "
                f"`aiayn align --checkpoint {checkpoint} --history-only`.")
    return ("This checkpoint has no attention history (it was trained before the history was recorded), so there is "
            "no alignment error rate across training to show.")


def long_frame(reading: dict[str, Any], steps: list[int], offset: int = 0) -> pd.DataFrame:
    """One row per (step, readout): every head, every layer mean and the model mean of one reading; columns
    ``step`` (the run's optimizer step), ``lifetime_step`` (``offset + step``:
    :func:`~aiayn.app.history.lifetime_start`), ``readout`` (``head``, ``layer_mean``, ``model_mean``), ``layer``,
    ``head`` (from 0; empty where they do not apply), ``aer``."""
    heads = np.asarray(reading["head_aer"], dtype=float)  # (N, L, H)
    rows = []
    for n, step in enumerate(steps):
        rows += [{"step": step, "readout": "head", "layer": l, "head": h, "aer": heads[n, l, h]}
                 for l in range(heads.shape[1]) for h in range(heads.shape[2])]
        rows += [{"step": step, "readout": "layer_mean", "layer": l, "head": None, "aer": v}
                 for l, v in enumerate(reading["layer_mean_aer"][n])]
        rows.append({"step": step, "readout": "model_mean", "layer": None, "head": None,
                     "aer": reading["model_mean_aer"][n]})
    frame = pd.DataFrame(rows).astype({"layer": "Int64", "head": "Int64"})  # integers with gaps, not floats
    frame.insert(1, "lifetime_step", frame["step"] + offset)
    return frame


def across_training(ctx: Any, reading_key: str) -> None:
    """The section for the page's chosen reading (``target_shift``...); ``ctx`` is the page's
    :class:`~aiayn.app.frame.PageContext`."""
    st.subheader("Across training")
    path = Path(ctx.checkpoint) / HISTORY_ALIGN_FILE
    if not path.is_file():
        st.info(missing_notice(Path(ctx.checkpoint)), icon=":material/history:")
        return
    payload = json.loads(path.read_text(encoding="utf-8"))
    reading_key = reading_key if reading_key in payload["readings"] else payload["best_final"]["reading"]
    r, steps = payload["readings"][reading_key], payload["steps"]
    offset, warm = lifetime_start(ctx.checkpoint)
    labels = [str(s + offset) for s in steps]
    warn_bad_param("astate", labels, "the training state must be one of the recorded steps: " + ", ".join(labels))
    picked = (st.select_slider("Training state" + (" (lifetime step)" if offset else ""), labels, value=labels[-1],
                               key="astate", bind="query-params") if len(labels) > 1 else labels[0])
    j = labels.index(picked) if picked in labels else len(labels) - 1
    b, bl = r["final_best_head"], r["final_best_layer"]
    series = {"model mean": r["model_mean_aer"],
              f"layer {bl['layer'] + 1} mean (best layer mean at the end)": bl["aer"],
              f"layer {b['layer'] + 1} head {b['head'] + 1} (best head at the end, framed)": b["aer"]}
    left, right = chart_columns([3, 2])
    with left:
        show_figure(aer_across_training(steps, series, current=steps[j], offset=offset, template=ctx.template,
                                        title=f"AER across training ({reading_key})"),
                    key="aer_history", filename=f"aer_history_{ctx.direction}_{reading_key}")
    with right:
        show_figure(head_grid(np.asarray(r["head_aer"], dtype=float)[j], value_name="AER", zmin=0, zmax=1,
                              title=f"AER per head at step {labels[j]}", colorscale=ctx.colorscale + "_r",
                              template=ctx.template, best=(b["layer"], b["head"])),
                    key="aer_history_grid", filename=f"aer_history_grid_{ctx.direction}_{labels[j]}")
    sentences = " · ".join(s["source"] for s in payload["sentences"])
    st.caption(f"Attention weights of the {len(payload['sentences'])} sentences the attention history records "
               f"({sentences}; {payload['sure_links']} sure gold links, `assets/alignment/{payload['gold']}`), "
               "teacher-forced at each saved training state; norm-based attention needs each state's weights, "
               "which are not kept. Too few links for a benchmark (the gold-set grid above is one): a view of how "
               "alignment changes while the model trains."
               + (" The first state is the trained parent this run started from." if warm else ""))
    download_buttons(lambda: long_frame(r, steps, offset), lambda: {"reading": reading_key, "steps": steps,
                                                          "lifetime_offset": offset, **r},
                     f"aer_history_{ctx.direction}_{reading_key}", key="aer_history")
