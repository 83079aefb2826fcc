"""Every page with a model whose decoder starts with a domain tag (``aiayn train --domain-tags``) served as en-de
(AppTest): no page breaks on a start id past the vocabulary (the Masking lab's greedy loop did), and the pages that
show the decoder's input name its first position ``<general>``, the tag the model was fed, not ``<s>``."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

PAGES = sorted(str(p) for p in Path(__file__).resolve().parents[1].joinpath("pages").glob("*.py"))


@pytest.fixture(scope="module")
def tagged_folder(tmp_path_factory, tiny_spm, tiny_checkpoints) -> Path:
    from tiny_models import make_tiny_checkpoint

    root = tmp_path_factory.mktemp("tagged")
    make_tiny_checkpoint(root / "en-de", tiny_spm, "en-de", seed=4, domain_tags=["general", "software"],
                         domain="general")
    shutil.copytree(tiny_checkpoints / "de-en", root / "de-en")
    return root


@pytest.fixture()
def served(tagged_folder, serve):
    return serve(tagged_folder)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: Path(p).stem)
def test_every_page_runs_with_a_tagged_model(served, page):
    from app_pages import open_page

    at = open_page(str(Path(page).relative_to(Path(page).parents[1])), {"direction": "en-de"})
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


def test_the_explorer_names_the_decoders_first_input_by_its_tag(served):
    from app_pages import charts, open_page

    at = open_page("pages/2_Attention_Explorer.py", {"direction": "en-de", "text": "Good morning"})
    assert not at.exception, at.exception
    import html

    labels = [html.unescape(str(v)) for fig in charts(at).values() for trace in fig.get("data", [])
              for v in list(trace.get("y") or []) + list(trace.get("x") or [])]
    assert "0:<general>" in {v.split("→")[0] for v in labels}  # the query axis: position 0 fed the tag
    assert not any(v.split(":", 1)[-1].startswith("<s>") for v in labels)


def test_the_masking_lab_decodes_a_tagged_model_without_its_mask(served):
    """The look-ahead lab's greedy pair (with and without the mask) runs from the tag: it banned the decoder's start
    id in the logits, which for a tag is past their end (IndexError)."""
    from app_pages import open_page

    at = open_page("pages/4_Masking.py", {"direction": "en-de", "nomask": "true"})
    assert not at.exception, at.exception
    tables = [t.value for t in at.dataframe if "greedy output" in t.value.columns]
    assert len(tables) == 1 and len(tables[0]) == 2
