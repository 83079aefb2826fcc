"""AER across training (aiayn.alignment_history): the history gold file, an independent recount of the shipped
histories, a synthetic history whose maps are the gold links, the CLI, and the page's "Across training" section."""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from aiayn import alignment_history as ah
from aiayn.alignment_eval import detokenize
from aiayn.analysis import alignment as al
from aiayn.files import sha256_file
from aiayn.model.config import KINDS
from aiayn.training.history import (FORMAT, HISTORY_FILE, VERSION, AttentionHistory, HistorySentence, load_history,
                                    write_history)

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = [ROOT / "checkpoints" / d for d in ("en-de", "de-en")]
PUNCT = {".", ",", "?", "!"}


# -- the gold file ------------------------------------------------------------------------------------------------
def test_history_gold_parses_in_range_and_is_built_from_its_source():
    pairs = al.read_gold(ah.HISTORY_GOLD_PATH)
    assert len({(tuple(p.german), tuple(p.english)) for p in pairs}) == len(pairs) == 5
    for p in pairs:
        assert p.sure and p.sure <= p.possible, p.line
        assert all(0 <= i < len(p.german) and 0 <= j < len(p.english) for i, j in p.possible), p.line
        # every word of both sides takes part in a link: these short sentences have no unaligned word
        assert {i for i, _ in p.possible} == set(range(len(p.german))), p.line
        assert {j for _, j in p.possible} == set(range(len(p.english))), p.line
    spec = importlib.util.spec_from_file_location("build_gold", ah.HISTORY_GOLD_PATH.parent / "build_gold.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    rows = build.convert(ah.HISTORY_GOLD_PATH.parent / "history.hand.txt")
    assert rows == ah.HISTORY_GOLD_PATH.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("ckpt", SHIPPED, ids=lambda p: p.name)
def test_every_recorded_sentence_has_exactly_one_gold_line(ckpt):
    hist = load_history(ckpt)
    pairs = al.read_gold(ah.HISTORY_GOLD_PATH)
    src_side, tgt_side = ("english", "german") if hist.direction == "en-de" else ("german", "english")
    for s in hist.sentences:
        hits = [p for p in pairs if detokenize(getattr(p, src_side)) == s.source
                and detokenize(getattr(p, tgt_side)) == s.reference]
        assert len(hits) == 1, s.source
        assert ah.match_gold(s, pairs, hist.direction) is hits[0]


def test_a_sentence_without_gold_is_a_clear_error():
    s = HistorySentence("Guten Morgen.", "Good morning.", ["▁Guten", "▁Morgen", ".", "</s>"],
                        ["<s>", "▁Good", "▁morning", "."], ["▁Good", "▁morning", ".", "</s>"])
    with pytest.raises(ValueError, match="no gold line for the recorded de-en sentence 'Guten Morgen.'"):
        ah.match_gold(s, al.read_gold(ah.HISTORY_GOLD_PATH), "de-en")


# -- an independent recount ---------------------------------------------------------------------------------------
def _owners(pieces):
    """Word of each piece by the ``▁`` marks alone (a new word at ``▁`` or a punctuation piece), -1 for specials:
    independent of the character matching of al.piece_words, and enough for the recorded sentences."""
    out, w = [], -1
    for p in pieces:
        if p.startswith("<"):
            out.append(-1)
            continue
        if p.startswith("▁") or p in PUNCT:
            w += 1
        out.append(w)
    return out


def _recount(hist, n, layer, head, shift):
    """AER of one head at state n with the "target" reading (each target word to its argmax source word), by
    loops over the pieces and Python sets, summed over the sentences (Och and Ney's corpus-level counts)."""
    a_s = a_p = n_a = n_s = 0
    for i, s in enumerate(hist.sentences):
        pair = ah.match_gold(s, al.read_gold(ah.HISTORY_GOLD_PATH), hist.direction)
        de_en = hist.direction == "de-en"
        n_src, n_tgt = (len(pair.german), len(pair.english)) if de_en else (len(pair.english), len(pair.german))
        rows = _owners(s.decoder_input_tokens if shift else s.output_tokens)
        cols = _owners(s.src_tokens)
        m = hist.stack(i, "cross")[n, layer, head].astype(np.float64)
        links = set()
        for t in range(n_tgt):
            mine = [r for r in range(len(rows)) if rows[r] == t]
            scores = [sum(m[r, c] for r in mine for c in range(len(cols)) if cols[c] == w) / max(len(mine), 1)
                      for w in range(n_src)]
            best = scores.index(max(scores))
            links.add((best, t) if de_en else (t, best))  # (German, English)
        a_s += len(links & pair.sure)
        a_p += len(links & pair.possible)
        n_a += len(links)
        n_s += len(pair.sure)
    return 1 - (a_s + a_p) / (n_a + n_s)


@pytest.mark.parametrize("ckpt", SHIPPED, ids=lambda p: p.name)
@pytest.mark.parametrize("shift", [False, True])
def test_aer_per_state_equals_an_independent_count(ckpt, shift):
    hist = load_history(ckpt)
    payload = ah.history_payload(hist)
    r = payload["readings"]["target_shift" if shift else "target"]
    rng = np.random.default_rng(0)
    for n in (0, len(hist.steps) // 2, len(hist.steps) - 1):
        layer, head = int(rng.integers(hist.n_layers)), int(rng.integers(hist.n_heads))
        assert r["head_aer"][n][layer][head] == pytest.approx(_recount(hist, n, layer, head, shift), abs=1e-4)
    b = r["final_best_head"]
    assert b["aer"][-1] == pytest.approx(np.nanmin(r["head_aer"][-1]))
    assert b["aer"] == [r["head_aer"][n][b["layer"]][b["head"]] for n in range(len(hist.steps))]


@pytest.mark.parametrize("ckpt", SHIPPED, ids=lambda p: p.name)
def test_shipped_alignment_history_is_fresh(ckpt):
    """The shipped alignment_history.json is what aiayn align computes now from the history and its gold file."""
    shipped = json.loads((ckpt / ah.HISTORY_ALIGN_FILE).read_text(encoding="utf-8"))
    assert shipped["history_sha256"] == sha256_file(ckpt / HISTORY_FILE), "rerun aiayn align --history-only"
    assert shipped["gold_sha256"] == sha256_file(ah.HISTORY_GOLD_PATH), "rerun aiayn align --history-only"
    assert shipped == json.loads(json.dumps(ah.history_payload(load_history(ckpt))))


# -- a synthetic history whose maps are the gold links ------------------------------------------------------------
def _pieces(words):
    return [w if w in PUNCT else "▁" + w for w in words]


def gold_history(direction: str, steps=(0, 100), n_layers=2, n_heads=3, shift=False):
    """An attention history of every history gold pair whose cross-attention puts each target word's row (the row
    that predicts it; with ``shift`` the row it is fed to) uniformly on the source words it links to (sure or
    possible): every head at every state. Returns (history, index, tensors)."""
    sentences, maps = [], []
    for pair in al.read_gold(ah.HISTORY_GOLD_PATH):
        src, tgt = (pair.english, pair.german) if direction == "en-de" else (pair.german, pair.english)
        s = HistorySentence(detokenize(src), detokenize(tgt), _pieces(src) + ["</s>"], ["<s>"] + _pieces(tgt),
                            _pieces(tgt) + ["</s>"])
        T, S = len(s.output_tokens), len(s.src_tokens)
        cross = np.zeros((T, S))
        cross[:, -1] = 1.0  # rows of no word look at </s>
        for t in range(len(tgt)):
            row = t + 1 if shift else t
            linked = [g if direction == "de-en" else e for g, e in pair.possible
                      if (e if direction == "de-en" else g) == t]
            cross[row] = 0.0
            cross[row, linked] = 1.0 / len(linked)
        sentences.append(s)
        maps.append({"encoder": np.full((S, S), 1.0 / S), "decoder": np.full((T, T), 1.0 / T),
                     "cross": cross})
    tensors = {f"s{i}/{k}": np.tile(m[k], (len(steps), n_layers, n_heads, 1, 1)).astype(np.float16)
               for i, m in enumerate(maps) for k in m}
    index = {"format": FORMAT, "version": VERSION, "direction": direction, "steps": list(steps),
             "n_layers": n_layers, "n_heads": n_heads,
             "sentences": [{"source": s.source, "reference": s.reference, "src_tokens": s.src_tokens,
                            "decoder_input_tokens": s.decoder_input_tokens, "output_tokens": s.output_tokens}
                           for s in sentences]}
    hist = AttentionHistory(list(steps), sentences, [{k: tensors[f"s{i}/{k}"].astype(np.float32) for k in KINDS}
                                                     for i in range(len(sentences))], direction, n_layers, n_heads)
    return hist, index, tensors


@pytest.mark.parametrize("direction", ["en-de", "de-en"])
@pytest.mark.parametrize("shift", [False, True])
def test_maps_that_are_the_gold_links_score_zero(direction, shift):
    hist, _, _ = gold_history(direction, shift=shift)
    payload = ah.history_payload(hist)
    assert payload["sure_links"] == sum(len(p.sure) for p in al.read_gold(ah.HISTORY_GOLD_PATH))
    union = payload["readings"]["union_shift" if shift else "union"]
    assert np.asarray(union["head_aer"]).shape == (2, 2, 3)
    assert np.allclose(union["head_aer"], 0.0) and np.allclose(union["model_mean_aer"], 0.0)
    # the same maps read with the other alignment of rows are wrong: the shift matters
    other = payload["readings"]["union" if shift else "union_shift"]
    assert min(other["model_mean_aer"]) > 0.3


# -- the CLI ------------------------------------------------------------------------------------------------------
def test_cli_history_only(tiny_checkpoints, tmp_path, capsys):
    from aiayn.alignment_eval import cli_main

    ckpt = tmp_path / "ck"
    shutil.copytree(tiny_checkpoints / "de-en", ckpt)
    assert cli_main(["--checkpoint", str(ckpt), "--history-only"]) == 0
    assert "no attention history" in capsys.readouterr().out and not (ckpt / ah.HISTORY_ALIGN_FILE).exists()
    _, index, tensors = gold_history("de-en", steps=(0, 50, 100))
    write_history(ckpt / HISTORY_FILE, tensors, index)
    assert cli_main(["--checkpoint", str(ckpt), "--history-only"]) == 0
    payload = json.loads((ckpt / ah.HISTORY_ALIGN_FILE).read_text(encoding="utf-8"))
    assert payload["steps"] == [0, 50, 100] and payload["readings"]["union"]["model_mean_aer"] == [0.0] * 3
    assert "AER at 3 recorded training states" in capsys.readouterr().out
    bad = tmp_path / "bad.tsv"
    bad.write_text("Ich habe keine Zeit .\tI have no time .\t0-0 1-1 2-2 3-3 4-4\n", encoding="utf-8")
    assert cli_main(["--checkpoint", str(ckpt), "--history-only", "--history-gold", str(bad)]) == 2
    assert "no gold line for the recorded de-en sentence" in capsys.readouterr().err


# -- the page -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def with_history(tiny_checkpoints, tmp_path_factory):
    """Tiny checkpoints whose de-en has alignment.json, a synthetic attention history and its
    alignment_history.json; en-de has alignment.json but no history."""
    from aiayn import Translator
    from aiayn.alignment_eval import ALIGN_FILE, align_checkpoint

    root = tmp_path_factory.mktemp("with_history")
    for d in ("en-de", "de-en"):
        shutil.copytree(tiny_checkpoints / d, root / d)
        payload = align_checkpoint(Translator.load(root / d, device="cpu"))
        (root / d / ALIGN_FILE).write_text(json.dumps(payload))
    _, index, tensors = gold_history("de-en", steps=(0, 50, 100), shift=True)
    write_history(root / "de-en" / HISTORY_FILE, tensors, index)
    ah.align_history(root / "de-en")
    return root


@pytest.fixture()
def app_env(with_history, monkeypatch):
    import streamlit as st

    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(with_history))
    st.cache_data.clear()
    st.cache_resource.clear()
    yield with_history
    st.cache_data.clear()
    st.cache_resource.clear()


def test_page_shows_aer_across_training(app_env):
    from app_pages import arr, charts, open_page

    payload = json.loads((app_env / "de-en" / ah.HISTORY_ALIGN_FILE).read_text(encoding="utf-8"))
    at = open_page("pages/11_Alignment_and_Attribution.py",
                   {"direction": "de-en", "reading": "union_shift", "astate": "50"})
    assert not at.exception, at.exception
    c = charts(at)
    assert {"aer_history", "aer_history_grid"} <= set(c)
    r = payload["readings"]["union_shift"]
    lines = {t["name"]: arr(t["y"]) for t in c["aer_history"]["data"]}
    assert len(lines) == 3
    np.testing.assert_allclose(lines["model mean"], r["model_mean_aer"])
    assert list(arr(c["aer_history"]["data"][0]["x"])) == [0, 50, 100]
    np.testing.assert_allclose(arr(c["aer_history_grid"]["data"][0]["z"]), np.asarray(r["head_aer"][1]))
    assert any("Across training" in s.value for s in at.subheader)


def test_page_without_history_says_so(app_env):
    from app_pages import charts, open_page

    at = open_page("pages/11_Alignment_and_Attribution.py", {"direction": "en-de"})
    assert not at.exception, at.exception
    assert "aer_history" not in charts(at)
    assert any("no attention history" in i.value for i in at.info)


def test_docs_and_readme_quote_the_shipped_numbers():
    """docs/alignment.md quotes the first and last state of the shipped histories (the `source` reading with the
    shift: model mean, best layer mean, best head), the README the best head."""
    docs = (ROOT / "docs" / "alignment.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for ckpt in SHIPPED:
        r = json.loads((ckpt / ah.HISTORY_ALIGN_FILE).read_text(encoding="utf-8"))["readings"]["source_shift"]
        b = r["final_best_head"]
        for series in (r["model_mean_aer"], r["final_best_layer"]["aer"], b["aer"]):
            assert f"{series[0]:.3f} -> {series[-1]:.3f}" in docs, ckpt.name
        head = f"layer {b['layer'] + 1} head {b['head'] + 1}"
        assert f"{head}: {b['aer'][0]:.3f} -> {b['aer'][-1]:.3f}" in docs, ckpt.name
        quoted = (f"{head} from {b['aer'][0]:.3f}",
                  f"{head}, read with the shift by one, goes from an AER of {b['aer'][0]:.3f}")
        assert any(q in readme for q in quoted), ckpt.name


def test_download_frame_holds_every_readout():
    from aiayn.app.alignment_history import long_frame

    payload = json.loads((SHIPPED[0] / ah.HISTORY_ALIGN_FILE).read_text(encoding="utf-8"))
    r, steps, L, H = payload["readings"]["target"], payload["steps"], payload["layers"], payload["heads"]
    f = long_frame(r, steps, offset=100)
    assert len(f) == len(steps) * (L * H + L + 1) and (f["lifetime_step"] == f["step"] + 100).all()
    last = f[(f["step"] == steps[-1]) & (f["readout"] == "head")]
    np.testing.assert_allclose(last["aer"].to_numpy().reshape(L, H), r["head_aer"][-1])
    model = f[f["readout"] == "model_mean"]
    assert model["aer"].tolist() == r["model_mean_aer"] and model["layer"].isna().all()


def test_page_state_slider_moves_the_grid(app_env):
    from app_pages import arr, charts, open_page

    payload = json.loads((app_env / "de-en" / ah.HISTORY_ALIGN_FILE).read_text(encoding="utf-8"))
    at = open_page("pages/11_Alignment_and_Attribution.py", {"direction": "de-en", "reading": "target"})
    assert at.select_slider(key="astate").value == "100"  # the last state by default
    at = at.select_slider(key="astate").set_value("0").run()
    assert not at.exception, at.exception
    grid = arr(charts(at)["aer_history_grid"]["data"][0]["z"])
    np.testing.assert_allclose(grid, np.asarray(payload["readings"]["target"]["head_aer"][0]))
    at = open_page("pages/11_Alignment_and_Attribution.py", {"direction": "de-en", "astate": "77"})
    assert any("astate" in w.value and "0, 50, 100" in w.value for w in at.warning)
