"""A forced start of the output in the attention explorer (``?prefix=``, prefix-constrained decoding) and the
Figure 1 page's link to it: the maps are those of the forced output, recomputed here by an independent
teacher-forced pass (tiny random checkpoints)."""
from __future__ import annotations

from urllib.parse import parse_qs

import numpy as np
import pytest
import torch

from app_pages import arr, charts, open_page

PAGE = "pages/2_Attention_Explorer.py"
FIGURE1 = "pages/10_Figure_1.py"
SENT = "I have no time."
PREFIX = "Keine Zeit habe"


def esc(label: str) -> str:
    return label.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@pytest.fixture(scope="module")
def forced(tiny_checkpoints):
    """The forced output as the page must show it and its maps by a teacher-forced pass written here (the model's
    forward with return_attention on the decoder input built by hand), independent of beam search's stitching."""
    from aiayn import Translator

    tr = Translator.load(tiny_checkpoints / "en-de", device="cpu")
    t = tr.translate(SENT, prefix=PREFIX, beam_size=4, length_penalty=0.6, n_best=4)
    dec = torch.tensor([[tr.cfg.decoder_start_id] + t.output_ids[:-1]])
    with torch.inference_mode():
        logits, maps = tr.model(torch.tensor([t.src_ids]), dec, return_attention=True)
    return tr, t, maps, torch.softmax(logits[0].float(), -1)


def test_explain_with_a_prefix_gives_the_maps_of_the_forced_output(forced):
    from aiayn.analysis import explain
    from aiayn.serving import DecodeQueue

    tr, t, maps, probs = forced
    pieces = tr.pieces(tr.tokenizer.encode(PREFIX))
    own = tr.translate(SENT)
    assert own.output_tokens[: len(pieces)] != pieces  # forcing changes the output (else this test proves little)
    for got in (explain(tr, SENT, prefix=PREFIX), DecodeQueue(tr).explain(SENT, prefix=PREFIX)):
        assert got.output_tokens[: len(pieces)] == pieces and got.output_ids == t.output_ids
        assert got.attention.meta["prefix"] == pieces
        for kind in ("encoder", "decoder", "cross"):
            np.testing.assert_allclose(getattr(got.attention, kind).numpy(), getattr(maps, kind).numpy(), atol=1e-5)
        chosen = probs[torch.arange(len(t.output_ids)), torch.tensor(t.output_ids)].numpy()
        np.testing.assert_allclose(got.next_pieces.chosen_prob, chosen, atol=1e-5)
    with pytest.raises(ValueError, match="teacher-forced"):
        explain(tr, SENT, reference="Ich habe keine Zeit.", prefix=PREFIX)


def test_encode_prefix_rejects_what_cannot_be_forced(forced):
    from aiayn import calls

    tr = forced[0]
    assert calls.encode_prefix(tr.tokenizer, tr.cfg, "  Keine \x00 Zeit ").text == "Keine Zeit"
    with pytest.raises(ValueError, match="holds at most 63"):
        calls.encode_prefix(tr.tokenizer, tr.cfg, "Zeit " * 70)
    with pytest.raises(ValueError, match="empty"):
        calls.encode_prefix(tr.tokenizer, tr.cfg, "   ")

    class Unk:  # a vocabulary without byte fallback (an imported Opus-MT one): "猫" has no piece
        unk_id = tr.tokenizer.unk_id

        def encode(self, text):
            return [self.unk_id if "猫" in w else 10 for w in text.split()]

    with pytest.raises(ValueError, match="no ordinary piece for '猫'"):
        calls.encode_prefix(Unk(), tr.cfg, "Die 猫 schläft")


