"""Presenter mode fits a projector: every page at 1366 x 768 with ``?presenter=true`` in a real headless Chromium.

On every page (and every tab of a page, clicked in turn) it measures:

* each heatmap's plot area (plotly's drag rectangle ``.nsewdrag`` of each subplot that holds a heatmap trace): at
  least :data:`MIN_PLOT_WIDTH` px wide. A grid of thumbnails (more than three heatmaps in one chart, or heatmaps
  without tick labels: small multiples read on hover) is measured as a whole;
* every category label of a heatmap's labelled axes is drawn (plotly drops labels that do not fit), except in a
  grid of more than three heatmaps (its edge labels are an overview; hover names every cell);
* no text of a chart (title, axis titles, tick labels, colour bar, legend, annotations, cell numbers) lies outside
  the chart or on another text of the chart, and no axis' labels run into another subplot's plot area;
* no label, caption or button text of the page is cut (``scrollWidth > clientWidth``), nor a placeholder or a select
  box's option (their text measured against the box);
* a metric's number is larger than its label; the typed sentence (text inputs and areas) is at least the
  presenter base size; heatmap tick labels are at least the presenter tick size.

``AIAYN_SCREENSHOTS=1`` saves ``assets/screenshots/presenter_<page>.png`` (the 1366 x 768 viewport) and
``presenter_<page>_full.png`` (the whole page at 1366 px wide).
"""
from __future__ import annotations

import os

import pytest

from aiayn.figures.theme import PRESENTER_FONT_SIZE
from e2e_harness import SCREENSHOTS, page_url, wait_ready

VIEWPORT = {"width": 1366, "height": 768}
MIN_PLOT_WIDTH = 300

#: (page script, query beside presenter=true, screenshot name). Masking with the look-ahead mask removed and Head
#: ablation with a removed head (one head's maps, then every head's grids) show every chart those pages have.
PAGES = [
    ("app.py", "", "overview"),
    ("pages/1_Translate.py", "", "translate"),
    ("pages/2_Attention_Explorer.py", "", "attention_explorer"),
    ("pages/3_Positional_Encoding.py", "", "positional_encoding"),
    ("pages/4_Masking.py", "nomask=true", "masking"),
    ("pages/5_Scaled_Dot_Product.py", "", "scaled_dot_product"),
    ("pages/6_Model_and_Training.py", "", "model_and_training"),
    ("pages/7_Head_Ablation.py", "off=cross.3.8&layer=3&head=8", "head_ablation"),
    ("pages/7_Head_Ablation.py", "off=cross.3.8", "head_ablation_all_heads"),
    ("pages/8_Attention_Rollout.py", "", "attention_rollout"),
    ("pages/9_Compare_Sentences.py", "values=true", "compare_sentences"),
    ("pages/10_Figure_1.py", "open_tree=true&open_lens=true&open_decodings=true", "figure_1_all_sections"),
    ("pages/11_Alignment_and_Attribution.py", "", "alignment_and_attribution"),
]

