"""Figure 1 walked on the student's own sentence: every block's tensors from one traced teacher-forced pass
(aiayn.calls.traced), the beam search as a tree with prefix forcing, the decoder's logit lens and sampling.
Figures: aiayn.figures.figure1.
"""
from __future__ import annotations

import aiayn.app.preload  # noqa: F401 - first: a cold server's sessions import in one go (see that module)

import numpy as np
import streamlit as st

from aiayn import app as ui
from aiayn import calls
from aiayn.app import lesson as lesson_ui
from aiayn.app.explorer import explorer_prefix_link
from aiayn.analysis.qk_space import qk_space
from aiayn.app.models import decode_queue, load_translator, model_key as served_model
from aiayn.examples import EXAMPLES
from aiayn.figures import figure1 as f1
from aiayn.lessons import figure1 as lesson

ctx = ui.setup_page("Figure 1, walked", icon=":material/schema:", intro=(
    "Figure 1 of the paper, block by block, on your sentence: pick a block to see the real tensors at that point "
    "(one traced pass feeds every block). Below: the beam search (Section 6.1) as the tree it explores, what each "
    "decoder layer would already predict (the logit lens), and sampling beside greedy and beam search."))
tr = ctx.translator
examples = EXAMPLES[ctx.direction]
text = st.text_input(f"Sentence ({ctx.src_lang.upper()})", value=examples[0][0], key="text", bind="query-params",
                     max_chars=400)
cleaned = ui.sentence_or_stop(text)


@st.cache_resource(max_entries=32, show_spinner="Running the model…")
def _walk(direction: str, model: tuple[str, str], text: str):  # noqa: ARG001 - model: cache key
    """All the first screen needs: one beam search (the translation and its tree are the same decode) and one
    traced teacher-forced pass over its output (every block, the lesson's numbers, the logit lens).

    A shared resource, not ``st.cache_data``: the page and the figures only read these values, and a copy per
    rerun would pickle the trace's tensors on the first draw and unpickle them on every click."""
    t, queue = load_translator(direction), decode_queue(direction)  # the model's work in the server's queue
    tree = queue.run(t.beam_tree, text, beam_size=4, length_penalty=0.6)
    lens = queue.run(t.logit_lens, text, k=5, output_ids=tree.translation.output_ids)
    return tree, lens


@st.cache_data(max_entries=64, show_spinner=False)
def _greedy_and_sampled(direction: str, model: tuple[str, str], text: str, temperature: float, top_k: int,  # noqa: ARG001
                        top_p: float, seed: int):
    """Cached, so a lesson step or a block click does not decode the sentence again."""
    t, queue = load_translator(direction), decode_queue(direction)
    return (queue.run(t.translate, text, beam_size=1, return_attention=False),
            queue.run(t.sample, text, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                      return_attention=False))


@st.cache_data(max_entries=64, show_spinner=False)
def _forced(direction: str, model: tuple[str, str], text: str, prefix: tuple):  # noqa: ARG001 - model: cache key
    """The translation that starts with a tree node's prefix (prefix-constrained beam search), cached."""
    return decode_queue(direction).run(load_translator(direction).translate, text, prefix=list(prefix),
                                       return_attention=False)


@st.cache_data(max_entries=64, show_spinner=False)
def _chosen_probs(direction: str, model: tuple[str, str], src_ids: tuple, out_ids: tuple):  # noqa: ARG001
    """p of each piece an output chose, from one teacher-forced pass over it (the one owner of model calls)."""
    t = load_translator(direction)
    forced = decode_queue(direction).run(calls.teacher_forced_ids, t.model, [list(src_ids)], [list(out_ids)])
    return forced.target_log_probs(t.cfg.pad_id)[0].exp().cpu().numpy()


model_key = served_model(ctx.direction)
try:
    tree, lens = _walk(ctx.direction, model_key, cleaned)
except ValueError as exc:
    st.error(f"Could not run the model: {exc}")
    st.stop()
trace = lens.trace
st.markdown(f"**Beam search output:** {tree.translation.text or '∅'}")

