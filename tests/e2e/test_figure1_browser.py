"""End-to-end: the Figure 1 page in a real headless Chromium at 1366x768 (harness: conftest.py): the lesson's Next
moves the step in the URL, a click on a box of the drawn Figure 1 selects its block, a click on a beam-tree node
forces its prefix (AppTest cannot click a chart: Streamlit returns scatter-point clicks from the browser only)."""
from __future__ import annotations

import os

from e2e_harness import SCREENSHOTS, page_url, wait_ready

PAGE = "pages/10_Figure_1.py"
#: the label of the closed section that draws the beam-search tree
TREE_SECTION = "The beam-search tree: every hypothesis kept or pruned (click a node to force its prefix)"

#: pixel position of the first point of the trace named ``name`` whose customdata passes ``test`` (JS expression of d)
_POINT = """([name, test]) => {
  const gd = [...document.querySelectorAll('.js-plotly-plot')].find(g => g.data && g.data.some(t => t.name === name));
  if (!gd) return null;
  gd.scrollIntoView({block: 'center'});
  const t = gd.data.find(t => t.name === name), i = t.customdata.findIndex(d => eval(test));
  const fl = gd._fullLayout, r = gd.getBoundingClientRect();
  return [r.left + fl._size.l + fl.xaxis.l2p(t.x[i]), r.top + fl._size.t + fl.yaxis.l2p(t.y[i]), t.customdata[i]];
}"""


