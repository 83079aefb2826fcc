"""The sentences the app puts in front of a class (the explorer's curated examples, the Masking lab's default, the
Compare lab's pair: ``aiayn.examples.demo_sentences``) are translated correctly by the shipped checkpoints, decoded as
the app decodes them (beam 4, length penalty alpha 0.6).

"Correctly" means one of the translations written by hand for the sentence (its reference or ``ALSO_CORRECT``), never
the model's own output. The sentences a shipped model still gets wrong are listed in ``STILL_WRONG`` with what it
writes; they are strict xfails, so a better checkpoint that gets one right fails this test until the line is removed,
and a checkpoint that gets a new one wrong fails it too.
"""
from __future__ import annotations

import pytest

from aiayn.examples import ALSO_CORRECT, EXAMPLES, demo_sentences
from aiayn.translator import CHECKPOINTS_DIR

DIRECTIONS = ("en-de", "de-en")
#: (direction, source) -> what the shipped model writes instead (en-de shipped in session 37, lifetime 55,115 steps,
#: which writes "Guten Morgen!" as the session-32 one did; de-en of session 14, 41,929 steps)
STILL_WRONG = {
    ("en-de", "The cat sat on the mat."): "Die Katze saß auf der Mathe.",
    ("en-de", "I like to read books in the garden."): "Ich möchte Bücher im Garten lesen.",
    ("de-en", "Ich lese gern Bücher im Garten."): "I like books in the garden.",
}


def _cases(still_wrong: dict[tuple[str, str], str], how: str = ""):
    """Every demo sentence of both directions, those in ``still_wrong`` as strict xfails."""
    for d in DIRECTIONS:
        for src, accepted in demo_sentences(d):
            marks = []
            if (d, src) in still_wrong:
                marks = [pytest.mark.xfail(strict=True, reason=f"{how}the shipped {d} writes {still_wrong[d, src]!r}")]
            yield pytest.param(d, src, accepted, marks=marks, id=f"{d}:{src}")


@pytest.fixture(scope="module")
def translators():
    from aiayn import Translator

    out = {}
    for d in DIRECTIONS:
        path = CHECKPOINTS_DIR / d
        if not (path / "model.safetensors").is_file():
            pytest.skip(f"shipped checkpoint {path} does not exist (trained separately)")
        out[d] = Translator.load(path, device="cpu")
    return out


@pytest.mark.parametrize("direction, source, accepted", list(_cases(STILL_WRONG)))
def test_demo_sentence_translates_correctly(translators, direction, source, accepted):
    hyp = translators[direction].translate(source, beam_size=4, length_penalty=0.6).text
    assert hyp in accepted, f"{direction} {source!r} -> {hyp!r}; right would be one of {accepted}"


#: (direction, source) -> what the shipped model writes with its n-best list reranked by the reverse model
#: (aiayn.reranking, the default weight): strict xfails as above. With the session-32 en-de the reverse model lifted
#: "Die Katze saß auf der Matte." (second of its 4-best) to the top; with the session-37 en-de it lifts "Die Katze saß
#: auf dem Mathe." instead. It also puts "Gute Morgen!" over the beam's right "Guten Morgen!" and "dass" over the right
#: relative pronoun "das"; the garden sentences have no right hypothesis in the beam.
STILL_WRONG_RERANKED = {
    ("en-de", "The cat sat on the mat."): "Die Katze saß auf dem Mathe.",
    ("en-de", "Good morning!"): "Gute Morgen!",
    ("en-de", "He reads the book that she gave him."): "Er liest das Buch, dass sie ihm gegeben hat.",
    ("en-de", "I like to read books in the garden."): "Ich möchte Bücher im Garten lesen.",
    ("de-en", "Ich lese gern Bücher im Garten."): "I like books in the garden.",
}


@pytest.mark.parametrize("direction, source, accepted", list(_cases(STILL_WRONG_RERANKED, "reranked, ")))
def test_demo_sentence_reranked_by_the_reverse_model(translators, direction, source, accepted):
    """The Translate page's "Rerank with the reverse model" switch on the demo sentences: right where the beam is
    right (reranking must not break one); a sentence the beam gets wrong may come right from the n-best list."""
    from aiayn.reranking import DEFAULT_WEIGHT, rerank

    reverse = translators["de-en" if direction == "en-de" else "en-de"]
    t = translators[direction].translate(source, beam_size=4, length_penalty=0.6, n_best=4, return_attention=False)
    hyp = rerank(source, t.nbest, reverse, DEFAULT_WEIGHT)[0].text
    assert hyp in accepted, f"{direction} {source!r} -> reranked {hyp!r}; right would be one of {accepted}"


def test_every_demo_sentence_is_covered():
    """The list covers every curated example and both labs' defaults, each with its reference first, and
    ``ALSO_CORRECT`` / ``STILL_WRONG`` name no sentence the app does not show (a stale entry would hide nothing)."""
    for d in DIRECTIONS:
        demo = dict(demo_sentences(d))
        for src, ref, _ in EXAMPLES[d]:
            assert demo[src][0] == ref
        assert set(ALSO_CORRECT[d]) <= set(demo), set(ALSO_CORRECT[d]) - set(demo)
        for (wd, src), wrong in [*STILL_WRONG.items(), *STILL_WRONG_RERANKED.items()]:
            if wd == d:
                assert src in demo and wrong not in demo[src]
    assert len(dict(demo_sentences("en-de"))) == len(EXAMPLES["en-de"]) + 2  # the Masking default and "no money"


def test_demo_sentences_rejects_unknown_direction():
    with pytest.raises(ValueError, match="unknown direction"):
        demo_sentences("fr-de")
