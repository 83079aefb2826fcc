"""A guided lesson's Streamlit controls: a step number bound to the URL (``?step=k``, 0 or absent: no lesson) with
Back and Next buttons, and the step's box. A step selects its block in the page's block picker (the widget keyed
``block_key``) when the step changes, so a copied link opens the step with its block. The text is pure
(:mod:`aiayn.lessons.figure1`). Not a paper section.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import streamlit as st

_APPLIED = "_aiayn_lesson_applied"


def _move(delta: int, n_steps: int) -> None:
    st.session_state["step"] = max(1, min(n_steps, int(st.session_state.get("step") or 0) + delta))


def step_controls(blocks: Sequence[str], *, block_key: str = "block", opens: Mapping[int, str] | None = None) -> int:
    """Back / Next and the step number; returns the step (0: no lesson). Call before the block picker: a step
    that changed since the last run writes its block (``blocks[step - 1]``) into the picker's session state, and
    opens the expander keyed ``opens[step]`` when there is one (a section the step talks about)."""
    n = len(blocks)
    c_back, c_next, c_step = st.columns([1, 1, 2], vertical_alignment="bottom")
    step = int(c_step.number_input(f"Lesson step (1 to {n}; 0: off)", 0, n, 0, key="step", bind="query-params"))
    c_back.button("← Back", key="lesson_back", on_click=_move, args=(-1, n), disabled=step <= 1, width="stretch")
    c_next.button("Next →" if step else "Lesson →", key="lesson_next", on_click=_move, args=(1, n),
                  disabled=step >= n, width="stretch", type="primary")
    if step and st.session_state.get(_APPLIED) != step:
        st.session_state[block_key] = blocks[step - 1]
        if opens and step in opens:
            st.session_state[opens[step]] = True
    st.session_state[_APPLIED] = step
    return step


def show_step(step, n_steps: int, label: str) -> None:
    """The box of a :class:`~aiayn.lessons.figure1.LessonStep`: its number, title and highlighted block, its text."""
    with st.container(border=True):
        st.markdown(f"**Step {step.index} of {n_steps} · {step.title}** — block: :orange-background[{label}]\n\n"
                    f"{step.markdown}")


def picking_chart(fig, options: Sequence, *, key: str, target_key: str, filename: str) -> None:
    """Show a figure whose points carry values (``customdata``: block keys, tree node ids) so that a click on a
    point sets the widget keyed ``target_key`` to that value when it is one of ``options`` (Streamlit returns
    clicks on scatter points, not on shapes or heatmaps); the widget stays the keyboard path."""
    from ..figures.figure1 import clicked
    from .charts import plotly_config, prepare_figure

    def picked() -> None:
        event = st.session_state.get(key) or {}
        chosen = clicked((event.get("selection") or {}).get("points", []))
        if chosen in options:
            st.session_state[target_key] = chosen

    prepare_figure(fig)
    # plotly fades every point but the clicked one; the figure's own highlight says what is selected (set trace by
    # trace: update_traces' selector machinery costs several times more on every rerun)
    for trace in fig.data:
        if trace.type == "scatter" and "markers" in (trace.mode or ""):
            trace.unselected = dict(marker=dict(opacity=1), textfont=dict(color="#333333"))
    st.plotly_chart(fig, width="stretch", config=plotly_config(filename), key=key, theme="streamlit",
                    on_select=picked, selection_mode="points")