# -- the blocks ---------------------------------------------------------------------------------------------------
keys = f1.block_keys(tr.cfg.n_layers)
labels = dict(keys)
ui.warn_bad_param("block", list(labels), "unknown block of Figure 1")
ui.warn_bad_param("step", [str(i) for i in range(lesson.N_STEPS + 1)], f"the lesson has steps 1 to {lesson.N_STEPS}")
text_col, figure_col = ui.chart_columns([1, 1])  # stacked in presenter mode: the lesson's text first
with text_col:
    step = lesson_ui.step_controls(lesson.step_blocks(tr.cfg.n_layers),
                                   opens={lesson.LENS_STEP: "open_lens", lesson.TREE_STEP: "open_tree"})
    if step:
        now = lesson.lesson_step(step, trace, lens, tr.cfg)
        lesson_ui.show_step(now, lesson.N_STEPS, labels[now.block])
    block = st.selectbox("Block of Figure 1 (bottom to top: encoder, decoder, output)", list(labels), key="block",
                         bind="query-params")
block = block if block in labels else keys[0][0]
with figure_col:
    lesson_ui.picking_chart(f1.architecture_figure(tr.cfg.n_layers, block, template=ctx.template), list(labels),
                            key="architecture", target_key="block", filename="figure1_architecture")
tokens = trace.meta["src_tokens"] if block.startswith("enc") else trace.meta["decoder_input_tokens"]
view = f1.block_view(trace, block, tokens, pieces=tr.tokenizer.id_to_piece)
cfg = tr.cfg
st.caption(f"**{labels[block]}**. Shape {view.shape}: S = {len(trace.meta['src_tokens'])}, T = {len(trace.meta['output_tokens'])}, "
           f"d_model = {cfg.d_model}, h = {cfg.n_heads}, d_k = {cfg.d_k}, d_ff = {cfg.d_ff}")
ui.show_figure(f1.block_heatmap(view, template=ctx.template), key="block_heatmap", filename="figure1_block")
if view.top:
    st.dataframe({f"{i}:{t}": ", ".join(f"{p} {q:.2f}" for p, q in row)
                  for i, (t, row) in enumerate(zip(trace.meta["output_tokens"], view.top))}, width="stretch")
else:
    ui.show_figure(f1.metrics_figure(view, template=ctx.template), key="block_metrics", filename="figure1_metrics")

# -- queries and keys of one head (AttentionViz) -------------------------------------------------------------------
@st.cache_data(max_entries=64, show_spinner=False)
def _query_keys(direction: str, model: tuple[str, str], text: str, kind: str, layer: int):
    """Every head's queries and keys of one attention block, from the traced pass of the first draw (cached)."""
    trace = _walk(direction, model, text)[1].trace
    q, k = decode_queue(direction).run(calls.query_keys, load_translator(direction).model, trace, kind, layer)
    return q[0].numpy(), k[0].numpy()


def _qk_tokens(meta: dict, kind: str) -> tuple[list[str], list[str]]:
    """The pieces of the queries and of the keys of an attention ``kind``: the source's for the encoder, the decoder
    input's for masked self-attention, decoder input and source for encoder-decoder attention."""
    src, dec = meta["src_tokens"], meta["decoder_input_tokens"]
    return (src, src) if kind == "encoder" else ((dec, dec) if kind == "decoder" else (dec, src))


@st.cache_data(max_entries=32, show_spinner="Translating and tracing every example sentence…")
def _query_keys_all(direction: str, model: tuple[str, str], texts: tuple, kind: str, layer: int):
    """For each text: every head's queries and keys of one attention block over its beam output, with the pieces
    of both sides (AttentionViz's global view, many sentences in one picture)."""
    t, queue = load_translator(direction), decode_queue(direction)
    out = []
    for text in texts:  # background pieces of one sentence each: a class's translations go first
        trace = queue.run_background(t.trace, text)
        q, k = queue.run_background(calls.query_keys, t.model, trace, kind, layer)
        out.append((q[0].numpy(), k[0].numpy(), *_qk_tokens(trace.meta, kind)))
    return out


