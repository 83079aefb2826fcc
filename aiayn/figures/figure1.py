"""Figure 1 walked block by block on one sentence, the beam search as a tree and the decoder's logit lens: pure
functions, a :class:`~aiayn.block_trace.BlockTrace` / :class:`~aiayn.beam_tree.BeamTree` /
:class:`~aiayn.block_trace.LensTable` in, numbers or ``go.Figure`` out (the page ``pages/10_Figure_1.py`` draws them).

Block keys: ``"enc.embed"``, ``"enc.scale"``, ``"enc.pe"``, ``"enc.{l}.self_attn"``, ``"enc.{l}.ffn"``, the same
with ``"dec"`` plus ``"dec.{l}.cross_attn"``, and ``"out"`` (the final linear and softmax, Section 3.4); layers
from 1. A sub-layer block covers its Add & Norm (Section 3.1).
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from ..analysis.qk_space import position_in_group
from .theme import use_template

_SUBLAYER_TITLES = {"self_attn": "Multi-head self-attention", "cross_attn": "Encoder-decoder attention",
                    "ffn": "Feed-forward network"}
_SIDE = {"enc": "Encoder", "dec": "Decoder"}


def block_keys(n_layers: int) -> list[tuple[str, str]]:
    """``(key, label)`` of every block of Figure 1, bottom to top, encoder first."""
    keys = []
    for side, subs in (("enc", ["self_attn", "ffn"]), ("dec", ["self_attn", "cross_attn", "ffn"])):
        name = _SIDE[side]
        keys += [(f"{side}.embed", f"{name}: input embedding"), (f"{side}.scale", f"{name}: × √d_model"),
                 (f"{side}.pe", f"{name}: + positional encoding")]
        for l in range(1, n_layers + 1):
            keys += [(f"{side}.{l}.{s}", f"{name} layer {l}: {_SUBLAYER_TITLES[s].lower()} + add & norm")
                     for s in subs]
    return keys + [("out", "Linear + softmax (output probabilities)")]


@dataclass
class BlockView:
    """The numbers one block shows (:func:`block_view`).

    Attributes:
        title: the block's name; shape: its tensor's shape in the paper's symbols; tokens: row labels.
        matrix: ``(N, D)`` the block's output (tokens x dimensions), float32; at the output ``(T, k)``, the k
            best probabilities per step.
        norms: ``(N,)`` each row's L2 norm.
        metrics: per-token series ``(N,)`` by name (residual change ``‖Sublayer(x)‖ / ‖x‖``, LayerNorm mean and
            variance before and after, the FFN's fraction of zero hidden units, cosine to the input embedding).
        top: at the output, per step the top-k ``(piece, probability)``; else empty.
    """

    title: str
    shape: str
    tokens: list[str]
    matrix: np.ndarray
    norms: np.ndarray
    metrics: dict[str, np.ndarray] = field(default_factory=dict)
    top: list[list[tuple[str, float]]] = field(default_factory=list)


def _np(t) -> np.ndarray:
    return t[0].detach().float().cpu().numpy()


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-12)


def block_view(trace, key: str, tokens: Sequence[str], *, pieces=None, k: int = 5) -> BlockView:
    """The :class:`BlockView` of block ``key`` (:func:`block_keys`) in ``trace`` (batch item 0).

    Args:
        tokens: the ``N`` row labels of the block's side (source pieces, decoder input pieces).
        pieces: id -> piece, for the output block's top-k.

    Raises:
        ValueError: an unknown key.
    """
    if key == "out":
        probs = np.exp(_np(trace.log_probs))
        order = np.argsort(-probs, axis=-1)[:, :k]
        top = [[(pieces(int(i)) if pieces else str(int(i)), float(p[i])) for i in row] for row, p in zip(order, probs)]
        top_p = np.take_along_axis(probs, order, axis=-1)  # (T, k): the heatmap shows the k best per step
        return BlockView("Linear + softmax: next-piece probabilities", "T × V", list(tokens), top_p,
                         np.linalg.norm(probs, axis=-1), top=top)
    side, _, rest = key.partition(".")
    if side not in _SIDE or not rest:
        raise ValueError(f"unknown block {key!r}")
    stack = trace.encoder if side == "enc" else trace.decoder
    n = "S" if side == "enc" else "T"
    emb = _np(stack.embedding)
    if rest in ("embed", "scale", "pe"):
        m = {"embed": emb, "scale": _np(stack.scaled), "pe": _np(stack.input)}[rest]
        title = {"embed": "Input embedding", "scale": "Embedding × √d_model", "pe": "+ positional encoding"}[rest]
        return BlockView(f"{_SIDE[side]}: {title}", f"{n} × d_model", list(tokens), m, np.linalg.norm(m, axis=-1))
    layer_s, _, sub = rest.partition(".")
    if not layer_s.isdigit() or not 1 <= int(layer_s) <= len(stack.layers):
        raise ValueError(f"unknown block {key!r}")
    s = stack.layers[int(layer_s) - 1].sublayer(sub)
    x, out = _np(s.stream_in), _np(s.stream_out)
    n_in, n_out = _np(s.norm_in), _np(s.norm_out)
    metrics = {"‖Sublayer(x)‖ / ‖x‖": np.linalg.norm(_np(s.sublayer_out), axis=-1) / np.linalg.norm(x, axis=-1),
               "LayerNorm mean before": n_in.mean(-1), "LayerNorm var before": n_in.var(-1),
               "LayerNorm mean after": n_out.mean(-1), "LayerNorm var after": n_out.var(-1)}
    if s.hidden is not None:
        hidden = _np(s.hidden)
        if (hidden < 0).any():  # not ReLU (an imported Opus-MT model's swish): no unit is exactly zero, some are < 0
            metrics["FFN negative units (fraction)"] = (hidden < 0).mean(-1)
        else:
            metrics["FFN zero units (fraction)"] = (hidden == 0).mean(-1)  # ReLU sparsity (Eq. 2)
    metrics["cos(output, input embedding)"] = _cos(out, emb)
    shape = f"{n} × d_model (h heads of d_k)" if sub != "ffn" else f"{n} × d_model (hidden {n} × d_ff)"
    return BlockView(f"{_SIDE[side]} layer {layer_s}: {_SUBLAYER_TITLES[sub]} + add & norm", shape, list(tokens), out,
                     np.linalg.norm(out, axis=-1), metrics)


def drift(trace, side: str = "enc") -> np.ndarray:
    """``(L + 1, N)`` cosine of each token's vector to its input embedding: at the stack's input, then after each
    layer (how far the residual stream has moved, layer by layer)."""
    stack = trace.encoder if side == "enc" else trace.decoder
    emb = _np(stack.embedding)
    return np.stack([_cos(_np(stack.input), emb)] + [_cos(_np(l.output), emb) for l in stack.layers])


def block_heatmap(view: BlockView, *, colorscale: str = "RdBu", template: str | None = None) -> go.Figure:
    """Tokens x dimensions heatmap of a :class:`BlockView` (output block: its top probabilities per step)."""
    labels = [f"{i}:{_text(t)}" for i, t in enumerate(view.tokens)]
    z = view.matrix
    fig = go.Figure(go.Heatmap(z=z, y=labels, colorscale=colorscale, zmid=0 if z.min() < 0 else None,
                               hovertemplate="%{y}<br>dim %{x}: %{z:.3f}<extra></extra>"))
    fig.update_layout(title=f"{view.title} · {view.shape}", xaxis_title="dimension", height=160 + 22 * len(labels),
                      yaxis=dict(autorange="reversed", type="category"), margin=dict(l=10, r=10, t=50, b=40))
    return use_template(fig, template)


def metrics_figure(view: BlockView, *, template: str | None = None) -> go.Figure:
    """Per-token bars: the row norms and every metric of ``view``, one trace each (toggle them in the legend)."""
    labels = [f"{i}:{_text(t)}" for i, t in enumerate(view.tokens)]
    # The norms (about sqrt(d_model) after a LayerNorm) would flatten the ratios: shown on a click in the legend.
    fig = go.Figure(go.Bar(x=labels, y=view.norms, name="‖row‖", visible="legendonly" if view.metrics else True))
    for name, values in view.metrics.items():
        fig.add_bar(x=labels, y=values, name=name, visible=True if "LayerNorm" not in name else "legendonly")
    # The series mix units (ratios, fractions, a cosine, a norm), so the axis names the rule rather than one unit.
    fig.update_layout(barmode="group", height=380, xaxis=dict(type="category", title="position:piece"),
                      yaxis_title="value per token (unit: the legend's)", showlegend=True, margin=dict(l=10, r=10, t=30, b=40),
                      legend=dict(orientation="h", y=-0.35))
    return use_template(fig, template)


def _text(piece: str) -> str:
    """A piece as plotly text: plotly reads a subset of HTML, so ``</s>`` would vanish as a closing tag."""
    return html.escape(piece)


_STATUS_COLOURS = {"root": "#555555", "kept": "#1f77b4", "finished": "#2ca02c", "cut": "#ff7f0e", "pruned": "#bbbbbb"}


def tree_layout(tree) -> dict[int, tuple[int, int]]:
    """``node id -> (step, row)``: each step's nodes in the order the search weighed them (best first)."""
    rows: dict[int, int] = {}
    pos = {}
    for n in tree.nodes:
        pos[n.id] = (n.step, rows.get(n.step, 0))
        rows[n.step] = rows.get(n.step, 0) + 1
    return pos


def tree_summary(tree) -> str:
    """One line on a :class:`~aiayn.beam_tree.BeamTree` for the page to show while the tree's chart is closed:
    beam size K and alpha, how many hypotheses the search weighed over how many steps, how many it kept, pruned and
    ended, and the winner's length-penalised score (Section 6.1; GNMT's length penalty)."""
    count = {s: sum(n.status == s for n in tree.nodes) for s in ("kept", "pruned", "finished", "cut")}
    ended = count["finished"] + count["cut"]
    return (f"Beam search with K = {tree.beam_size}, α = {tree.length_penalty}: {len(tree.nodes) - 1} hypotheses "
            f"weighed over {max(n.step for n in tree.nodes)} steps, {count['kept']} kept, {count['pruned']} pruned, "
            f"{ended} ended; the winner's score (log P / lp) is {tree.nodes[tree.best].score:.3f}.")


#: the tree's plot area at 1366 px (the page's main column, inside an expander), its node labels' font size and the
#: width of one of their characters (Source Sans; both widths measured on a screenshot): a label starts about one
#: font size right of its marker and must end before the next step's marker
TREE_PLOT_PX, TREE_LABEL_PX, TREE_CHAR_PX = 800, 11, 5.5
#: the most steps the tree shows at once: a longer search opens on its first TREE_WINDOW steps with a range slider
#: under the x axis to pan along it, so its labels keep room for a word (20 steps at once left two characters)
TREE_WINDOW = 12


def tree_label(piece: str, steps: int) -> str:
    """A node's label, cut with "…" to the width one step of a ``steps``-step tree leaves beside its marker (the
    whole piece is in the hover): long pieces (``▁Entscheidungen``) of a long search otherwise run into the next
    step's labels. Never under three characters (a piece's first two and "…"): a search of 20 steps or more gets
    short labels that may touch the next marker rather than none. ``steps`` is the number of steps shown at once
    (at most :data:`TREE_WINDOW`: :func:`beam_tree_figure` pans a longer search)."""
    fits = max(3, int((TREE_PLOT_PX / (steps + 2) - 2 * TREE_LABEL_PX) / TREE_CHAR_PX))
    return piece if len(piece) <= fits else piece[:fits - 1] + "…"


def beam_tree_figure(tree, *, template: str | None = None) -> go.Figure:
    """The beam search as a tree: x the step, y the rank within the step; edges to the parent, colour by status
    (kept, finished, cut at the maximum length, pruned), the winner's path drawn thick, hover with log-probabilities
    and the length-penalised score."""
    pos = tree_layout(tree)
    best = set(tree.path(tree.best))
    steps = max(n.step for n in tree.nodes)
    shown = min(steps, TREE_WINDOW)  # a longer search is panned with the range slider (the layout below)
    fig = go.Figure()
    for bold in (False, True):
        xs, ys = [], []
        for n in tree.nodes[1:]:
            if (n.id in best) == bold:
                (x0, y0), (x1, y1) = pos[n.parent], pos[n.id]
                xs += [x0, x1, None]
                ys += [y0, y1, None]
        fig.add_scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                        line=dict(width=4 if bold else 1, color="#d62728" if bold else "#cccccc"))
    for status, colour in _STATUS_COLOURS.items():
        ns = [n for n in tree.nodes if n.status == status]
        if not ns:
            continue
        text = [f"{_text(n.piece)}<br>step {n.step} · log p {n.log_prob:.3f} (this step {n.step_log_prob:.3f})"
                + (f"<br>score {n.score:.3f}" if n.score is not None else "") for n in ns]
        labelled = status != "pruned"  # pruned nodes carry no label: no text elements for the browser to lay out
        fig.add_scatter(x=[pos[n.id][0] for n in ns], y=[pos[n.id][1] for n in ns], name=status,
                        mode="markers+text" if labelled else "markers",
                        text=[_text(tree_label(n.piece, shown)) for n in ns] if labelled else None,
                        textposition="middle right", textfont=dict(size=TREE_LABEL_PX),
                        hovertext=text, hoverinfo="text",
                        customdata=[n.id for n in ns],
                        marker=dict(size=[16 if n.id == tree.best else 10 for n in ns], color=colour,
                                    line=dict(width=[3 if n.id in best else 0 for n in ns], color="#d62728")))
    panned = steps > TREE_WINDOW
    xaxis = dict(title="step (output pieces)" + (f", {steps} in all: drag the slider below to pan"
                                                 if panned else ""),
                 dtick=1, range=[-0.5, shown + 1.5])
    if panned:
        xaxis["rangeslider"] = dict(visible=True, thickness=0.08, range=[-0.5, steps + 1.5])
    fig.update_layout(title=f"Beam search tree (K = {tree.beam_size}, α = {tree.length_penalty})", xaxis=xaxis,
                      yaxis=dict(title="rank in the step", autorange="reversed"), height=550 if panned else 460,
                      margin=dict(l=10, r=10, t=85 if panned else 50, b=40),
                      # below a slider the legend would cover the axis title: it goes between the title and the plot
                      legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0, xanchor="left") if panned else
                      dict(orientation="h", y=-0.2))
    return use_template(fig, template)


