"""End-to-end: from a forced beam-tree node of the Figure 1 page, the link "See every head's attention for this output"
opens the attention explorer on that forced output (headless Chromium at 1366x768; harness: conftest.py): the URL
carries the sentence, the prefix and the direction, the box shows the prefix, the heatmap's target axis starts with
its pieces, and the Remove button brings back the model's own output."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse

from e2e_harness import SCREENSHOTS, page_url, wait_ready
from test_figure1_browser import _click_point

FIGURE1 = "pages/10_Figure_1.py"
TEXT = "Mein Hund schläft im Garten."  # not the default sentence (the explorer leaves that out of its URL)
LINK = "See every head's attention for this output in the Attention Explorer"

#: the query labels (y axis) of the explorer's one-head heatmap
_HEAD_Y = """() => {
  const gd = [...document.querySelectorAll('.st-key-head_view .js-plotly-plot')][0];
  return gd && gd.data ? gd.data[0].y : null;
}"""


def _save(pg, name: str) -> None:
    """The view as the student sees it at 1366x768 (above the fold), when AIAYN_SCREENSHOTS=1."""
    if os.environ.get("AIAYN_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        pg.wait_for_timeout(800)
        pg.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def test_forced_node_opens_the_explorer_on_the_forced_output(server, page, e2e_checkpoints):
    from aiayn import Translator

    pg = page
    pg.set_viewport_size({"width": 1366, "height": 768})
    pg.goto(page_url(server, FIGURE1, f"direction=de-en&text={quote(TEXT)}&open_tree=true"))  # the tree drawn
    wait_ready(pg)
    node = _click_point(pg, "kept", "true")
    assert isinstance(node, int)
    pg.get_by_text("Forced:").wait_for()
    pg.get_by_role("link", name=LINK).click()
    pg.wait_for_function("() => location.pathname.endsWith('/Attention_Explorer') && location.search.includes('prefix=')")
    wait_ready(pg)
    query = parse_qs(urlparse(pg.url).query)
    assert pg.get_by_label("Sentence (DE)").input_value() == TEXT
    assert query["text"] == [TEXT] and "sentence" not in query and query["direction"] == ["de-en"], query
    prefix = query["prefix"][0]
    assert pg.get_by_role("textbox", name="Forced start of the output (EN, optional)").input_value() == prefix
    pg.get_by_text("forced prefix:").first.wait_for()

    tr = Translator.load(e2e_checkpoints / "de-en", device="cpu")
    pieces = tr.pieces(tr.tokenizer.encode(prefix))
    pg.wait_for_function(f"() => ({_HEAD_Y})() !== null")
    y = pg.evaluate(_HEAD_Y)
    fed = [tr.cfg.decoder_start_id] + tr.tokenizer.encode(prefix)
    want = [f"{i}:{tr.tokenizer.id_to_piece(a)}→{p}" for i, (a, p) in enumerate(zip(fed, pieces))]
    assert [label.replace("&lt;", "<").replace("&gt;", ">") for label in y[: len(pieces)]] == want
    _save(pg, "2_explorer_forced_prefix")
    with pg.expect_download() as dl:  # the downloaded maps are the forced output's, and say so
        pg.get_by_role("button", name=re.compile("JSON")).last.click()
    got = json.loads(Path(dl.value.path()).read_text())
    assert dl.value.suggested_filename.endswith("_forced_prefix.json"), dl.value.suggested_filename
    assert got["meta"]["prefix"] == pieces and got["output_tokens"][0][: len(pieces)] == pieces
    assert not pg.console_errors()

    pg.goto(pg.url + "&presenter=true")  # presenter mode: large type, the same forced output
    wait_ready(pg)
    pg.get_by_text("forced prefix:").first.wait_for()
    _save(pg, "presenter_explorer_forced_prefix")
    pg.get_by_role("button", name="Remove").click()
    pg.wait_for_function("() => !location.search.includes('prefix=')")
    wait_ready(pg)
    assert pg.get_by_text("forced prefix:").count() == 0
