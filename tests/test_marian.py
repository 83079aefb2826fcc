"""Real pretrained weights: a Hugging Face ``MarianMTModel`` (Opus-MT) converted by ``aiayn.interop.from_marian``.

Offline: every model is a randomly initialised tiny ``MarianMTModel`` built from a ``MarianConfig``, with its
weights perturbed far from their initialisation (so LayerNorms, biases and the final logits bias all matter);
the tokenizer test builds a real ``MarianTokenizer`` from the tiny SentencePiece fixture. Expectations come
from the Hugging Face model itself (logits, attention maps, ``generate``), an independent implementation.
Skipped when ``transformers`` is not installed (it is in requirements-dev.txt, so CI runs these tests).
"""
from __future__ import annotations

import json
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

from aiayn import Transformer, TransformerConfig  # noqa: E402
from aiayn.decoding import beam_search, greedy_decode  # noqa: E402
from aiayn.interop import from_marian, to_torch_transformer  # noqa: E402
from aiayn.model.positional import sinusoidal_encoding  # noqa: E402
from marian_fixture import redraw_marian_weights  # noqa: E402

PAD, EOS, V = 49, 0, 50


def tiny_marian(seed: int = 0, *, eager: bool = False, **overrides):
    """A tiny MarianMTModel (d_model 16, 2 layers, 2 heads, FFN 32, vocab 50, 64 positions, swish), eval mode,
    every weight but the (fixed, sinusoidal) position tables redrawn from a wide distribution."""
    kwargs = dict(
        vocab_size=V, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
        activation_function="swish", scale_embedding=True, pad_token_id=PAD, eos_token_id=EOS,
        decoder_start_token_id=PAD, forced_eos_token_id=None,
    )
    kwargs.update(overrides)
    config = transformers.MarianConfig(**kwargs)
    if eager:
        config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    redraw_marian_weights(model, seed)
    return model