def logit_lens_figure(lens, *, colorscale: str = "Viridis", template: str | None = None) -> go.Figure:
    """Layers x steps: each cell the top-1 piece a decoder layer's output would predict at that step and its
    probability (colour); hover lists the top-k. The last row is the model's own prediction."""
    L, T, k = lens.ids.shape
    top1 = lens.probs[:, :, 0]
    text = [[_text(lens.pieces[l][t][0]) for t in range(T)] for l in range(L)]
    hover = [["<br>".join(f"{_text(p)}: {q:.3f}" for p, q in zip(lens.pieces[l][t], lens.probs[l, t])) for t in range(T)]
             for l in range(L)]
    x = [f"{t}:{_text(tok)}" for t, tok in enumerate(lens.output_tokens)]
    fig = go.Figure(go.Heatmap(z=top1, x=x, y=[f"layer {l + 1}" for l in range(L)], text=text, texttemplate="%{text}",
                               customdata=hover, hovertemplate="%{y}, step %{x}<br>%{customdata}<extra></extra>",
                               colorscale=colorscale, zmin=0, zmax=1, colorbar=dict(title="p(top-1)")))
    fig.update_layout(title="Logit lens: what each decoder layer would predict", height=140 + 45 * L,
                      xaxis=dict(title="the piece that came next", type="category"),
                      margin=dict(l=10, r=10, t=50, b=40))
    return use_template(fig, template)