@pytest.mark.parametrize("kind", ["cross", "decoder", "encoder"])
def test_explorer_with_prefix_shows_the_forced_outputs_maps(checkpoints, forced, kind):
    tr, t, maps, _ = forced
    at = open_page(PAGE, {"text": SENT, "prefix": PREFIX, "kind": kind, "layer": "1", "head": "2"})
    assert not at.exception, at.exception
    head = charts(at)["head_view"]["data"][0]
    np.testing.assert_allclose(arr(head["z"]), getattr(maps, kind)[0, 0, 1].numpy(), atol=1e-5)
    pieces = tr.pieces(tr.tokenizer.encode(PREFIX))
    if kind != "encoder":  # the target axis (rows: fed -> predicted) starts with the prefix's pieces
        assert head["y"][: len(pieces)] == [esc(f"{i}:{a}→{b}") for i, (a, b) in
                                            enumerate(zip(t.decoder_input_tokens, pieces))]
        assert len(head["y"]) == len(t.output_tokens)
    assert at.text_input(key="ex_prefix").value == PREFIX
    assert any("forced prefix:" in m.value and "the rest decoded by beam search" in m.value for m in at.markdown)


def test_norm_based_cells_follow_the_forced_output(checkpoints, forced):
    from aiayn import calls

    tr, t, _, _ = forced
    at = open_page(PAGE, {"text": SENT, "prefix": PREFIX, "measure": "norm-based", "kind": "decoder",
                          "layer": "2", "head": "1"})
    assert not at.exception
    want = calls.norm_based_maps(tr.model, calls.batch(tr.cfg, [t.src_ids]), calls.batch(tr.cfg, [t.output_ids]))
    np.testing.assert_allclose(arr(charts(at)["head_view"]["data"][0]["z"]), want["decoder"][1, 0, 0], atol=1e-4)


def test_step_tab_says_which_steps_were_forced(checkpoints, forced):
    tr, t, maps, _ = forced
    n = len(tr.tokenizer.encode(PREFIX))
    at = open_page(PAGE, {"text": SENT, "prefix": PREFIX, "step": str(n + 1), "head": "1"}, tab="step")
    assert not at.exception
    np.testing.assert_allclose(arr(charts(at)["step_decoder"]["data"][0]["z"]),
                               maps.decoder[-1, 0, 0, : n + 1, : n + 1].numpy(), atol=1e-5)
    assert any(f"Step {n + 1} of" in m.value and "predicts" in m.value for m in at.markdown)
    at.slider(key="step").set_value(n).run()
    assert any(f"Step {n} of" in m.value and "forced to write" in m.value for m in at.markdown)


def test_removing_the_prefix_shows_the_models_own_output(checkpoints, forced):
    tr = forced[0]
    own = tr.translate(SENT)
    at = open_page(PAGE, {"text": SENT, "prefix": PREFIX})
    [remove] = [b for b in at.button if b.label == "Remove"]
    remove.click().run()
    assert not at.exception
    assert at.text_input(key="ex_prefix").value == "" and "prefix" not in at.query_params
    y = charts(at)["head_view"]["data"][0]["y"]
    assert y == [esc(f"{i}:{a}→{b}") for i, (a, b) in enumerate(zip(own.decoder_input_tokens, own.output_tokens))]
    assert not any("forced prefix" in m.value for m in at.markdown)


@pytest.mark.parametrize("too_long", ["for the model", "for this sentence"])
def test_a_prefix_that_cannot_be_forced_is_an_error_not_an_exception(checkpoints, forced, too_long):
    tr = forced[0]
    text = SENT if too_long == "for the model" else "No."
    own = tr.translate(text)
    # longer than the model's 63 output positions, or than this sentence's source length + 50 (Section 6.1)
    n = 70 if too_long == "for the model" else len(own.src_tokens) + 52
    prefix = " ".join(["a"] * n)
    assert len(tr.tokenizer.encode(prefix)) == n and (n > 63) == (too_long == "for the model")
    needle = "at most 63" if too_long == "for the model" else "output pieces"
    at = open_page(PAGE, {"text": text, "prefix": prefix})
    assert not at.exception
    assert any("Cannot force the output" in e.value and needle in e.value for e in at.error), [e.value for e in at.error]
    z = arr(charts(at)["head_view"]["data"][0]["z"])  # the model's own output instead
    assert z.shape == (len(own.output_tokens), len(own.src_tokens))


