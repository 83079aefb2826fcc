"""End-to-end: the "Alignment and attribution" page in Chromium. A deep link (sentence, layer, head, attribution
method) restores that view - the widgets show the values and the charts draw the chosen head - changing the head
writes it to the URL, and the downloads are there. AppTest sets query parameters directly; only a browser shows
that the bound widgets read a real URL and write it back."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from e2e_harness import REPO, page_url, wait_ready

PAGE = "pages/11_Alignment_and_Attribution.py"
SHOWN_MS = 15_000
#: a view unlike the page's default (sentence 0, the best head, gradient x input)
DEEP = {"sent": "3", "layer": "1", "head": "3", "method": "integrated_gradients"}


@pytest.fixture(scope="module")
def e2e_checkpoints(tmp_path_factory, request) -> Path:
    """The shipped checkpoints when they carry alignment.json (the page needs it), else tiny ones given one."""
    if all((REPO / "checkpoints" / d / "alignment.json").is_file() for d in ("en-de", "de-en")):
        return REPO / "checkpoints"
    from aiayn import Translator
    from aiayn.alignment_eval import ALIGN_FILE, align_checkpoint

    tiny = request.getfixturevalue("tiny_checkpoints")
    root = tmp_path_factory.mktemp("aligned")
    for d in ("en-de", "de-en"):
        shutil.copytree(tiny / d, root / d)
        tr = Translator.load(root / d, device="cpu")
        (root / d / ALIGN_FILE).write_text(json.dumps(align_checkpoint(tr)), encoding="utf-8")
    return root


def _default_layer(checkpoints: Path) -> int:
    """The layer (from 1) the page opens on for en-de: its best head by the default maps and reading."""
    readings = json.loads((checkpoints / "en-de" / "alignment.json").read_text(encoding="utf-8"))["weights"]["readings"]
    return (readings["source_shift"] if "source_shift" in readings else next(iter(readings.values())))["best_head"]["layer"] + 1


def _number(pg, label: str):
    return pg.locator("[data-testid=stMain]").get_by_label(label, exact=True)


def _picked(pg, control: str) -> str:
    group = pg.locator("[data-testid=stMain]").get_by_role("radiogroup", name=control).first
    return group.get_by_role("radio", checked=True).first.inner_text().strip()


def _titles(pg) -> list[str]:
    """The text of every plotly chart title and subplot title on the page."""
    return pg.locator("[data-testid=stMain] .js-plotly-plot").locator(".gtitle, .annotation-text").evaluate_all(
        "els => els.map(e => e.textContent)")  # SVG text: no innerText


def _wait_title(pg, pattern: str) -> None:
    pg.wait_for_function("(p) => [...document.querySelectorAll('[data-testid=stMain] .js-plotly-plot .gtitle, "
                         "[data-testid=stMain] .js-plotly-plot .annotation-text')].some(e => new RegExp(p)"
                         ".test(e.textContent))", arg=pattern, timeout=120_000)


def test_a_deep_link_restores_the_view_and_the_head_goes_to_the_url(fresh_server, page, e2e_checkpoints):
    from playwright.sync_api import expect

    query = "&".join(f"{k}={v}" for k, v in DEEP.items())
    page.goto(page_url(fresh_server, PAGE, query))
    wait_ready(page, timeout=240_000)  # integrated gradients of one sentence: 64 steps on the CPU
    assert page.locator("[data-testid=stException]").count() == 0
    expect(_number(page, "Gold sentence")).to_have_value("3", timeout=SHOWN_MS)
    expect(_number(page, "Layer")).to_have_value("1", timeout=SHOWN_MS)
    expect(_number(page, "Head")).to_have_value("3", timeout=SHOWN_MS)
    assert _picked(page, "Attribution") == "integrated_gradients"
    _wait_title(page, "^Layer 1 head 3 ")  # the gold-link map draws the linked head...
    titles = " | ".join(_titles(page))
    assert "layer 1 head 3 (" in titles, titles  # ...and so does the attention beside the attribution
    assert "|integrated gradients|" in titles, titles
    expect(page.get_by_text(re.compile(r"Completeness \(64 steps\)"))).to_be_visible(timeout=SHOWN_MS)
    assert page.locator("[data-testid=stDownloadButton]").count() >= 4  # AER and this sentence's agreement

    head = _number(page, "Head")
    head.fill("5")
    head.press("Enter")
    page.wait_for_function("() => new URL(location.href).searchParams.get('head') === '5'", timeout=60_000)
    wait_ready(page, timeout=240_000)
    _wait_title(page, "^Layer 1 head 5 ")
    q = parse_qs(urlparse(page.url).query)
    # a bound setting at its default leaves the URL: the layer does when layer 1 holds the served model's best head
    layer = q.get("layer", [str(_default_layer(e2e_checkpoints))])
    assert q["head"] == ["5"] and layer == ["1"] and q["sent"] == ["3"], page.url
    assert q["method"] == ["integrated_gradients"], page.url
    assert "layer 1 head 5 (" in " | ".join(_titles(page))
    assert not page.console_errors(), page.console_errors()


def test_contrast_section_explains_a_step_and_takes_a_typed_piece(fresh_server, page, e2e_checkpoints):
    """The last section on the student's own sentence: the chart asks why the least certain step's piece and not the
    most probable other one; a typed word redraws it against that word's piece."""
    import os

    from e2e_harness import SCREENSHOTS

    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(page_url(fresh_server, PAGE, "ctext=The%20cat%20sat%20on%20the%20mat."))
    wait_ready(page, timeout=240_000)
    assert page.locator("[data-testid=stException]").count() == 0
    _wait_title(page, r"^Why .* at step \d+: log-odds")
    first = [t for t in _titles(page) if t.startswith("Why ")]
    page.get_by_text("Why this piece and not that one?").scroll_into_view_if_needed()
    box = page.locator("[data-testid=stMain]").get_by_role("textbox", name=re.compile(r"or type a piece"))
    # "atte", the rest of "Matte" as the shipped vocabulary cuts it; where the chart already asks about it (the
    # session-37 en-de is least sure of "athe", with "atte" next), a word-initial piece instead, so the chart must move
    word, shown = (("der", (" not ▁der ", " not ▁d")) if any(" not atte " in t for t in first)
                   else ("atte", (" not atte ", " not ▁at")))
    box.fill(word)
    box.press("Enter")
    page.wait_for_function("(old) => [...document.querySelectorAll('[data-testid=stMain] .js-plotly-plot .gtitle')]"
                           ".some(e => e.textContent.startsWith('Why ') && e.textContent !== old)", arg=first[0],
                           timeout=120_000)
    assert any(any(s in t for s in shown) for t in _titles(page) if t.startswith("Why ")), _titles(page)
    if os.environ.get("AIAYN_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.get_by_text("Beam search output:").first.evaluate("e => e.scrollIntoView({block: 'start'})")
        page.mouse.move(700, 30)
        page.wait_for_timeout(800)
        page.screenshot(path=str(SCREENSHOTS / "11_alignment_contrast.png"))
    assert not page.console_errors(), page.console_errors()