def padded_sources(seed: int = 0, b: int = 4, s: int = 7) -> torch.Tensor:
    """``(B, S)`` ids in [1, V-1) ending with EOS, rows 1.. padded with PAD (different real lengths)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, V - 1, (b, s), generator=g)
    for row in range(b):
        n = s - row
        src[row, n - 1] = EOS
        src[row, n:] = PAD
    return src


def hf_logits(model, src, dec, **kwargs):
    with torch.no_grad():
        return model(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=dec, **kwargs)


def test_config_maps_every_marian_setting():
    ours, tok = from_marian(tiny_marian())
    cfg = ours.cfg
    assert tok is None and not ours.training
    assert (cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.n_layers, cfg.vocab_size, cfg.max_len) == (16, 2, 32, 2, V, 64)
    assert (cfg.activation, cfg.positional, cfg.positional_layout) == ("swish", "sinusoidal", "concatenated")
    assert cfg.final_logits_bias and cfg.share_embeddings and not cfg.norm_first
    assert (cfg.pad_id, cfg.eos_id, cfg.decoder_start, cfg.decoder_start_id) == (PAD, EOS, "pad", PAD)
    assert cfg.bos_id not in (PAD, EOS) and cfg.layer_norm_eps == 1e-5


def test_logits_match_hugging_face():
    model = tiny_marian()
    ours, _ = from_marian(model)
    src = padded_sources()
    g = torch.Generator().manual_seed(5)
    dec = torch.cat([torch.full((4, 1), PAD), torch.randint(1, V - 1, (4, 5), generator=g)], dim=1)
    expected = hf_logits(model, src, dec).logits
    with torch.no_grad():
        got = ours(src, dec)
        got_capture, _ = ours(src, dec, return_attention=True)
    assert expected.std() > 1.0  # far from a near-constant output: the comparison has teeth
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
    torch.testing.assert_close(got_capture, expected, atol=1e-4, rtol=0)
    # an independent third path: the same weights in torch.nn.Transformer (aiayn.interop)
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.testing.assert_close(to_torch_transformer(ours).eval()(src, dec), expected, atol=1e-4, rtol=0)
    finally:
        torch.backends.mha.set_fastpath_enabled(before)


def test_each_marian_difference_matters():
    """Negative controls: undoing any one conversion setting breaks the match, so each is really needed."""
    model = tiny_marian()
    ours, _ = from_marian(model)
    src, dec = padded_sources(), torch.tensor([[PAD, 3, 4, 5]] * 4)
    expected = hf_logits(model, src, dec).logits
    for change in (dict(activation="relu"), dict(positional_layout="interleaved"), dict(final_logits_bias=False),
                   dict(decoder_start="bos", bos_id=1)):
        other = Transformer(ours.cfg.replace(**change)).eval()
        other.load_state_dict(ours.state_dict(), strict=False)
        with torch.no_grad():
            assert (other(src, dec) - expected).abs().max() > 1e-2, change


def test_attention_maps_match_hugging_face():
    model = tiny_marian(eager=True)
    ours, _ = from_marian(model)
    src, dec = padded_sources(b=2), torch.tensor([[PAD, 3, 4, 5, 6], [PAD, 7, 8, 9, 10]])
    out = hf_logits(model, src, dec, output_attentions=True)
    with torch.no_grad():
        _, maps = ours(src, dec, return_attention=True)
    assert maps.tgt_lengths == [5, 5]  # the <pad> start token counts as a real position
    for b in range(2):
        s = int((src[b] != PAD).sum())
        for layer in range(2):
            torch.testing.assert_close(maps.encoder[layer, b, :, :s, :s], out.encoder_attentions[layer][b, :, :s, :s], atol=1e-5, rtol=0)
            torch.testing.assert_close(maps.decoder[layer, b], out.decoder_attentions[layer][b], atol=1e-5, rtol=0)
            torch.testing.assert_close(maps.cross[layer, b, :, :, :s], out.cross_attentions[layer][b, :, :, :s], atol=1e-5, rtol=0)
    # the first query sees only the <pad> start position (masked as padding, its row would be all zeros)
    torch.testing.assert_close(maps.decoder[:, :, :, 0, 0], torch.ones(2, 2, 2), atol=1e-6, rtol=0)


def _hf_greedy(model, src, n):
    with torch.no_grad():
        out = model.generate(input_ids=src, attention_mask=(src != PAD).long(), num_beams=1, do_sample=False,
                             max_new_tokens=n, bad_words_ids=[[PAD]])
    assert bool((out[:, 0] == PAD).all())
    rows = []
    for row in out[:, 1:].tolist():  # drop the start token; after EOS generate pads
        rows.append(row[: row.index(EOS) + 1] if EOS in row else row)
    return rows


@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_output_matches_generate(seed):
    model = tiny_marian(seed)
    with torch.no_grad():  # make EOS a likely but not certain prediction, so some outputs end early
        model.final_logits_bias[0, EOS] += 4.0
    ours, _ = from_marian(model)
    src = padded_sources(seed + 10, b=6, s=8)
    expected = _hf_greedy(model, src, 10)
    assert any(r[-1] == EOS for r in expected) and any(r[-1] != EOS for r in expected), expected
    for use_cache in (True, False):
        got = [h.tokens for h in greedy_decode(ours, src, max_len=10, use_cache=use_cache)]
        assert got == expected
    assert [hs[0].tokens for hs in beam_search(ours, src, beam_size=1, max_len=10)] == expected


def test_untied_embeddings_and_gelu_convert():
    model = tiny_marian(3, activation_function="gelu", tie_word_embeddings=False)
    with torch.no_grad():
        model.lm_head.weight.add_(0.3)
    ours, _ = from_marian(model)
    assert not ours.cfg.share_embeddings and ours.cfg.activation == "gelu"
    src, dec = padded_sources(), torch.tensor([[PAD, 3, 4, 5]] * 4)
    with torch.no_grad():
        torch.testing.assert_close(ours(src, dec), hf_logits(model, src, dec).logits, atol=1e-4, rtol=0)


def test_converted_model_round_trips_through_a_checkpoint(tmp_path):
    from aiayn.checkpoint import load_checkpoint, save_checkpoint

    ours, _ = from_marian(tiny_marian())
    save_checkpoint(tmp_path / "marian", ours)
    again, config = load_checkpoint(tmp_path / "marian")
    assert again.cfg == ours.cfg and config["model"]["decoder_start"] == "pad"
    src, dec = padded_sources(), torch.tensor([[PAD, 3, 4, 5]] * 4)
    with torch.no_grad():
        torch.testing.assert_close(again(src, dec), ours(src, dec), atol=0, rtol=0)


@pytest.mark.parametrize(
    "override, message",
    [
        (dict(scale_embedding=False), "scale_embedding"),
        (dict(activation_function="gelu_new"), "activation_function"),
        (dict(decoder_layers=3), "same number of layers"),
        (dict(decoder_vocab_size=60, share_encoder_decoder_embeddings=False), "vocabularies"),
    ],
)
def test_unsupported_models_are_refused(override, message):
    with pytest.raises(ValueError, match=message):
        from_marian(tiny_marian(**override))


def test_not_a_marian_model_is_refused():
    with pytest.raises(ValueError, match="MarianMTModel"):
        from_marian(torch.nn.Linear(2, 2))


def test_marian_positions_are_the_concatenated_sinusoids():
    """Marian's own table (sines in the first half, cosines in the second, from position 0) is
    ``sinusoidal_encoding(layout="concatenated")``, not the paper's interleaved one."""
    table = tiny_marian().model.encoder.embed_positions.weight.detach()
    torch.testing.assert_close(table, sinusoidal_encoding(64, 16, layout="concatenated"), atol=1e-6, rtol=0)
    assert (table - sinusoidal_encoding(64, 16)).abs().max() > 0.5


