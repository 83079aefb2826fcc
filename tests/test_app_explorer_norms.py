"""The explorer's "norm-based" switch (Kobayashi et al. 2020) shows alpha ||f(x)|| of the model's own output."""
from __future__ import annotations

import numpy as np
import pytest

from app_pages import arr, charts, open_page

PAGE = "pages/2_Attention_Explorer.py"


@pytest.mark.parametrize("kind", ["encoder", "cross"])
def test_norm_based_switch_shows_norm_weighted_attention(checkpoints, tiny_checkpoints, kind):
    from aiayn import Translator, calls

    tr = Translator.load(tiny_checkpoints / "en-de", device="cpu")
    t = tr.translate("I have no time.", beam_size=4, length_penalty=0.6, n_best=4)
    want = calls.norm_based_maps(tr.model, calls.batch(tr.cfg, [t.src_ids]), calls.batch(tr.cfg, [t.output_ids]))
    at = open_page(PAGE, {"kind": kind, "layer": "1", "head": "2", "measure": "norm-based"})
    assert not at.exception, at.exception
    view = charts(at)["head_view"]
    assert "(norm-based)" in view["layout"]["title"]["text"]
    z = arr(view["data"][0]["z"])
    np.testing.assert_allclose(z, want[kind][0, 0, 1], rtol=1e-4, atol=1e-6)
    weights = arr(charts(open_page(PAGE, {"kind": kind, "layer": "1", "head": "2"}))["head_view"]["data"][0]["z"])
    assert not np.allclose(weights, z)  # the switch changes what is drawn
    np.testing.assert_allclose(weights, getattr(t.attention, kind)[0, 0, 1].numpy(), atol=1e-5)