# -- the architecture, drawn as the paper's Figure 1 ----------------------------------------------------------------

_ARCH_COLOURS = {"embed": "#f7c6c7", "scale": "#f7c6c7", "pe": "#ffffff", "attn": "#fbd7a5", "norm": "#f3efb5",
                 "ffn": "#c5e3f6", "linear": "#d9d2ef", "softmax": "#cfeccb"}
_SELECTED = "#d62728"


def _arch_boxes(side: str, layer: int) -> list[tuple[str, str, str, float]]:
    """``(block key, label, colour kind, y)`` of one stack as Figure 1 draws it, bottom to top, for ``layer``."""
    name = "Input" if side == "enc" else "Output"
    rows = [(f"{side}.embed", f"{name} Embedding", "embed", 1.0), (f"{side}.scale", "× √d_model", "scale", 2.0),
            (f"{side}.pe", "⊕ Positional<br>Encoding", "pe", 3.0)]
    subs = ([("self_attn", "Multi-Head Attention"), ("ffn", "Feed Forward")] if side == "enc" else
            [("self_attn", "Masked Multi-Head<br>Attention"), ("cross_attn", "Multi-Head Attention"),
             ("ffn", "Feed Forward")])
    y = 4.0
    for sub, label in subs:
        key = f"{side}.{layer}.{sub}"
        rows += [(key, label, "ffn" if sub == "ffn" else "attn", y), (key, "Add & Norm", "norm", y + 1)]
        y += 2
    return rows