def test_existing_configs_are_unchanged():
    """A config.json written before the Marian fields existed loads to the paper's model: ReLU, interleaved
    sinusoids, no logits bias, decoding from BOS, and the same state-dict keys."""
    old = {"attention_dropout": 0.0, "bos_id": 2, "d_ff": 128, "d_model": 64, "dropout": 0.0, "eos_id": 3,
           "layer_norm_eps": 1e-06, "max_len": 64, "n_heads": 4, "n_layers": 2, "norm_first": False, "pad_id": 0,
           "positional": "sinusoidal", "preset_name": "tiny", "share_embeddings": True, "vocab_size": 320}
    cfg = TransformerConfig.from_dict(json.loads(json.dumps(old)))
    assert cfg == TransformerConfig.preset("tiny", vocab_size=320, max_len=64)
    assert (cfg.activation, cfg.positional_layout, cfg.final_logits_bias, cfg.decoder_start) == (
        "relu", "interleaved", False, "bos")
    assert cfg.decoder_start_id == cfg.bos_id == 2
    assert {k: v for k, v in cfg.to_dict().items() if k in old} == old
    model = Transformer(cfg)
    assert not any("final_logits_bias" in k for k in model.state_dict())
    torch.testing.assert_close(model.positions.table, sinusoidal_encoding(64, 64, layout="interleaved"), atol=0, rtol=0)
    x = torch.randn(3, 64)
    ffn = model.encoder_layers[0].ffn
    torch.testing.assert_close(ffn(x), ffn.w_2(torch.clamp(ffn.w_1(x), min=0)), atol=0, rtol=0)


def test_config_rejects_unknown_new_values():
    for change in (dict(activation="tanh"), dict(positional_layout="rotary"), dict(decoder_start="eos"),
                   dict(final_logits_bias=1)):
        with pytest.raises(ValueError):
            TransformerConfig.preset("tiny", **change)


# -- the tokenizer adapter: a real MarianTokenizer built from the tiny SentencePiece fixture ------------------

@pytest.fixture(scope="module")
def marian_tokenizer(tiny_spm, tmp_path_factory):
    """A MarianTokenizer with Opus-MT's id layout: ``</s>`` 0, ``<unk>`` 1, the pieces, ``<pad>`` last."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(tiny_spm))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    vocab = ["</s>", "<unk>"] + [p for p in pieces if p not in ("<pad>", "<unk>", "<s>", "</s>")] + ["<pad>"]
    d = tmp_path_factory.mktemp("marian_tok")
    (d / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(vocab)}), encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses"
        return transformers.MarianTokenizer(source_spm=str(tiny_spm), target_spm=str(tiny_spm),
                                            vocab=str(d / "vocab.json"))


def test_translator_on_a_converted_model_matches_generate(marian_tokenizer):
    from aiayn import Translator

    tok = marian_tokenizer
    vocab, pad = len(tok), tok.pad_token_id
    model = tiny_marian(8, vocab_size=vocab, pad_token_id=pad, decoder_start_token_id=pad)
    ours, adapter = from_marian(model, tok)
    assert (adapter.vocab_size, adapter.pad_id, adapter.eos_id) == (vocab, pad, 0)
    translator = Translator(ours, adapter)
    text = "Guten Morgen, wie geht es dir?"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batch = tok([text], return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=8, bad_words_ids=[[pad]])
        expected_ids = [i for i in out[0, 1:].tolist() if i != pad]
        expected_text = tok.decode(out[0], skip_special_tokens=True)
        tr = translator.translate(text, beam_size=1, max_len=8)
    assert tr.src_ids == batch["input_ids"][0].tolist()
    assert tr.src_tokens == tok.convert_ids_to_tokens(tr.src_ids)
    assert len(set(expected_ids)) > 1  # not one piece repeated: the order of the output is checked too
    assert tr.output_ids == expected_ids and tr.text == expected_text
    assert tr.decoder_input_tokens == ["<pad>"] + tr.output_tokens[:-1]
    assert tr.attention.cross.shape[-2:] == (len(tr.output_ids), len(tr.src_ids))
    with pytest.raises(ValueError, match="out of range"):
        adapter.id_to_piece(vocab)


def test_adapter_refuses_a_tokenizer_of_another_model(marian_tokenizer):
    with pytest.raises(ValueError, match="pieces"):
        from_marian(tiny_marian(), marian_tokenizer)  # the model's vocabulary is 50 pieces
