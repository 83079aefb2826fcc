"""The guided lesson of "Figure 1, walked" (aiayn.lessons.figure1): each step's numbers recomputed here from the
trace by direct torch arithmetic, found in its text; and the page opened at every step (AppTest)."""
from __future__ import annotations

import math

import pytest
import torch
from app_pages import charts, open_page
from tiny_models import perturbed_tiny_model

from aiayn import Translator
from aiayn.figures import figure1 as f1
from aiayn.lessons import figure1 as lesson
from aiayn.lessons import LessonInputError
from aiayn.tokenizer import Tokenizer

PAGE = "pages/10_Figure_1.py"
TEXT = "I have no time."


@pytest.fixture(scope="module")
def walked(tiny_spm):
    tok = Tokenizer.load(tiny_spm)
    tr = Translator(perturbed_tiny_model(8, vocab_size=tok.vocab_size, max_len=24), tok)
    lens = tr.logit_lens(TEXT, k=3, output_ids=tr.translate(TEXT, beam_size=2).output_ids)
    return tr, lens.trace, lens


def _steps(walked):
    tr, trace, lens = walked
    return {k: lesson.lesson_step(k, trace, lens, tr.cfg) for k in range(1, lesson.N_STEPS + 1)}


def _rows(t):
    return t[0].norm(dim=-1)


def _ratio(s):
    return (_rows(s.sublayer_out) / _rows(s.stream_in)).mean().item()


def test_steps_walk_figure_1_upwards(walked):
    tr, trace, _ = walked
    steps = _steps(walked)
    keys = [k for k, _ in f1.block_keys(tr.cfg.n_layers)]
    blocks = [steps[k].block for k in steps]
    assert 12 <= len(steps) <= 16 and all(b in keys for b in blocks)
    assert [keys.index(b) for b in blocks] == sorted(keys.index(b) for b in blocks)  # bottom to top
    for s in steps.values():
        assert "Section" in s.markdown or "Eq." in s.markdown
        assert 2 <= s.markdown.count(". ") + 1 <= 5
    with pytest.raises(LessonInputError, match="steps 1 to"):
        lesson.lesson_step(0, trace, walked[2], tr.cfg)


def test_chosen_probs_equal_a_separate_teacher_forced_pass(walked):
    """The page's beam bars come from the trace: bit for bit what a pass of their own over the output gives."""
    from aiayn import calls

    tr, trace, _ = walked
    out = trace.target[0].tolist()
    src_ids = tr.encode_source(TEXT).ids
    own = calls.teacher_forced_ids(tr.model, [src_ids], [out]).target_log_probs(tr.cfg.pad_id)[0].exp().numpy()
    got = lesson.chosen_probs(trace)
    assert got.shape == (len(out),) and torch.equal(torch.from_numpy(got), torch.from_numpy(own))


def test_step_numbers_equal_direct_computations(walked):
    tr, trace, lens = walked
    s = _steps(walked)
    enc, dec = trace.encoder, trace.decoder
    S, T, D = enc.tokens.shape[1], dec.tokens.shape[1], tr.cfg.d_model
    assert f"**{S} × {D}**" in s[1].markdown and s[1].numbers["S"] == S == len(tr.tokenizer.encode(TEXT)) + 1
    assert lesson.fmt(_rows(enc.embedding).mean().item()) in s[1].markdown
    assert lesson.fmt(math.sqrt(D)) in s[2].markdown
    assert lesson.fmt(_rows(enc.embedding * math.sqrt(D)).mean().item()) in s[2].markdown
    cos = torch.nn.functional.cosine_similarity(enc.input[0], enc.scaled[0], dim=-1).mean().item()
    assert lesson.fmt(cos) in s[3].markdown
    a1 = enc.layers[0].sublayers[0]
    assert lesson.pct(_ratio(a1)) in s[4].markdown and f"**{tr.cfg.n_heads} heads**" in s[4].markdown
    f = enc.layers[0].sublayer("ffn")
    assert lesson.pct((f.hidden[0] == 0).float().mean().item()) in s[5].markdown
    a_last = enc.layers[-1].sublayers[0]
    assert lesson.fmt(a_last.norm_in[0].var(-1, unbiased=False).mean().item()) in s[6].markdown
    assert lesson.fmt(a_last.norm_out[0].var(-1, unbiased=False).mean().item()) in s[6].markdown
    c = torch.nn.functional.cosine_similarity(enc.output[0], enc.embedding[0], dim=-1)
    assert lesson.fmt(c.mean().item()) in s[7].markdown and lesson.fmt(c.min().item()) in s[7].markdown
    assert f"**{T} pieces**" in s[8].markdown and f"`{trace.meta['decoder_input_tokens'][0]}`" in s[8].markdown
    assert f"**{T * (T + 1) // 2} of the {T * T}**" in s[10].markdown
    assert lesson.pct(_ratio(dec.layers[0].sublayers[0])) in s[10].markdown
    assert f"**{T} × {S}**" in s[11].markdown
    assert lesson.pct(_ratio(dec.layers[0].sublayer("cross_attn"))) in s[11].markdown
    p = trace.log_probs[0].gather(-1, trace.target[0][:, None])[:, 0]
    assert lesson.fmt(p[0].exp().item(), 3) in s[13].markdown and lesson.fmt(p.exp().mean().item(), 3) in s[13].markdown
    assert lesson.fmt(p.sum().item()) in s[14].markdown