MEASURE = r"""() => {
  const R = (e) => { const r = e.getBoundingClientRect(); return {x: r.left, y: r.top, r: r.right, b: r.bottom, w: r.width, h: r.height}; };
  const hit = (a, b, t = 2) => a.x + t < b.r && b.x + t < a.r && a.y + t < b.b && b.y + t < a.b;
  const keyOf = (e) => { const k = e.closest('[class*="st-key-"]'); if (!k) return '';
    const c = [...k.classList].find(c => c.startsWith('st-key-')); return c ? c.slice(7) : ''; };
  const subAxes = (s) => s.match(/^(x\d*)(y\d*)$/).slice(1);
  const px = (e) => parseFloat(getComputedStyle(e).fontSize);
  const charts = [];
  document.querySelectorAll('[data-testid=stPlotlyChart]').forEach((el, ci) => {
    const gd = el.querySelector('.js-plotly-plot');
    if (!gd || !gd._fullLayout || !gd.querySelector('.main-svg')) return;
    const fl = gd._fullLayout, svg = R(gd.querySelector('.main-svg'));
    if (svg.w === 0) return;  // in a tab that is not shown
    const out = {name: keyOf(el) || `chart ${ci}`, heatmaps: [], problems: [], tick_px: []};
    const areas = {};
    gd.querySelectorAll('.draglayer > g').forEach(g => {
      const r = g.querySelector('rect.nsewdrag'); if (r) areas[g.getAttribute('class').split(' ')[0]] = R(r); });
    const hm = new Set();
    (gd._fullData || []).forEach(t => { if (t.type === 'heatmap' && t.visible !== false) hm.add((t.xaxis || 'x') + (t.yaxis || 'y')); });
    let labelled = 0;
    hm.forEach(s => {
      if (!areas[s]) return;
      out.heatmaps.push(areas[s]);
      for (const a of subAxes(s)) {
        const ax = fl[a[0] + 'axis' + a.slice(1)];
        if (!ax || !ax.showticklabels) continue;
        labelled += 1;
        const shown = gd.querySelectorAll(`g.${a}tick text`).length;
        if (ax.type === 'category' && ax._categories && shown < ax._categories.length && hm.size <= 3)
          out.problems.push(`axis ${a} shows ${shown} of ${ax._categories.length} labels`);
      }
    });
    out.grid = out.heatmaps.length > 3 || (out.heatmaps.length > 0 && labelled === 0);
    const items = [];
    const add = (sel, group, own) => gd.querySelectorAll(sel).forEach(t => {
      const txt = (t.textContent || '').trim(); if (!txt) return;
      const r = R(t); if (r.w === 0 || r.h === 0) return;
      items.push({txt: txt.slice(0, 40), r, group: group(t), own: own(t), px: px(t)});
    });
    const none = () => null;
    add('.g-gtitle text, .gtitle', () => 'title', () => 'title');
    add('g[class*="-xtitle"] text, g[class*="-ytitle"] text', t => 'axis title ' + t.closest('g').getAttribute('class'), none);
    add('.xaxislayer-above text, .yaxislayer-above text', t => 'tick ' + t.closest('g[class*="tick"]').getAttribute('class').split(' ')[0],
        t => t.closest('g[class*="tick"]').getAttribute('class').split(' ')[0].replace('tick', ''));
    add('.annotation-text', t => 'annotation ' + (t.closest('.annotation') || t).getAttribute('data-index'), () => 'annotation');
    add('.colorbar text', () => 'colour bar', none);
    add('.legendtext', () => 'legend', none);
    add('.heatmaplayer text', t => 'cell', t => { const s = t.closest('g.subplot'); return s ? 'cell ' + s.getAttribute('class').split(' ').pop() : null; });
    for (const it of items) {
      if (it.r.x < svg.x - 1 || it.r.r > svg.r + 1 || it.r.y < svg.y - 1 || it.r.b > svg.b + 1)
        out.problems.push(`${it.group} "${it.txt}" cut at the chart's edge`);
      if (it.group.startsWith('tick') && hm.size) out.tick_px.push(it.px);
    }
    for (let i = 0; i < items.length; i++) {
      const a = items[i];
      for (let j = i + 1; j < items.length; j++) {
        const b = items[j];
        if (a.group === b.group) continue;
        if (hit(a.r, b.r)) out.problems.push(`${a.group} "${a.txt}" overlaps ${b.group} "${b.txt}"`);
      }
      if (a.own === 'annotation' || a.own === 'title') continue;  // subplot titles and marks drawn on a map
      for (const [s, area] of Object.entries(areas)) {
        if (a.own && (a.own === 'cell ' + s || subAxes(s).includes(a.own))) continue;
        if (hit(a.r, area)) out.problems.push(`${a.group} "${a.txt}" runs into the plot area ${s}`);
      }
    }
    if (el.scrollWidth > el.clientWidth + 1) out.problems.push(`wider than its column (${el.scrollWidth} > ${el.clientWidth})`);
    out.heatmaps = out.heatmaps.map(a => ({x: a.x, r: a.r, w: a.w}));
    charts.push(out);
  });
  const cut = [];
  const sel = '[data-testid=stWidgetLabel] *, [data-testid=stMetric] *, [data-testid=stMarkdownContainer] *, ' +
    '[data-testid=stCaptionContainer] *, [data-testid=stButton] *, [data-testid=stButtonGroup] *, ' +
    '[data-baseweb=select] *, [role=tab] *, h1, h2, h3, h4, h5, [data-testid=stPageLink] *';
  document.querySelectorAll(sel).forEach(e => {
    if (!e.clientWidth || !(e.textContent || '').trim() || e.closest('.katex') || e.closest('[data-testid=stPlotlyChart]')) return;
    const cs = getComputedStyle(e);
    if (cs.overflowX === 'auto' || cs.overflowX === 'scroll') return;
    if (e.scrollWidth > e.clientWidth + 1) cut.push(`"${e.textContent.trim().slice(0, 50)}" [${keyOf(e)}] ${e.scrollWidth} > ${e.clientWidth} px`);
  });
  // a placeholder, or a select box's chosen option, wider than its box (an input's text is clipped without a trace)
  const ctx2d = document.createElement('canvas').getContext('2d');
  document.querySelectorAll('[data-testid=stMain] input').forEach(e => {
    const text = e.value && e.closest('[data-testid=stSelectbox]') ? e.value : (!e.value ? e.placeholder : '');
    if (!text || !e.clientWidth) return;
    const cs = getComputedStyle(e);
    ctx2d.font = `${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
    const room = e.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    if (ctx2d.measureText(text).width > room + 1) cut.push(`"${text.slice(0, 50)}" [${keyOf(e)}] wider than its box (${room.toFixed(0)} px)`);
  });
  // a widget row wider than the main column (a segmented control's buttons past its column)
  document.querySelectorAll('[data-testid=stMain] [data-testid=stButtonGroup]').forEach(e => {
    const col = e.closest('[data-testid=stColumn]') || e.closest('[data-testid=stVerticalBlock]');
    const last = [...e.querySelectorAll('button')].pop();
    if (col && last && R(last).r > R(col).r + 1) cut.push(`buttons of [${keyOf(e)}] end past their column`);
  });
  const metrics = [...document.querySelectorAll('[data-testid=stMetric]')].map(m => {
    // the element that holds the text (Streamlit writes both as markdown: a paragraph inside containers)
    const leaf = (sel) => { const box = m.querySelector(sel); if (!box) return null;
      return [...box.querySelectorAll('*')].filter(e => !e.children.length && e.textContent.trim())[0] || box; };
    const l = leaf('[data-testid=stMetricLabel]'), v = leaf('[data-testid=stMetricValue]');
    return {label: l ? l.textContent.trim().slice(0, 40) : '', label_px: l ? px(l) : 0, value_px: v ? px(v) : 0};
  });
  const inputs = [...document.querySelectorAll('[data-testid=stMain] [data-testid=stTextInput] input, [data-testid=stMain] textarea')]
    .filter(e => e.clientWidth).map(e => ({key: keyOf(e), px: px(e)}));
  return {charts, cut, metrics, inputs};
}"""