@st.fragment
def qk_section(block: str) -> None:
    """One head's queries and keys in one space, for the chosen attention block, drawn when opened."""
    for key in ("qk_head", "qk_all"):  # widgets not drawn in a run lose their value: kept while the section is closed
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]
    side, layer, sub = block.split(".")
    kind = "encoder" if side == "enc" else ("decoder" if sub == "self_attn" else "cross")
    with st.expander("Queries and keys of one head of this block in one space (AttentionViz)", key="open_qk",
                     on_change="rerun", bind="query-params", icon=":material/scatter_plot:") as box:
        if not box.open:
            return
        heads = [str(h) for h in range(1, cfg.n_heads + 1)]
        ui.warn_bad_param("qk_head", heads, f"this model has heads 1 to {cfg.n_heads}")
        h1, h2 = st.columns([3, 2], vertical_alignment="bottom")
        head = h1.segmented_control("Head", heads, default="1", key="qk_head", bind="query-params") or "1"
        texts = tuple(dict.fromkeys([cleaned] + [e[0] for e in examples]))
        every = h2.toggle(f"All {len(texts)} sentences at once", key="qk_all", bind="query-params",
                          help="Your sentence and the curated examples in one picture (AttentionViz's global view): "
                               "points coloured by their place in their sentence show whether the head attends by "
                               "position; each query still attends to its own sentence's keys only.")
        h = int(head) - 1
        where = labels[block].split(":")[0] + {"encoder": " self-attention", "decoder": " masked self-attention",
                                                "cross": " encoder-decoder attention"}[kind]
        if every:
            rows = _query_keys_all(ctx.direction, model_key, texts, kind, int(layer))
            groups = (np.concatenate([np.full(len(r[2]), i) for i, r in enumerate(rows)]),
                      np.concatenate([np.full(len(r[3]), i) for i, r in enumerate(rows)]))
            space = qk_space(np.concatenate([r[0][h] for r in rows]), np.concatenate([r[1][h] for r in rows]),
                             causal=kind == "decoder", groups=groups)
            q_tokens = [t for r in rows for t in r[2]]
            k_tokens = [t for r in rows for t in r[3]]
            title = f"{where}, head {head}: queries and keys of {len(rows)} sentences"
        else:
            q, k = _query_keys(ctx.direction, model_key, cleaned, kind, int(layer))
            space, groups = qk_space(q[h], k[h], causal=kind == "decoder"), None
            q_tokens, k_tokens = _qk_tokens(trace.meta, kind)
            title = f"{where}, head {head}: queries and keys"
        ui.show_figure(f1.qk_space_figure(space, q_tokens, k_tokens, title=title, groups=groups,
                                          presenter=ctx.presenter, template=ctx.template), key="qk_space",
                       filename="query_key_space")
        agree = ("undefined (too few keys per query)" if space.rank_agreement != space.rank_agreement
                 else f"{space.rank_agreement:.2f}")
        st.caption(
            f"Each query q_i and key k_j of this head (d_k = {cfg.d_k}) projected on the first two principal "
            f"components of both sets together ({space.explained.sum():.0%} of their variance). The head attends by "
            f"q_i · k_j / √d_k (Eq. 1), so a query tends to sit near the keys it attends to; the keys are moved so "
            f"their mean is the queries' and both sets scaled to one mean norm (×{space.scale:.2f} and "
            f"÷{space.scale:.2f}), which changes no attention weight (AttentionViz, Yeh et al. 2023). How far to "
            f"trust the picture{' for these sentences' if every else ' for this sentence'}: the 2-D distances "
            f"order each query's keys as its scores do with a "
            f"mean Spearman correlation of **{agree}** (1: exactly, 0: not at all)."
            + (" Masked self-attention: query i sees keys 0 to i only." if kind == "decoder" else ""))


if block.split(".")[-1] in ("self_attn", "cross_attn"):
    qk_section(block)

# -- decoding as a search -----------------------------------------------------------------------------------------
# The three sections below are drawn when opened (Streamlit's lazy expanders, in fragments: opening one reruns it
# alone): the first draw shows the blocks from one beam search and one traced pass; the tree's chart, the largest
# the page sends, waits for a click (or ?open_tree=true, or the lesson's beam-search step).
st.subheader("Decoding as a search")


