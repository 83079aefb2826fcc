"""Data downloads in the app: CSV (long format) and JSON buttons beside a figure, generated only when
clicked. Not a paper section: the app's export job.
"""
from __future__ import annotations

import json

import streamlit as st

from .charts import safe_filename


def download_buttons(df, payload_json, stem: str, *, key: str | None = None) -> None:
    """CSV (long format) and JSON download buttons, side by side.

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
        return frame.to_csv(index=False)

    def json_data() -> str:
        payload = payload_json() if callable(payload_json) else payload_json
        return payload if isinstance(payload, str) else json.dumps(payload)

    with st.container(horizontal=True):
        st.download_button("⬇ CSV", csv_data, file_name=f"{safe}.csv", mime="text/csv", key=f"{key}-csv",
                           on_click="ignore", help="Long format: one row per (kind, layer, head, query, key).")
        st.download_button("⬇ JSON", json_data, file_name=f"{safe}.json", mime="application/json",
                           key=f"{key}-json", on_click="ignore", help="Nested arrays with token labels.")