def problems_of(m: dict) -> list[str]:
    """Every layout problem in one :data:`MEASURE` result, as readable lines."""
    out: list[str] = []
    for c in m["charts"]:
        where = f"chart {c['name']}"
        out += [f"{where}: {p}" for p in c["problems"]]
        if c["heatmaps"]:
            widths = ([max(a["r"] for a in c["heatmaps"]) - min(a["x"] for a in c["heatmaps"])] if c["grid"]
                      else [a["w"] for a in c["heatmaps"]])
            if min(widths) < MIN_PLOT_WIDTH:
                out.append(f"{where}: heatmap plot area {min(widths):.0f} px wide (< {MIN_PLOT_WIDTH})")
        if c["tick_px"] and min(c["tick_px"]) < PRESENTER_FONT_SIZE - 2:
            out.append(f"{where}: heatmap tick labels {min(c['tick_px']):.1f} px (< {PRESENTER_FONT_SIZE - 2})")
    out += [f"cut text: {t}" for t in m["cut"]]
    out += [f"metric {x['label']!r}: number {x['value_px']:.0f} px not larger than its label {x['label_px']:.0f} px"
            for x in m["metrics"] if not x["value_px"] > x["label_px"]]
    out += [f"text box [{x['key']}]: {x['px']:.1f} px type (< {PRESENTER_FONT_SIZE})" for x in m["inputs"]
            if x["px"] < PRESENTER_FONT_SIZE]
    return out


