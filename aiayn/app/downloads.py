"""Data downloads in the app: CSV (long format) and JSON buttons beside a figure, generated only when
clicked. Not a paper section: the app's export job.

One numbering convention for every export of the app: **downloads count layers and heads from 0**, as the
library does (:meth:`aiayn.AttentionMaps.to_dataframe`, array positions in :meth:`aiayn.AttentionMaps.to_json`),
while the app's widgets and labels count them from 1. Every download says so itself: CSV columns named
``layer`` / ``head`` are written as ``layer_from_0`` / ``head_from_0``, and every JSON object carries
``"layers_and_heads_count_from": 0`` (:func:`export_frame`, :func:`export_json`).
"""
from __future__ import annotations

import json
from typing import Any

import streamlit as st

from .charts import safe_filename

#: what downloads count layers and heads from (the app's labels count from 1)
EXPORT_INDEX_BASE = 0
#: CSV / JSON-record columns renamed on export so that the file itself says how they count
INDEX_COLUMNS = {"layer": f"layer_from_{EXPORT_INDEX_BASE}", "head": f"head_from_{EXPORT_INDEX_BASE}"}
#: the key every exported JSON object carries
INDEX_NOTE_KEY = "layers_and_heads_count_from"
DOWNLOAD_HELP = ("Layers and heads count from 0 in downloads (columns `layer_from_0`, `head_from_0`; JSON "
                 "`\"layers_and_heads_count_from\": 0`), as in the library; the app's labels count from 1.")


def export_frame(frame):
    """``frame`` (a ``pandas.DataFrame``) with the columns ``layer`` and ``head`` renamed to ``layer_from_0`` and
    ``head_from_0`` (values unchanged: downloads count from 0); other frames are returned as they are."""
    rename = {k: v for k, v in INDEX_COLUMNS.items() if k in frame.columns}
    return frame.rename(columns=rename) if rename else frame


def export_json(payload: Any) -> str:
    """A JSON download: ``payload`` (a JSON string or a JSON-able object) with the numbering note
    ``"layers_and_heads_count_from": 0`` first in a top-level object, and ``layer`` / ``head`` keys of a list of
    records renamed as in :func:`export_frame`. Other JSON values are written unchanged.

    Raises:
        ValueError: ``payload`` is a string that is not JSON.
    """
    obj = json.loads(payload) if isinstance(payload, str) else payload
    if isinstance(obj, dict):
        obj = {INDEX_NOTE_KEY: EXPORT_INDEX_BASE, **{k: v for k, v in obj.items() if k != INDEX_NOTE_KEY}}
    elif isinstance(obj, list) and obj and all(isinstance(r, dict) for r in obj):
        obj = [{INDEX_COLUMNS.get(k, k): v for k, v in r.items()} for r in obj]
    return json.dumps(obj)


def download_buttons(df, payload_json, stem: str, *, key: str | None = None) -> None:
    """CSV (long format) and JSON download buttons, side by side; the files follow the export numbering of
    this module (layers and heads from 0, said in the files: :func:`export_frame`, :func:`export_json`).

    Args:
        df: a ``pandas.DataFrame``, or a callable returning one (generated only when clicked).
        payload_json: a JSON string, a JSON-able object, or a callable returning either.
        stem: file name stem (``stem.csv``, ``stem.json``).
        key: key prefix (default: ``stem``); must be unique on the page.
    """
    key = key or stem
    safe = safe_filename(stem, "data")

    def csv_data() -> str:
        frame = df() if callable(df) else df
        return export_frame(frame).to_csv(index=False)

    def json_data() -> str:
        return export_json(payload_json() if callable(payload_json) else payload_json)

    with st.container(horizontal=True):
        st.download_button("CSV", csv_data, file_name=f"{safe}.csv", mime="text/csv", key=f"{key}-csv",
                           icon=":material/download:", on_click="ignore",
                           help="A table, one row per value (long format). " + DOWNLOAD_HELP)
        st.download_button("JSON", json_data, file_name=f"{safe}.json", mime="application/json",
                           key=f"{key}-json", icon=":material/download:", on_click="ignore",
                           help="The same data as JSON (arrays with token labels where there are tokens). " + DOWNLOAD_HELP)