def test_lens_step_names_the_deciding_layer(walked):
    tr, trace, lens = walked
    n = lesson.lesson_step(12, trace, lens, tr.cfg).numbers
    target = trace.target[0].tolist()
    top1 = [[lens.pieces[l][t][0] for t in range(len(target))] for l in range(tr.cfg.n_layers)]
    want = [tr.tokenizer.id_to_piece(i) for i in target]
    hits = [[a == b for a, b in zip(row, want)] for row in top1]
    first = next((l + 1 for l in range(len(hits)) if hits[l][0]), None)
    assert n["first"] == first and n["layer1"] == sum(hits[0]) and n["last"] == sum(hits[-1])


@pytest.fixture(scope="module")
def page_steps(tiny_translator):
    """The lesson as the page must show it on the app's checkpoint (en-de) for TEXT: beam 4, alpha 0.6, k 5."""
    t = tiny_translator
    lens = t.logit_lens(TEXT, k=5, output_ids=t.beam_tree(TEXT, beam_size=4, length_penalty=0.6).translation.output_ids)
    steps = {k: lesson.lesson_step(k, lens.trace, lens, t.cfg) for k in range(1, lesson.N_STEPS + 1)}
    return steps, lens.trace


def _box(at, k):
    return [m.value for m in at.markdown if f"Step {k} of {lesson.N_STEPS}" in m.value]


@pytest.mark.parametrize("k", range(1, lesson.N_STEPS + 1))
def test_page_opens_at_every_step(checkpoints, page_steps, k):
    page_steps, trace = page_steps
    at = open_page(PAGE, {"step": str(k), "text": TEXT})
    assert not at.exception
    want = lesson.step_blocks(2)[k - 1]
    assert at.selectbox(key="block").value == want == page_steps[k].block
    title = charts(at)["block_heatmap"]["layout"]["title"]["text"]
    assert title.startswith(f1.block_view(trace, want, trace.meta["src_tokens"]).title)  # the block view follows
    box = _box(at, k)
    assert len(box) == 1 and page_steps[k].markdown in box[0]
    assert at.number_input(key="step").value == k
    assert ("lens" in charts(at)) == (k == lesson.LENS_STEP)  # the lens step opens the logit lens's section
    assert ("beam_tree" in charts(at)) == (k == lesson.TREE_STEP)  # the beam-search step opens the tree's


def test_next_and_back_move_the_step_and_its_block(checkpoints):
    at = open_page(PAGE, {"text": TEXT})
    assert not _box(at, 1) and at.number_input(key="step").value == 0
    at.button(key="lesson_next").click().run()
    assert at.number_input(key="step").value == 1 and len(_box(at, 1)) == 1
    assert at.selectbox(key="block").value == lesson.step_blocks(2)[0]
    at.button(key="lesson_next").click().run()
    at.button(key="lesson_next").click().run()
    assert at.number_input(key="step").value == 3 and at.selectbox(key="block").value == "enc.pe"
    assert at.query_params["step"] == ["3"] or at.query_params["step"] == "3"
    at.button(key="lesson_back").click().run()
    assert at.selectbox(key="block").value == "enc.scale" and len(_box(at, 2)) == 1
    at.selectbox(key="block").set_value("out").run()  # the student looks elsewhere: the step stays, the pick too
    assert at.selectbox(key="block").value == "out" and len(_box(at, 2)) == 1
    assert not at.exception


def test_next_to_the_beam_search_step_opens_the_tree_and_it_stays_open(checkpoints):
    at = open_page(PAGE, {"text": TEXT, "step": str(lesson.TREE_STEP - 1)})
    assert "beam_tree" not in charts(at) and "open_tree" not in at.query_params
    at.button(key="lesson_next").click().run()  # the step that says "the tree below"
    assert at.number_input(key="step").value == lesson.TREE_STEP and "the tree below" in _box(at, lesson.TREE_STEP)[0]
    assert "beam_tree" in charts(at) and at.query_params["open_tree"] in ("true", ["true"])
    at.button(key="lesson_back").click().run()  # a step opens its section, never closes one the student has open
    assert at.number_input(key="step").value == lesson.TREE_STEP - 1 and "beam_tree" in charts(at)
    assert not at.exception


def test_ffn_step_names_a_non_relu_activation_and_counts_its_negatives(tiny_spm):
    """An imported Opus-MT model's FFN uses swish, which sets no unit to exactly zero: the step says so and counts the
    units that come out negative instead of claiming that a ReLU zeroes 0% of them."""
    tok = Tokenizer.load(tiny_spm)
    tr = Translator(perturbed_tiny_model(8, vocab_size=tok.vocab_size, max_len=24, activation="swish"), tok)
    lens = tr.logit_lens(TEXT, k=3, output_ids=tr.translate(TEXT, beam_size=2).output_ids)
    step = lesson.lesson_step(5, lens.trace, lens, tr.cfg)
    hidden = lens.trace.encoder.layers[0].sublayer("ffn").hidden[0]
    assert (hidden == 0).float().mean().item() == 0.0  # swish: nothing is exactly zero
    assert "ReLU sets" not in step.markdown and "swish" in step.markdown
    assert lesson.pct((hidden < 0).float().mean().item()) in step.markdown
    assert step.numbers["negative"] == pytest.approx((hidden < 0).float().mean().item())