def _viewport_shot(pg, name: str) -> None:
    """The view as the student sees it (the 1366x768 viewport, above the fold), when AIAYN_SCREENSHOTS=1."""
    if os.environ.get("AIAYN_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        pg.wait_for_timeout(800)
        pg.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def _click_point(pg, name: str, test: str):
    pg.wait_for_function(f"() => [...document.querySelectorAll('.js-plotly-plot')].some(g => g.data && "
                         f"g.data.some(t => t.name === {name!r}))")
    pg.evaluate(_POINT, [name, test])  # scrolls it into view first
    pg.wait_for_timeout(600)
    x, y, value = pg.evaluate(_POINT, [name, test])
    pg.mouse.move(x, y)
    pg.wait_for_timeout(200)
    pg.mouse.click(x, y)
    pg.wait_for_timeout(800)
    wait_ready(pg)
    return value


def test_lesson_architecture_and_tree_clicks(server, page):
    pg = page
    pg.set_viewport_size({"width": 1366, "height": 768})
    pg.goto(page_url(server, PAGE, "step=2&text=I%20have%20no%20time."))
    wait_ready(pg)
    assert pg.get_by_text("Step 2 of 14").count() == 1
    pg.get_by_role("button", name="Next →").click()
    pg.wait_for_function("() => location.search.includes('step=3')")
    wait_ready(pg)
    assert pg.get_by_text("Step 3 of 14").count() == 1 and "block=enc.pe" in pg.url
    assert _click_point(pg, "blocks", "d === 'dec.1.ffn'") == "dec.1.ffn"
    pg.wait_for_function("() => location.search.includes('block=dec.1.ffn')")
    pg.wait_for_function("() => [...document.querySelectorAll('.gtitle')].some(e => "
                         "e.textContent.startsWith('Decoder layer 1: Feed-forward network'))")
    assert _click_point(pg, "layers", "d === 'dec.2.self_attn'") == "dec.2.self_attn"
    pg.wait_for_function("() => location.search.includes('block=dec.2.self_attn')")
    titles = "() => [...document.querySelectorAll('.gtitle')].map(e => e.textContent)"
    assert not any(t.startswith("Beam search tree") for t in pg.evaluate(titles))  # drawn when opened
    pg.get_by_text(TREE_SECTION, exact=True).click()
    pg.wait_for_function("() => location.search.includes('open_tree=true')")
    node = _click_point(pg, "kept", "true")
    assert isinstance(node, int)
    pg.get_by_text("Forced:").wait_for()
    pg.mouse.move(700, 30)  # no hover label over the tree
    _viewport_shot(pg, "10_figure_1_tree")
    assert not pg.console_errors()


def test_lens_and_decodings_drawn_when_their_sections_open(server, page):
    """The first draw leaves the logit lens and the greedy / sampled decodes closed; opening a section (a lazy
    expander in a fragment) draws it and puts it in the URL."""
    pg = page
    pg.set_viewport_size({"width": 1366, "height": 768})
    pg.goto(page_url(server, PAGE, "text=I%20have%20no%20time."))
    wait_ready(pg)
    titles = "() => [...document.querySelectorAll('.gtitle')].map(e => e.textContent)"
    assert not any(t.startswith("Logit lens") for t in pg.evaluate(titles))
    pg.get_by_text("What each decoder layer would already predict", exact=True).click()
    pg.wait_for_function("() => location.search.includes('open_lens=true')")
    pg.wait_for_function(f"() => ({titles})().some(t => t.startsWith('Logit lens'))")
    pg.get_by_text("Decode greedily and by sampling, beside the beam", exact=True).click()
    pg.wait_for_function("() => location.search.includes('open_decodings=true')")
    pg.get_by_role("cell", name="sampled", exact=True).wait_for()
    wait_ready(pg)
    assert pg.get_by_role("cell", name="greedy", exact=True).count() == 1
    assert not pg.console_errors()


def test_lesson_step_above_the_fold_normal_and_presenter(server, page):
    """At 1366x768 the lesson's step box sits beside the drawn Figure 1, its text first; in presenter mode (large
    type) the two are stacked, the step's text above the figure."""
    pg = page
    pg.set_viewport_size({"width": 1366, "height": 768})
    box_and_figure = """() => {
      const box = [...document.querySelectorAll('[data-testid=stLayoutWrapper]')]
        .filter(e => e.innerText.trim().startsWith('Step 5 of 14')).pop();  // the bordered box itself
      const fig = document.querySelector('.st-key-architecture');
      if (!box || !fig) return null;
      const a = box.getBoundingClientRect(), b = fig.getBoundingClientRect();
      return [a.left, a.top, a.right, a.bottom, b.left, b.top, b.right, b.bottom];
    }"""
    for query, name in (("step=5", "10_figure_1_lesson"), ("step=5&presenter=true", "presenter_figure_1_lesson")):
        pg.goto(page_url(server, PAGE, query))
        wait_ready(pg)
        pg.wait_for_function(f"() => ({box_and_figure})() !== null")
        bl, bt, br, bb, fl, ft, fr, fb = pg.evaluate(box_and_figure)
        if "presenter" in query:
            assert bb <= ft + 1, "presenter mode: the step's text above the figure"
        else:
            assert br <= fl + 1 and bt < fb and ft < bb, "normal mode: the step's text beside the figure"
        assert bt < 768, "the step's box starts above the fold"
        _viewport_shot(pg, name)
    # the lesson's last step (beam search: "the tree below") opens the tree's section, in the URL too
    pg.goto(page_url(server, PAGE, "step=13&presenter=true"))
    wait_ready(pg)
    pg.get_by_role("button", name="Next →").click()
    pg.wait_for_function("() => location.search.includes('step=14') && location.search.includes('open_tree=true')")
    wait_ready(pg)
    pg.wait_for_function("() => [...document.querySelectorAll('.gtitle')].some(e => "
                         "e.textContent.startsWith('Beam search tree'))")
    pg.locator(".st-key-beam_tree").scroll_into_view_if_needed()
    _viewport_shot(pg, "presenter_figure_1_tree")
    assert not pg.console_errors()


def test_query_key_section_opens_and_its_head_and_all_sentences_go_to_the_url(server, page):
    """An attention block's query-key section: closed on the first draw; opened, it draws the head's queries and keys;
    a click on another head and on the all-sentences toggle redraws it and writes both to the URL."""
    pg = page
    pg.set_viewport_size({"width": 1366, "height": 768})
    pg.goto(page_url(server, PAGE, "text=I%20have%20no%20time.&block=dec.2.cross_attn"))
    wait_ready(pg)
    titles = "() => [...document.querySelectorAll('.gtitle')].map(e => e.textContent)"
    assert not any("queries and keys" in t for t in pg.evaluate(titles))
    pg.get_by_text("Queries and keys of one head of this block in one space (AttentionViz)", exact=True).click()
    pg.wait_for_function("() => location.search.includes('open_qk=true')")
    pg.wait_for_function(f"() => ({titles})().some(t => t.includes('encoder-decoder attention, head 1: queries and keys'))")
    pg.locator("[data-testid=stMain]").get_by_role("radiogroup", name="Head").get_by_role("radio", name="3", exact=True).click()
    pg.wait_for_function("() => new URL(location.href).searchParams.get('qk_head') === '3'")
    pg.wait_for_function(f"() => ({titles})().some(t => t.includes('head 3: queries and keys'))")
    pg.get_by_text("Spearman correlation of").first.wait_for()
    pg.locator("[data-testid=stMain]").get_by_role("radiogroup", name="Head").evaluate(
        "e => e.scrollIntoView({block: 'start'})")
    pg.mouse.move(700, 30)
    _viewport_shot(pg, "10_figure_1_query_key_space")
    pg.locator("[data-testid=stMain]").get_by_text("sentences at once").click()
    pg.wait_for_function("() => new URL(location.href).searchParams.get('qk_all') === 'true'")
    pg.wait_for_function(f"() => ({titles})().some(t => /head 3: queries and keys of \\d+ sentences/.test(t))",
                         timeout=120_000)
    assert not pg.console_errors()
