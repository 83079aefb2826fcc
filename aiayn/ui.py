"""Shared Streamlit page setup (the only module besides ``app.py`` / ``pages/`` that imports streamlit).

CONTRACT used by every page (owned by the app-frame work; pages must only call these):

    from aiayn import ui
    ctx = ui.setup_page("Attention explorer", icon="🔍")   # page config, sidebar nav, direction, presenter mode, theme
    ctx.direction            # "en-de" | "de-en", shared by all pages, bound to the URL (?direction=...)
    ctx.presenter            # bool: large type, colour-blind-safe scales
    ctx.translator           # aiayn.Translator loaded once per process (st.cache_resource) for ctx.direction
    ctx.colorscale           # plotly colour scale name to use for heatmaps
    ui.show_figure(fig, key=..., filename=...)   # st.plotly_chart with PNG/SVG export config
    ui.download_buttons(df, payload_json, stem)  # CSV + JSON download buttons

Page files (fixed names; the sidebar lists them in this order): see PAGES.
"""
from __future__ import annotations

PAGES: list[tuple[str, str, str]] = [
    ("app.py", "Overview", "🏠"),
    ("pages/1_Translate.py", "Translate", "🌐"),
    ("pages/2_Attention_Explorer.py", "Attention explorer", "🔍"),
    ("pages/3_Positional_Encoding.py", "Positional encoding", "〰️"),
    ("pages/4_Masking.py", "Masking", "🎭"),
    ("pages/5_Scaled_Dot_Product.py", "Scaled dot-product", "✖️"),
    ("pages/6_Model_and_Training.py", "Model and training", "📈"),
]