_SHAPE = """() => [document.querySelectorAll('[data-testid=stPlotlyChart] .main-svg').length,
  document.querySelector('[data-testid=stMain]').scrollHeight,
  !!document.querySelector('[data-testid=stApp][data-test-script-state=notRunning]')]"""


def _settle(pg, timeout_s: float = 120) -> None:
    """Wait for the script run, then until the page's charts and height have not changed for 2 s (a loaded machine
    draws a long page's charts for seconds after the run; plotly resizes them to their columns)."""
    pg.wait_for_selector("h1, [data-testid=stException]", timeout=timeout_s * 1000)
    if pg.locator("[data-testid=stException]").count() == 0:
        wait_ready(pg, timeout=timeout_s * 1000)
    last, same = None, 0
    for _ in range(int(timeout_s / 0.5)):
        shape = pg.evaluate(_SHAPE)
        same = same + 1 if shape == last and shape[2] else 0
        if same >= 4:
            return
        last = shape
        pg.wait_for_timeout(500)


def _tabs(pg):
    return pg.locator("[data-testid=stMain] [role=tab]")


def _palette(path) -> None:
    """Rewrite a PNG with a 256-colour palette (a whole page: about a third of the bytes; Pillow comes with streamlit)."""
    from PIL import Image

    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE)
    small.save(path, optimize=True)


def _save_screenshots(pg, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    pg.evaluate("() => document.querySelector('[data-testid=stMain]').scrollTo(0, 0)")
    pg.screenshot(path=str(SCREENSHOTS / f"presenter_{name}.png"))
    # Streamlit scrolls inside its main container: a viewport as tall as the page captures all of it
    height = pg.evaluate("() => document.querySelector('[data-testid=stMain]').scrollHeight")
    pg.set_viewport_size({"width": VIEWPORT["width"], "height": int(min(max(height, VIEWPORT["height"]), 12000))})
    pg.wait_for_timeout(1500)
    full = SCREENSHOTS / f"presenter_{name}_full.png"
    pg.screenshot(path=str(full))
    _palette(full)
    pg.set_viewport_size(VIEWPORT)
    pg.wait_for_timeout(1000)


@pytest.mark.parametrize("script, query, name", PAGES, ids=[n for _, _, n in PAGES])
def test_presenter_mode_fits_a_projector(server, browser, script, query, name):
    context = browser.new_context(viewport=VIEWPORT)
    try:
        pg = context.new_page()
        pg.set_default_timeout(120_000)
        pg.goto(page_url(server, script, "&".join(q for q in (query, "presenter=true") if q)))
        _settle(pg)
        assert pg.locator("[data-testid=stException]").count() == 0, pg.locator("[data-testid=stException]").first.inner_text()
        found = [f"(first view) {p}" for p in problems_of(pg.evaluate(MEASURE))]
        if os.environ.get("AIAYN_SCREENSHOTS") == "1":
            _save_screenshots(pg, name)
        for i in range(1, _tabs(pg).count()):  # the first tab was measured above
            tab = _tabs(pg).nth(i)
            label = tab.inner_text().strip()
            tab.click()
            _settle(pg)
            found += [f"(tab {label}) {p}" for p in problems_of(pg.evaluate(MEASURE))]
        assert not found, "\n".join(found)
    finally:
        context.close()