def architecture_blocks(n_layers: int, layer: int = 1) -> list[dict]:
    """Every box of :func:`architecture_figure`: ``{"key", "label", "kind", "x", "y"}``; the encoder at x = 1, the
    decoder at x = 4, sub-layers of layer ``layer`` (the one drawn inside the N× frame), the output's Linear and
    Softmax above the decoder. Layer chips (``kind == "layer"``) at the frames' outer sides pick the layer.

    Raises:
        ValueError: ``layer`` outside 1..n_layers.
    """
    if not 1 <= layer <= n_layers:
        raise ValueError(f"layer must be between 1 and {n_layers}, got {layer}")
    boxes = [dict(key=k, label=lab, kind=kind, x=1.0 if side == "enc" else 4.0, y=y)
             for side in ("enc", "dec") for k, lab, kind, y in _arch_boxes(side, layer)]
    boxes += [dict(key="out", label="Linear", kind="linear", x=4.0, y=11.0),
              dict(key="out", label="Softmax", kind="softmax", x=4.0, y=12.0)]
    for side, x, top in (("enc", -0.5, 7.4), ("dec", 5.5, 9.4)):
        for l in range(1, n_layers + 1):
            y = 3.8 + (top - 3.8) * (l - 0.5) / n_layers
            boxes.append(dict(key=f"{side}.{l}.self_attn", label=str(l), kind="layer", x=x, y=y, layer=l))
    return boxes


