"""The per-block trace (aiayn.block_trace through aiayn.calls.traced) and the logit lens (calls.logit_lens,
Translator.logit_lens). Every traced tensor is recomputed here by walking the model's parameters with the paper's
equations (embedding rows, x sqrt(d_model), + PE, LayerNorm(x + Sublayer(x)) or its pre-LN form, Eq. 2 written out);
the lens is recomputed from layer outputs taken by this test's own forward hooks."""
from __future__ import annotations

import math
import threading

import pytest
import torch
import torch.nn.functional as F
from tiny_models import perturbed_tiny_model

from aiayn import Translator, calls
from aiayn.block_trace import capture
from aiayn.model.positional import sinusoidal_encoding
from aiayn.tokenizer import Tokenizer

CONFIGS = {
    "post-LN shared sinusoidal": dict(),
    "pre-LN separate learned": dict(norm_first=True, share_embeddings=False, positional="learned"),
}


def _model(**overrides):
    return perturbed_tiny_model(6, vocab_size=40, max_len=16, **overrides)


def _ids():
    src = torch.tensor([[5, 9, 13, 7, 22, 3]])
    target = torch.tensor([[11, 4, 30, 17, 3]])
    return src, target


def _ln(norm, x):
    return F.layer_norm(x, (x.size(-1),), norm.weight, norm.bias, norm.eps)


def _embed(model, tokens, side):
    cfg = model.cfg
    table = model.embedding if cfg.share_embeddings else (model.src_embedding if side == 0 else model.tgt_embedding)
    n = tokens.size(1)
    if cfg.positional == "sinusoidal":
        pe = sinusoidal_encoding(cfg.max_len, cfg.d_model, layout=cfg.positional_layout)[:n]
    else:
        pe = (model.src_positions if side == 0 else model.tgt_positions).weight[:n]
    e = table.weight[tokens]
    return e, pe, e * math.sqrt(cfg.d_model) + pe


def _sublayer(norm_first, norm, x, run):
    """``(sublayer_in, sublayer_out, norm_in, norm_out, stream_out)`` by Section 3.1's two forms."""
    if norm_first:
        h = _ln(norm, x)
        out = run(h)
        return h, out, x, h, x + out
    out = run(x)
    return x, out, x + out, _ln(norm, x + out), _ln(norm, x + out)


def _ffn(ffn, h):
    hidden = torch.relu(h @ ffn.w_1.weight.T + ffn.w_1.bias)
    return hidden, hidden @ ffn.w_2.weight.T + ffn.w_2.bias


def _expected_layers(model, x, layers, memory=None):
    nf, causal = model.cfg.norm_first, torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril()[None, None]
    expected = []
    for layer in layers:
        subs, stream_in = [], x
        runs = [("self_attn", lambda h, L=layer: L.self_attn(h, None, causal if memory is not None else None)[0].output)]
        if memory is not None:
            runs.append(("cross_attn", lambda h, L=layer: L.cross_attn(h, memory, None)[0].output))
        runs.append(("ffn", None))
        for j, (name, run) in enumerate(runs):
            norm = getattr(layer, f"norm{j + 1}")
            hidden = None
            if name == "ffn":
                h = _ln(norm, x) if nf else x
                hidden, _ = _ffn(layer.ffn, h)
                run = lambda h, L=layer: _ffn(L.ffn, h)[1]  # noqa: E731
            values = _sublayer(nf, norm, x, run)
            subs.append((name, x, *values, hidden))
            x = values[-1]
        expected.append((stream_in, x, subs))
    return expected, x


def _compare_stack(stack, tokens, model, side, memory=None):
    e, pe, x = _embed(model, tokens, side)
    torch.testing.assert_close(stack.embedding, e)
    torch.testing.assert_close(stack.scaled, e * math.sqrt(model.cfg.d_model))
    torch.testing.assert_close(stack.positional, pe)
    torch.testing.assert_close(stack.input, x)
    layers = model.encoder_layers if side == 0 else model.decoder_layers
    expected, out = _expected_layers(model, x, layers, memory)
    for got, (x_in, x_out, subs) in zip(stack.layers, expected, strict=True):
        torch.testing.assert_close(got.input, x_in)
        torch.testing.assert_close(got.output, x_out)
        assert [s.name for s in got.sublayers] == [s[0] for s in subs]
        for g, (name, s_in, sub_in, sub_out, n_in, n_out, s_out, hidden) in zip(got.sublayers, subs):
            for field, want in [("stream_in", s_in), ("sublayer_in", sub_in), ("sublayer_out", sub_out),
                                ("norm_in", n_in), ("norm_out", n_out), ("stream_out", s_out)]:
                torch.testing.assert_close(getattr(g, field), want, msg=f"{name}.{field}")
            if hidden is None:
                assert g.hidden is None
            else:
                torch.testing.assert_close(g.hidden, hidden)
    if model.cfg.norm_first:
        out = _ln(model.encoder_norm if side == 0 else model.decoder_norm, out)
        torch.testing.assert_close(stack.final_norm, out)
    else:
        assert stack.final_norm is None
    torch.testing.assert_close(stack.output, out)
    return out


