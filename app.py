"""The aiayn app's entry script and frame: ``streamlit run app.py``.

It runs on every page: the page config, the sidebar (links to every page and the shared settings: translation
direction, presenter mode, chart download format, kept in the URL) and then the page the URL names, from
``pages/`` (the Overview is ``pages/0_Overview.py``). See :func:`aiayn.app.frame.run_app`.
"""
from aiayn.app.frame import run_app

run_app()