@st.fragment
def tree_section(tree) -> None:
    """The beam search as a tree (already recorded: the first draw's search), drawn when opened; a clicked node or
    the picker forces that node's prefix and decodes the rest."""
    if "force" in st.session_state:  # a widget not drawn in a run loses its value: kept while the section is closed
        st.session_state["force"] = st.session_state["force"]
    with st.expander("The beam-search tree: every hypothesis kept or pruned (click a node to force its prefix)",
                     key="open_tree", on_change="rerun", bind="query-params", icon=":material/account_tree:") as box:
        if not box.open:
            return
        nodes = [n.id for n in tree.nodes[1:]]  # a pruned node's prefix too: what the search would have said
        lesson_ui.picking_chart(f1.beam_tree_figure(tree, template=ctx.template), nodes, key="beam_tree",
                                target_key="force", filename="beam_tree")
        force = st.selectbox("Force a node's prefix and decode the rest (or click a node)", [None] + nodes,
                             key="force", format_func=lambda i: "—" if i is None else
                             " ".join(tree.nodes[j].piece for j in tree.path(i)))
        if force is not None:
            forced = _forced(ctx.direction, model_key, cleaned, tuple(tree.tokens(force)))
            st.markdown(f"**Forced:** {forced.text or '∅'} (score {forced.score:.3f})")
            explorer_prefix_link(tr, cleaned, tree.tokens(force))  # every head's maps of this forced output


st.caption(f1.tree_summary(tree))
tree_section(tree)

# -- logit lens ---------------------------------------------------------------------------------------------------
@st.fragment
def lens_section(lens) -> None:
    """The logit lens of the traced pass (already computed: the lesson quotes it), drawn when opened."""
    with st.expander("What each decoder layer would already predict", key="open_lens", on_change="rerun",
                     bind="query-params", icon=":material/layers:") as box:
        if box.open:
            ui.show_figure(f1.logit_lens_figure(lens, colorscale=ctx.colorscale, template=ctx.template), key="lens",
                           filename="logit_lens")


st.subheader("Logit lens")
lens_section(lens)

# -- sampling -----------------------------------------------------------------------------------------------------
SAMPLING_KEYS = ("temperature", "top_k", "top_p", "seed")


@st.fragment
def decodings_section(tree, trace) -> None:
    """Greedy and sampled outputs beside the beam's, each with the probability the model gave its pieces: two more
    decodes and two teacher-forced passes, run when the section is opened (the beam's come from the trace)."""
    for key in SAMPLING_KEYS:  # widgets not drawn in a run lose their value: kept while the section is closed
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]
    with st.expander("Decode greedily and by sampling, beside the beam", key="open_decodings", on_change="rerun",
                     bind="query-params", icon=":material/casino:") as box:
        if not box.open:
            return
        c1, c2, c3, c4 = st.columns(4)
        temperature = c1.slider("Temperature", 0.1, 2.0, 1.0, step=0.1, key="temperature")
        top_k = c2.number_input("top-k (0: all)", 0, 100, 0, key="top_k")
        top_p = c3.slider("top-p", 0.05, 1.0, 1.0, step=0.05, key="top_p")
        seed = c4.number_input("Seed", 0, 10_000, 0, key="seed")
        greedy, sampled = _greedy_and_sampled(ctx.direction, model_key, cleaned, float(temperature), int(top_k),
                                              float(top_p), int(seed))
        beam = tree.translation
        st.table({"decoding": ["greedy", "beam 4", "sampled"], "output": [greedy.text, beam.text, sampled.text],
                  "log P": [round(greedy.log_prob, 3), round(beam.log_prob, 3), round(sampled.log_prob, 3)]})
        rows = [("greedy", greedy.output_tokens, _chosen_probs(ctx.direction, model_key, tuple(greedy.src_ids),
                                                               tuple(greedy.output_ids))),
                ("beam 4", beam.output_tokens, lesson.chosen_probs(trace)),  # from the traced pass
                ("sampled", sampled.output_tokens, _chosen_probs(ctx.direction, model_key, tuple(sampled.src_ids),
                                                                 tuple(sampled.output_ids)))]
        ui.show_figure(f1.next_piece_figure([r for r in rows if len(r[1])], template=ctx.template), key="next_piece",
                       filename="next_piece_probabilities")


st.subheader("Greedy, beam and sampling")
decodings_section(tree, trace)
