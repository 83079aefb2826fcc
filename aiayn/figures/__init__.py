"""Plotly figures for the app, as pure functions (arrays in, ``plotly.graph_objects.Figure`` out).

* :mod:`aiayn.figures.attention`: attention heatmaps, the all-heads model view, top-k bars, head statistics.
* :mod:`aiayn.figures.labs`: the teaching labs (positional encoding, masking, Eq. 1, training).
* :mod:`aiayn.figures.history`: attention across training (a strip of steps, a per-step curve).
* :mod:`aiayn.figures.theme`: presenter mode (large type), one plotly template used by the labs and the app.

Import the submodules directly (``from aiayn.figures.attention import attention_heatmap``).
"""