def _layer_of(key: str | None) -> int:
    parts = (key or "").split(".")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else 1


def architecture_figure(n_layers: int, selected: str | None = None, *, template: str | None = None) -> go.Figure:
    """Figure 1 of the paper as a plotly figure: encoder stack left, decoder stack right, each with its embedding,
    × √d_model (Section 3.4), ⊕ positional encoding (Section 3.5) and one layer in an N× frame (Section 3.1:
    multi-head attention, masked multi-head attention, encoder-decoder attention, feed-forward, each with its
    Add & Norm), the encoder's output feeding the decoder's middle attention, Linear and Softmax on top.

    Boxes are layout shapes; one scatter trace carries one marker per box (``customdata`` the block key of
    :func:`block_keys`), so a click on a box selects its block (``st.plotly_chart(on_select=...)``); a second trace
    holds the layer chips. The ``selected`` block's boxes get a thick red border and its layer is drawn.
    """
    layer = min(max(_layer_of(selected), 1), n_layers)
    boxes = architecture_blocks(n_layers, layer)
    # Shapes and annotations are collected and set in one layout update: plotly's add_shape / add_annotation
    # re-validate the whole list on every call (quadratic; most of the page's time per rerun).
    shapes, notes = [], []
    for x0, x1, top, label in ((-0.2, 2.2, 7.6, f"N× = {n_layers}"), (2.8, 5.2, 9.6, f"N× = {n_layers}")):
        shapes.append(dict(type="rect", x0=x0, x1=x1, y0=3.6, y1=top, line=dict(color="#888888", width=1.5),
                           fillcolor="#f2f2f2", layer="below"))
        notes.append(dict(x=x0 - 0.05 if x0 < 0 else x1 + 0.05, y=top + 0.25, text=label, showarrow=False,
                          xanchor="right" if x0 < 0 else "left", font=dict(size=13)))
    fig = go.Figure()
    # the encoder's output (the memory) into the decoder's encoder-decoder attention (K and V)
    fig.add_scatter(x=[1, 1, 2.5, 2.5, 3.2], y=[7.4, 8.1, 8.1, 6.0, 6.0], mode="lines", hoverinfo="skip",
                    showlegend=False, line=dict(color="#555555", width=1.5))
    for x in (1.0, 4.0):
        top = 7.4 if x == 1.0 else 12.4
        fig.add_scatter(x=[x, x], y=[0.4, top], mode="lines", hoverinfo="skip", showlegend=False,
                        line=dict(color="#555555", width=1.5), cliponaxis=False)
    main = [b for b in boxes if b["kind"] != "layer"]
    for b in main:
        sel = b["key"] == selected
        w = 1.05
        shapes.append(dict(type="rect", x0=b["x"] - w, x1=b["x"] + w, y0=b["y"] - 0.36, y1=b["y"] + 0.36,
                           fillcolor=_ARCH_COLOURS[b["kind"]], line=dict(color=_SELECTED if sel else "#444444",
                                                                         width=4 if sel else 1)))
        # annotations, not the trace's text: they draw above the boxes (shapes cover traces)
        notes.append(dict(x=b["x"], y=b["y"], text=b["label"], showarrow=False, font=dict(size=11, color="#111111")))
    fig.add_scatter(x=[b["x"] for b in main], y=[b["y"] for b in main], mode="markers", name="blocks",
                    customdata=[b["key"] for b in main],
                    hovertext=[f"{b['label'].replace('<br>', ' ')} · {b['key']}" for b in main], hoverinfo="text",
                    showlegend=False,
                    marker=dict(symbol="square", size=34, color="rgba(0,0,0,0.01)"))
    chips = [b for b in boxes if b["kind"] == "layer"]
    sel_side = selected.split(".")[0] if selected and selected.count(".") == 2 else None
    fig.add_scatter(x=[b["x"] for b in chips], y=[b["y"] for b in chips], mode="markers+text", name="layers",
                    text=[b["label"] for b in chips], customdata=[b["key"] for b in chips], showlegend=False,
                    hovertext=[f"layer {b['layer']}" for b in chips], hoverinfo="text", textfont=dict(size=11),
                    marker=dict(size=20, color=[_SELECTED if b["layer"] == layer and b["key"].startswith(f"{sel_side}.")
                                                else "#dddddd" for b in chips]))
    notes += [dict(x=x, y=0.15, text=text, showarrow=False, font=dict(size=12))
              for x, text in ((1.0, "Inputs"), (4.0, "Outputs (shifted right)"))]
    notes.append(dict(x=4.0, y=12.85, text="Output Probabilities", showarrow=False, font=dict(size=12)))
    fig.update_layout(height=620, margin=dict(l=10, r=10, t=10, b=10), dragmode=False, clickmode="event+select",
                      xaxis=dict(visible=False, range=[-1.0, 6.0], fixedrange=True),
                      yaxis=dict(visible=False, range=[-0.2, 13.2], fixedrange=True), shapes=shapes, annotations=notes)
    return use_template(fig, template)