def test_figure1_links_a_forced_node_to_the_explorer(checkpoints, tiny_translator):
    at = open_page(FIGURE1, {"text": SENT, "open_tree": "true"})
    assert not any("Attention Explorer" in pl.proto.label for pl in at.get("page_link"))
    tree = tiny_translator.beam_tree(SENT, beam_size=4, length_penalty=0.6)
    node = next(n.id for n in tree.nodes[1:] if n.step == 2)
    at.selectbox(key="force").set_value(node).run()
    assert not at.exception
    [link] = [pl for pl in at.get("page_link") if pl.proto.label.startswith("See every head's attention")]
    query = parse_qs(link.proto.query_string)
    ids = [i for i in tree.tokens(node) if i != tiny_translator.cfg.eos_id]
    # ?sentence=, not ?text=: Streamlit drops the parameters bound on the page left (Figure 1's own `text`)
    assert query == {"sentence": [SENT], "prefix": [tiny_translator.tokenizer.decode(ids)]}
    assert link.proto.page.endswith("2_Attention_Explorer.py") or "Attention_Explorer" in link.proto.page


def test_explorer_reads_sentence_as_its_text(checkpoints, forced):
    tr, t, maps, _ = forced
    at = open_page(PAGE, {"sentence": SENT, "prefix": PREFIX})
    assert not at.exception
    assert at.text_input(key="ex_text").value == SENT
    assert "sentence" not in at.query_params  # SENT is the default sentence: left out of the URL
    np.testing.assert_allclose(arr(charts(at)["head_view"]["data"][0]["z"]), maps.cross[-1, 0].mean(0).numpy(),
                               atol=1e-5)
    at = open_page(PAGE, {"sentence": "My dog sleeps."})
    assert at.text_input(key="ex_text").value == "My dog sleeps."
    assert at.query_params["text"] == "My dog sleeps." and "sentence" not in at.query_params  # rewritten as text


def _link_script(checkpoint: str, pieces: list) -> None:
    import streamlit as st

    from aiayn import Translator
    from aiayn.app.explorer import explorer_prefix_link

    tr = Translator.load(checkpoint, device="cpu")
    st.session_state["params"] = explorer_prefix_link(tr, "I have no time.", [tr.tokenizer.piece_to_id(p) for p in pieces])


def test_link_says_when_the_explorer_will_split_the_prefix_otherwise(tiny_checkpoints, tiny_translator):
    from streamlit.testing.v1 import AppTest

    tok = tiny_translator.tokenizer
    canonical = tiny_translator.pieces(tok.encode("keine"))
    other = ["▁", "k", "e", "i", "n", "e"]  # the same text, other pieces (a beam may write those)
    assert other != canonical and tok.unk_id not in [tok.piece_to_id(p) for p in other]
    for pieces, note in ((canonical, False), (other, True)):
        at = AppTest.from_function(_link_script, args=(str(tiny_checkpoints / "en-de"), pieces),
                                   default_timeout=60).run()
        assert not at.exception, at.exception
        assert at.session_state["params"] == {"sentence": "I have no time.", "prefix": "keine"}
        said = [c.value for c in at.caption if "splits into other pieces" in c.value]
        assert bool(said) == note and (not note or " ".join(f"`{p}`" for p in canonical) in said[0])


def test_teacher_forced_mode_says_the_prefix_is_ignored(checkpoints, forced):
    tr = forced[0]
    ref, _ = tr.force(SENT, "Ich habe keine Zeit.")
    at = open_page(PAGE, {"text": SENT, "prefix": PREFIX, "mode": "forced", "ref": "Ich habe keine Zeit."})
    assert not at.exception and not at.error
    assert any("ignored while a reference is fed" in i.value for i in at.info)
    y = charts(at)["head_view"]["data"][0]["y"]
    assert y == [esc(f"{i}:{a}→{b}") for i, (a, b) in enumerate(zip(ref.decoder_input_tokens, ref.output_tokens))]
