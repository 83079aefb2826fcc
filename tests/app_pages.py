"""What the page tests (AppTest) share: open a page of the app with URL parameters (and an explorer tab), read its
plotly charts by element key, decode plotly's arrays. Imported as ``from app_pages import ...`` (tests/ is on
pytest's path, like ``tiny_models``)."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def open_page(page: str, query: dict | None = None, *, tab: str | None = None) -> AppTest:
    """The app's ``page`` (e.g. ``"pages/2_Attention_Explorer.py"``) after its first run, opened with the URL
    parameters ``query``. ``tab`` (a key of :data:`aiayn.app.explorer.TAB_LABELS`) opens that explorer tab first:
    the explorer draws only the open tab."""
    at = AppTest.from_file(APP, default_timeout=60)
    if tab is not None:
        from aiayn.app.explorer import TAB_LABELS

        at.session_state["tab"] = TAB_LABELS[tab]
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.switch_page(page)
    return at.run()


def charts(at: AppTest) -> dict[str, dict]:
    """The page's plotly specs by element key (a keyed element's id ends with its key)."""
    return {el.proto.id.rsplit("-", 1)[-1]: json.loads(el.proto.spec) for el in at.get("plotly_chart")}


def arr(value) -> np.ndarray:
    """A plotly JSON array as float: a (nested) list, None read as NaN, or a typed array ``{"dtype", "bdata",
    "shape"}`` (plotly >= 6)."""
    if isinstance(value, dict) and "bdata" in value:
        a = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        if value.get("shape"):
            a = a.reshape([int(x) for x in str(value["shape"]).split(",")])
        return a.astype(float)

    def nan_for_none(v):
        return [nan_for_none(x) for x in v] if isinstance(v, (list, tuple)) else (np.nan if v is None else v)

    return np.array(nan_for_none(value), dtype=float)