def clicked(points: Sequence[dict]):
    """The ``customdata`` of the first clicked point that carries one (Streamlit's ``event.selection.points`` of
    a chart whose points hold block keys or tree node ids), None when none does."""
    for p in points or []:
        value = p.get("customdata")
        if isinstance(value, list):
            value = value[0] if value else None
        if value is not None:
            return value
    return None


def selected_block(points: Sequence[dict]) -> str | None:
    """The block key of the first clicked point of an :func:`architecture_figure` selection, None when no
    point carries a key."""
    value = clicked(points)
    return value if isinstance(value, str) else None


def next_piece_figure(rows: Sequence[tuple[str, Sequence[str], Sequence[float]]], *,
                      template: str | None = None) -> go.Figure:
    """Next-piece probability bars, one row per decoding (greedy, beam, sampled): at each step the probability the
    model gave the piece that decoding chose (``rows``: ``(name, pieces, probabilities)``, from a teacher-forced
    pass over each output); the piece written on its bar."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=len(rows), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[name for name, _, _ in rows])
    for i, (name, pieces, probs) in enumerate(rows, start=1):
        fig.add_bar(x=list(range(len(pieces))), y=list(probs), text=[_text(p) for p in pieces], name=name,
                    textposition="auto", showlegend=False, row=i, col=1,
                    hovertemplate="step %{x}: %{text}<br>p = %{y:.3f}<extra>" + _text(name) + "</extra>")
        fig.update_yaxes(range=[0, 1], title_text="p", row=i, col=1)
    fig.update_xaxes(title_text="step", dtick=1, row=len(rows), col=1)
    fig.update_layout(height=140 + 150 * len(rows), margin=dict(l=10, r=10, t=40, b=40))
    return use_template(fig, template)


# -- queries and keys of one head (AttentionViz) ---------------------------------------------------------------------
def qk_space_figure(space, query_tokens: Sequence[str], key_tokens: Sequence[str], *, title: str,
                    groups: tuple[np.ndarray, np.ndarray] | None = None, presenter: bool = False,
                    template: str | None = None) -> go.Figure:
    """One head's queries (circles) and keys (diamonds) in one 2-D space (:func:`aiayn.analysis.qk_space.qk_space`),
    each point labelled with its piece and coloured by its position; a thin line joins each query to the key it
    gives the most weight. Hover: the piece, its position and, for a query, its three largest weights.

    Args:
        space: :class:`~aiayn.analysis.qk_space.QKSpace` with N queries and M keys.
        query_tokens / key_tokens: N and M pieces.
        title: the figure's title (the block and head).
        groups: the sentence id of each query and key (many sentences at once, AttentionViz's global view, as
            :func:`aiayn.analysis.qk_space.qk_space` got them): points are then unlabelled and unjoined, coloured
            by their position relative to their sentence's length, the sentence named in the hover.
        presenter: larger labels and markers, for a projector.

    Raises:
        ValueError: token lists that do not match the space's sizes.
    """
    n, m = len(space.query_xy), len(space.key_xy)
    if len(query_tokens) != n or len(key_tokens) != m:
        raise ValueError(f"{n} queries and {m} keys, but {len(query_tokens)} and {len(key_tokens)} pieces")
    fig = go.Figure()
    if groups is None:  # one sentence: each query joined to its top key
        xs, ys = [], []
        for i, j in enumerate(space.top_key):
            xs += [space.query_xy[i, 0], space.key_xy[j, 0], None]
            ys += [space.query_xy[i, 1], space.key_xy[j, 1], None]
        fig.add_scatter(x=xs, y=ys, mode="lines", line=dict(width=1, color="#bbbbbb"), hoverinfo="skip",
                        name="query → its top key")
        gq, gk = np.zeros(n, np.int64), np.zeros(m, np.int64)
    else:
        gq, gk = (np.asarray(g) for g in groups)

    qi, ki = position_in_group(gq), position_in_group(gk)
    if groups is None:  # one sentence: positions relative to the longer side
        qrel, krel = qi / (max(n, m) - 1 or 1), ki / (max(n, m) - 1 or 1)
    else:  # each point's place in its own sentence, 0 (first) to 1 (last)
        qrel = qi / np.maximum(np.bincount(gq)[gq] - 1, 1)
        krel = ki / np.maximum(np.bincount(gk)[gk] - 1, 1)
    qname, kname = ([""] * n, [""] * m) if groups is None else (
        [f"sentence {v + 1} · " for v in gq], [f"sentence {v + 1} · " for v in gk])
    hover = []
    for i, tok in enumerate(query_tokens):
        top = np.argsort(-space.weights[i])[:3]
        hover.append(f"{qname[i]}query {qi[i]}: {_text(tok)}<br>" + "<br>".join(
            f"→ {ki[j]}: {_text(key_tokens[j])} {space.weights[i, j]:.2f}" for j in top if space.allowed[i, j]))
    labelled = groups is None
    for role, xy, tokens, symbol, texts, colour in (
            ("query", space.query_xy, query_tokens, "circle", hover, qrel),
            ("key", space.key_xy, key_tokens, "diamond",
             [f"{kname[j]}key {ki[j]}: {_text(t)}" for j, t in enumerate(key_tokens)], krel)):
        fig.add_scatter(x=xy[:, 0], y=xy[:, 1], mode="markers+text" if labelled else "markers",
                        name="queries" if role == "query" else "keys",
                        text=[_text(tree_label(t, TREE_WINDOW)) for t in tokens] if labelled else None,
                        textposition="top center" if role == "query" else "bottom center",
                        textfont=dict(size=17 if presenter else TREE_LABEL_PX + 1), hovertext=texts,
                        hoverinfo="text",
                        marker=dict(symbol=symbol, size=((11 if role == "query" else 12) if labelled else 7)
                                    + (5 if presenter else 0), opacity=1 if labelled else 0.75,
                                    color=colour, colorscale="Viridis", cmin=0, cmax=1,
                                    line=dict(width=1.5, color="#333333" if role == "key" else "#ffffff"),
                                    showscale=role == "query",
                                    colorbar=dict(title="position" if labelled else "position in<br>its sentence",
                                                  tickvals=[0, 1], ticktext=["first", "last"],
                                                  len=0.6)))
    fig.update_layout(title=title, height=480, margin=dict(l=10, r=10, t=50, b=40),
                      xaxis=dict(title=f"component 1 ({space.explained[0]:.0%} of the variance)", zeroline=False),
                      yaxis=dict(title=f"component 2 ({space.explained[1]:.0%})", zeroline=False,
                                 scaleanchor="x", scaleratio=1),
                      legend=dict(orientation="h", y=-0.2))
    return use_template(fig, template)
