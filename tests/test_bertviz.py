"""``AttentionMaps.to_bertviz()``: keyword arguments for BertViz's encoder-decoder ``model_view``.

The dict is checked against the maps it came from (per-layer ``(1, H, Q, K)`` tensors, padding cropped), and
BertViz itself (in requirements-dev.txt; skipped when absent) must render it: the returned HTML names the
source and decoder-input pieces. ``to_bertviz`` must not import BertViz.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from aiayn import AttentionMaps


@pytest.fixture(scope="module")
def translation(tiny_translator):
    return tiny_translator.translate("Guten Morgen, wie geht es dir?", beam_size=2, max_len=6)


def test_dict_holds_every_layer_of_every_kind(translation):
    maps = translation.attention
    kwargs = maps.to_bertviz()
    assert set(kwargs) == {"encoder_attention", "decoder_attention", "cross_attention", "encoder_tokens", "decoder_tokens"}
    assert kwargs["encoder_tokens"] == translation.src_tokens
    assert kwargs["decoder_tokens"] == translation.decoder_input_tokens
    S, T = len(translation.src_tokens), len(translation.decoder_input_tokens)
    for kind, shape in (("encoder", (S, S)), ("decoder", (T, T)), ("cross", (T, S))):
        layers = kwargs[f"{kind}_attention"]
        assert isinstance(layers, tuple) and len(layers) == maps.n_layers
        for i, t in enumerate(layers):
            assert t.shape == (1, maps.n_heads, *shape) and t.dtype == torch.float32 and t.device.type == "cpu"
            assert torch.equal(t[0], getattr(maps, kind)[i, 0])


def test_padding_is_cropped_and_batches_are_refused(tiny_translator):
    trs = tiny_translator.translate_batch(["Guten Morgen, wie geht es dir?", "Ja."], beam_size=1, max_len=4)
    a, b = trs[0].attention, trs[1].attention
    S = max(a.encoder.shape[-1], b.encoder.shape[-1])
    pad = lambda m: torch.nn.functional.pad(m, (0, S - m.shape[-1], 0, S - m.shape[-2]))  # noqa: E731
    both = AttentionMaps(encoder=torch.cat([pad(a.encoder), pad(b.encoder)], dim=1),
                         src_tokens=[trs[0].src_tokens, trs[1].src_tokens],
                         decoder_input_tokens=[trs[0].decoder_input_tokens, trs[1].decoder_input_tokens],
                         src_lengths=[a.encoder.shape[-1], b.encoder.shape[-1]])
    with pytest.raises(ValueError, match="select"):
        both.to_bertviz()
    short = both.select(1).to_bertviz()
    assert short["encoder_attention"][0].shape[-2:] == (len(trs[1].src_tokens),) * 2
    assert torch.equal(short["encoder_attention"][0][0], b.encoder[0, 0])
    assert "decoder_attention" not in short  # a kind that was not captured is left out


def test_missing_labels_or_maps_are_refused(translation):
    maps = translation.attention
    with pytest.raises(ValueError, match="token labels"):
        AttentionMaps(encoder=maps.encoder).to_bertviz()
    with pytest.raises(ValueError, match="no attention maps"):
        AttentionMaps().to_bertviz()
    with pytest.raises(ValueError, match="labels"):
        AttentionMaps(encoder=maps.encoder, src_tokens=[maps.src_tokens[0][:-1]],
                      decoder_input_tokens=maps.decoder_input_tokens).to_bertviz()


def test_to_bertviz_does_not_import_bertviz(tiny_checkpoints):
    code = (
        "import sys, torch\n"
        "from aiayn import AttentionMaps\n"
        "m = AttentionMaps(encoder=torch.ones(1, 1, 1, 2, 2) / 2, src_tokens=[['a', 'b']], decoder_input_tokens=[['<s>']])\n"
        "m.to_bertviz()\n"
        "assert 'bertviz' not in sys.modules, 'to_bertviz imported bertviz'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bertviz_model_view_renders_the_tokens(translation):
    bertviz = pytest.importorskip("bertviz")
    html = bertviz.model_view(**translation.attention.to_bertviz(), html_action="return")
    # BertViz "prettifies" pieces (the word-start mark becomes a space): look for two distinct pieces as shown
    shown = {p.replace("\u2581", " ") for p in translation.src_tokens + translation.decoder_input_tokens}
    shown = sorted(p for p in shown if p.strip() and len(p.strip()) > 1)
    assert len(shown) >= 2
    for piece in shown[:2]:
        assert json.dumps(piece) in html.data, piece  # BertViz embeds the labels as JSON
    for name in ("Encoder", "Decoder", "Cross"):
        assert name in html.data
