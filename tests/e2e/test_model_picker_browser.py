"""End-to-end: the sidebar's model picker in Chromium. With a second en-de checkpoint beside the shipped ones (a tiny
Marian model imported with ``aiayn import-marian`` where ``transformers`` is installed, else a tiny model trained
here), the picker lists every model of the direction with its origin, a choice goes into the URL (``?model=``), a
link copied into another browser context (another visitor: no session) restores it, and the Translate page then
translates with that model. AppTest sets the URL by hand; only a browser shows the URL being written and read."""
from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from e2e_harness import REPO, page_url, wait_ready

SHOWN_MS = 15_000
TEXT = "The cat sat on the mat."  # the tiny Marian model says something to it (to "I have no time." nothing)
SECOND: list[str] = []  # the second model's name, once written


def _second_model(root: Path, request) -> str:
    """Write a second en-de checkpoint into ``root``; its directory name."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        from tiny_models import make_tiny_checkpoint

        make_tiny_checkpoint(root / "tiny-en-de", request.getfixturevalue("tiny_spm"), "en-de", seed=7)
        return "tiny-en-de"
    from marian_fixture import write_marian

    from aiayn.import_marian import cli_main

    source = write_marian(root.parent / "marian-source", request.getfixturevalue("fixture_pairs"))
    assert cli_main([str(source), "--out", str(root / "opus-mt-tiny-en-de"), "--dtype", "float32",
                     "--no-progress"]) == 0
    return "opus-mt-tiny-en-de"


@pytest.fixture(scope="module")
def e2e_checkpoints(tmp_path_factory, request) -> Path:
    """A checkpoints folder: the shipped (else tiny) en-de and de-en as symlinks, and a second en-de model."""
    shipped = all((REPO / "checkpoints" / d / "model.safetensors").is_file() for d in ("en-de", "de-en"))
    base = REPO / "checkpoints" if shipped else request.getfixturevalue("tiny_checkpoints")
    root = tmp_path_factory.mktemp("picker") / "checkpoints"
    root.mkdir()
    for d in ("en-de", "de-en"):
        os.symlink(base / d, root / d, target_is_directory=True)
    SECOND[:] = [_second_model(root, request)]
    return root


def _expected(root: Path, name: str) -> tuple[str, str]:
    """(what the model translates TEXT to with the page's defaults, its origin as the catalogue says)."""
    from aiayn import Translator
    from aiayn.catalog import list_checkpoints

    tr = Translator.load(root / name, device="cpu")
    text = tr.translate(TEXT, beam_size=4, length_penalty=0.6, n_best=4).text or "∅ (empty output)"  # as the page
    origin = next(e.origin for e in list_checkpoints(root) if e.name == name)
    return text, origin


def _picker(pg):
    return pg.locator("[data-testid=stSidebar]").get_by_role("radiogroup", name="Model")


def _chosen(pg) -> str:
    """The model the picker shows as chosen (a radio's accessible name: its name, then its caption)."""
    names = [n for n in ("en-de", SECOND[0]) if _picker(pg).get_by_role("radio", name=re.compile(
        f"^{re.escape(n)}")).is_checked()]
    assert len(names) == 1, names
    return names[0]


def _translation(pg) -> str:
    heading = pg.locator("[data-testid=stMain] h4", has_text="Translation")
    expect_visible(heading)
    return pg.locator("[data-testid=stMain] h3").first.inner_text().strip()


def expect_visible(locator) -> None:
    from playwright.sync_api import expect

    expect(locator).to_be_visible(timeout=SHOWN_MS)


def test_the_picked_model_is_in_the_url_a_copied_link_and_the_translation(e2e_checkpoints, fresh_server, browser):
    from aiayn.catalog import list_checkpoints, models_for

    names = [e.name for e in models_for(list_checkpoints(e2e_checkpoints), "en-de")]
    second = names[1]
    shipped_text, _ = _expected(e2e_checkpoints, "en-de")
    second_text, origin = _expected(e2e_checkpoints, second)
    assert names == ["en-de", second] and second_text != shipped_text  # else the test could not tell them apart

    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    pg = ctx.new_page()
    pg.goto(page_url(fresh_server, "pages/1_Translate.py", "direction=en-de&" + urlencode({"text": TEXT})))
    wait_ready(pg, timeout=180_000)
    options = _picker(pg).get_by_role("radio")
    labels = [t.strip() for t in _picker(pg).inner_text().splitlines() if t.strip()]
    # each option: its name, then its caption (size, origin)
    assert options.count() == 2 and labels[0::2] == ["en-de", second], labels
    assert labels[1].endswith("trained here") and labels[3].endswith(origin), labels
    assert _chosen(pg) == "en-de" and "model" not in parse_qs(urlparse(pg.url).query)
    assert _translation(pg) == shipped_text

    _picker(pg).get_by_text(second, exact=True).click()
    pg.wait_for_function(f"() => new URL(location.href).searchParams.get('model') === '{second}'", timeout=60_000)
    wait_ready(pg, timeout=180_000)
    assert _chosen(pg) == second
    pg.wait_for_function("(t) => { const h = document.querySelector('[data-testid=stMain] h3'); "
                         "return h && h.innerText.trim() === t; }", arg=second_text, timeout=120_000)
    copied = pg.url
    ctx.close()

    fresh = browser.new_context(viewport={"width": 1366, "height": 768})  # another visitor: no session
    other = fresh.new_page()
    other.goto(copied)
    wait_ready(other, timeout=180_000)
    assert parse_qs(urlparse(other.url).query).get("model") == [second], other.url
    assert _chosen(other) == second and origin in _picker(other).inner_text()
    assert _translation(other) == second_text, copied
    assert other.locator("[data-testid=stException]").count() == 0
    fresh.close()
    assert re.search(r"[?&]model=", copied)