@pytest.mark.parametrize("overrides", CONFIGS.values(), ids=CONFIGS.keys())
def test_every_traced_tensor_equals_the_papers_equations(overrides):
    model = _model(**overrides)
    src, target = _ids()
    trace = calls.traced(model, src, target)
    with torch.no_grad():
        memory = _compare_stack(trace.encoder, src, model, 0)
        dec_in = torch.cat([torch.tensor([[model.cfg.decoder_start_id]]), target[:, :-1]], 1)
        assert torch.equal(trace.decoder.tokens, dec_in)
        out = _compare_stack(trace.decoder, dec_in, model, 1, memory)
        torch.testing.assert_close(trace.log_probs, torch.log_softmax(model.project(out), -1))
    assert trace.norm_first == model.cfg.norm_first
    torch.testing.assert_close(trace.log_probs, calls.teacher_forced(model, src, target).log_probs)


def test_hooks_are_removed_after_the_call_and_after_an_error():
    model = _model()
    src, target = _ids()
    calls.traced(model, src, target)
    with pytest.raises(ValueError, match="vocabulary"):
        calls.traced(model, torch.tensor([[5, 99, 3]]), target)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_another_threads_pass_is_not_captured():
    model = _model()
    src, target = _ids()
    with capture(model) as rec:
        worker = threading.Thread(target=lambda: calls.teacher_forced(model, src, target))
        worker.start()
        worker.join()
        assert not rec.inputs and not rec.outputs  # the hooks fired in the other thread and kept nothing
        calls.teacher_forced(model, src, target)
    assert rec.inputs and rec.outputs


# -- the logit lens ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides", CONFIGS.values(), ids=CONFIGS.keys())
def test_logit_lens_equals_hooked_layer_outputs_through_the_output_layer(overrides):
    model = _model(**overrides)
    src, target = _ids()
    outputs = []
    handles = [layer.register_forward_hook(lambda m, a, o: outputs.append(o[0].detach())) for layer in model.decoder_layers]
    try:
        with torch.no_grad():
            model(src, torch.cat([torch.tensor([[model.cfg.decoder_start_id]]), target[:, :-1]], 1))
    finally:
        for h in handles:
            h.remove()
    lens = calls.logit_lens(model, calls.traced(model, src, target), k=4)
    L = model.cfg.n_layers
    assert lens.ids.shape == lens.probs.shape == (L, 1, target.size(1), 4)
    for layer, y in enumerate(outputs):
        with torch.no_grad():
            h = _ln(model.decoder_norm, y) if model.cfg.norm_first else y
            weight = model.embedding.weight if model.cfg.share_embeddings else model.generator.weight
            probs = torch.softmax(h @ weight.T, -1)
        top = probs.topk(4, -1)
        assert torch.equal(lens.ids[layer], top.indices)
        torch.testing.assert_close(lens.probs[layer], top.values)
        torch.testing.assert_close(lens.target_probs[layer], probs.gather(-1, target[..., None]).squeeze(-1))
    # the last layer's lens is the model's own output distribution
    torch.testing.assert_close(lens.probs[-1], calls.teacher_forced(model, src, target).log_probs.exp().topk(4, -1).values)


def test_translator_logit_lens_and_trace(tiny_spm):
    tok = Tokenizer.load(tiny_spm)
    tr = Translator(perturbed_tiny_model(2, vocab_size=tok.vocab_size, max_len=24), tok)
    lens = tr.logit_lens("I have no time.", "Ich habe keine Zeit.", k=3)
    ref = tr.force("I have no time.", "Ich habe keine Zeit.")[0]
    T, L = len(ref.output_tokens), tr.cfg.n_layers
    assert lens.ids.shape == lens.probs.shape == (L, T, 3) and lens.target_probs.shape == (L, T)
    assert lens.output_tokens == ref.output_tokens and lens.decoder_input_tokens == ref.decoder_input_tokens
    assert lens.pieces[1][2] == [tok.id_to_piece(int(i)) for i in lens.ids[1, 2]]
    assert (lens.probs[:, :, :-1] >= lens.probs[:, :, 1:]).all()
    free = tr.logit_lens("I have no time.", k=2, beam_size=2)
    assert free.output_tokens == tr.translate("I have no time.", beam_size=2).output_tokens
    assert free.trace.meta["mode"] == "free-running"
    with pytest.raises(ValueError, match="k must"):
        tr.logit_lens("I have no time.", "Ich", k=0)
