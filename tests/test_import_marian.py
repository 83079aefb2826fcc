"""`aiayn import-marian` and the imported checkpoint: a tiny random ``MarianMTModel`` with real SentencePiece models
trained here from the Ding fixture, saved with ``save_pretrained`` (tests/marian_fixture.py); nothing is downloaded.
Expectations come from Hugging Face itself (``MarianTokenizer``, ``generate``). Needs ``transformers`` to build the
source (requirements-dev.txt); the loader is tested with ``transformers`` blocked."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from marian_fixture import served_teachers_folder, write_marian  # noqa: E402

from aiayn.import_marian import cli_main  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SENTENCES = ["The cat sat on the mat.", "I am in work from 9 until 5 each day.", "the nuts and bolts",
             "These are decisions which do not produce a binding effect.", "Attention is all you need.",
             "We went home."]


@pytest.fixture(scope="module")
def marian_source(tmp_path_factory, fixture_pairs) -> Path:
    return write_marian(tmp_path_factory.mktemp("marian") / "opus-mt-tiny", fixture_pairs)


@pytest.fixture(scope="module")
def hf(marian_source):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = transformers.MarianTokenizer.from_pretrained(str(marian_source))
    return transformers.MarianMTModel.from_pretrained(str(marian_source)).eval(), tok


@pytest.fixture(scope="module")
def imported(marian_source, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("imported") / "opus-mt-tiny-en-de"
    assert cli_main([str(marian_source), "--out", str(out), "--dtype", "float32", "--no-progress"]) == 0
    return out


def test_the_checkpoint_directory(imported):
    assert {p.name for p in imported.iterdir()} == {"config.json", "model.safetensors", "source.spm", "target.spm",
                                                     "vocab.json", "MODEL_CARD.md"}
    assert imported.stat().st_mode & 0o555 == 0o555  # readable by the app's server, whoever runs it
    config = json.loads((imported / "config.json").read_text(encoding="utf-8"))
    meta = config["meta"]
    assert (config["dtype"], meta["direction"], meta["origin"], meta["imported"]["from"]) == (
        "float32", "en-de", "imported", "Opus-MT")
    assert config["model"]["decoder_start"] == "pad" and config["model"]["activation"] == "swish"
    agreement = meta["imported"]["agreement"]
    assert agreement["greedy_equal"] == agreement["ids_equal"] == agreement["sentences"] == 4
    assert agreement["max_abs_logprob_diff"] < 1e-4
    card = (imported / "MODEL_CARD.md").read_text(encoding="utf-8")
    for needle in ("CC-BY 4.0", "Tiedemann", "Thottingal", "imported: Opus-MT", "concatenated", "Greedy output",
                   f"{agreement['max_abs_logprob_diff']:.2e}"):
        assert needle in card, needle


def test_float16_weights(marian_source, tmp_path, capsys):
    from safetensors import safe_open

    out = tmp_path / "fp16"
    assert cli_main([str(marian_source), "--out", str(out), "--no-progress"]) == 0
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert {str(f.get_tensor(k).dtype) for k in f.keys()} == {"torch.float16"}
    assert "float16 weights" in capsys.readouterr().out


def test_tokenizer_without_transformers_matches_marian_tokenizer(imported, hf, fixture_pairs):
    from aiayn.marian_tokenizer import MarianSentencePiece

    _, tok = hf
    ours = MarianSentencePiece.load(imported, bos_id=1)
    assert (ours.vocab_size, ours.pad_id, ours.eos_id, ours.unk_id) == (len(tok), tok.pad_token_id, 0, 1)
    texts = [p.en for p in fixture_pairs[:150]] + [p.de for p in fixture_pairs[:150]] + [
        "Hello </s> world", "a<unk>b <pad>", "漢字 and ö", ">>de<< the cat", "  spaced   out  "]
    unk = 0
    for text in texts:
        ids = tok(text)["input_ids"]
        assert ours.encode(text) + [ours.eos_id] == ids, text
        assert ours.pieces(ids) == tok.convert_ids_to_tokens(ids), text
        assert ours.decode(ids) == tok.decode(ids, skip_special_tokens=True), text
        unk += ours.unk_id in ids
    assert unk > 0  # the unknown-piece path was exercised
    target = [tok.convert_tokens_to_ids(p) for p in ("▁Die", "▁Katze")]
    assert ours.decode(target) == tok.decode(target, skip_special_tokens=True)
    with pytest.raises(ValueError, match="out of range"):
        ours.id_to_piece(len(tok))


def test_references_and_prefixes_are_cut_by_the_target_model(imported, hf, fixture_pairs):
    """A reference (teacher forcing) and a forced prefix are target-language text: cut by ``target.spm`` as
    ``MarianTokenizer(text_target=...)`` cuts them, not by the source model (the two differ on German text)."""
    from aiayn import Translator, calls

    _, tok = hf
    tr = Translator.load(imported, device="cpu")
    texts = [p.de for p in fixture_pairs[:60]]
    differ = 0
    for text in texts:
        want = tok(text_target=text)["input_ids"]
        assert len(want) <= tr.cfg.max_len and calls.encode_reference(tr.tokenizer, tr.cfg, text).ids == want, text
        assert tr.prefix_ids(text) == want[:-1], text
        differ += tok(text)["input_ids"] != want
    assert differ > 0  # the source model cuts some of these German texts otherwise: the test can tell them apart
    from aiayn.interop_marian import MarianTokenizerAdapter

    adapter = MarianTokenizerAdapter(tok, tr.cfg)  # the transformers path agrees with the sentencepiece-only one
    assert all(adapter.encode_target(t) == tr.tokenizer.encode_target(t) for t in texts)
    forced = tr.translate(texts[0], prefix=texts[1], beam_size=1, max_len=40)
    assert forced.output_ids[: len(tok(text_target=texts[1])["input_ids"]) - 1] == tok(text_target=texts[1])["input_ids"][:-1]


_LOAD_BLOCKED = """
import json, sys
sys.modules["transformers"] = None  # import transformers now raises ImportError
from aiayn import Translator
tr = Translator.load(sys.argv[1], device="cpu")
assert "transformers" not in [m for m in sys.modules if sys.modules[m] is not None]
out = []
for text in json.loads(sys.argv[2]):
    t = tr.translate(text, beam_size=1, max_len=12)
    out.append({"src": t.src_ids, "ids": t.output_ids, "text": t.text, "fed": t.decoder_input_tokens,
                "cross": list(t.attention.cross.shape)})
print(json.dumps(out))
"""


def test_loads_and_translates_without_transformers(imported, hf):
    model, tok = hf
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", _LOAD_BLOCKED, str(imported), json.dumps(SENTENCES)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    import torch

    pad = tok.pad_token_id
    ended = 0
    for text, g in zip(SENTENCES, got):
        batch = tok([text], return_tensors="pt")
        assert g["src"] == batch["input_ids"][0].tolist()
        with torch.no_grad():
            out = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=12, bad_words_ids=[[pad]],
                                 forced_eos_token_id=None)
        expected = [i for i in out[0, 1:].tolist() if i != pad]
        assert g["ids"] == expected and g["text"] == tok.decode(out[0], skip_special_tokens=True)
        assert g["fed"][0] == "<pad>" and g["cross"] == [2, 1, 2, len(expected), len(g["src"])]
        ended += expected[-1] == tok.eos_token_id
    assert len({i for g in got for i in g["ids"]}) > 2  # not one piece everywhere
    assert 0 < ended < len(SENTENCES)  # some outputs end with </s> of their own, others run to the length limit


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return [line for line in err.splitlines() if line.startswith("aiayn import-marian:")][-1]


def _edited_copy(source: Path, tmp_path: Path, **changes) -> Path:
    copy = tmp_path / "edited"
    shutil.copytree(source, copy)
    config = json.loads((copy / "config.json").read_text(encoding="utf-8"))
    config.update(changes)
    (copy / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return copy


@pytest.mark.parametrize("changes, needle", [
    (dict(model_type="bart"), "not a Marian model"),
    (dict(activation_function="gelu_new"), "activation_function"),
    (dict(scale_embedding=False), "scale_embedding"),
    (dict(normalize_before=True), "normalize_before"),
])
def test_refused_models_name_the_field(marian_source, tmp_path, capsys, changes, needle):
    src = _edited_copy(marian_source, tmp_path, **changes)
    assert cli_main([str(src), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert needle in _one_error(capsys)
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_missing_files_and_bad_targets(marian_source, tmp_path, capsys):
    src = tmp_path / "no_vocab"
    shutil.copytree(marian_source, src)
    (src / "vocab.json").unlink()
    assert cli_main([str(src), "--out", str(tmp_path / "a"), "--no-progress"]) == 2
    assert "vocab.json" in _one_error(capsys)
    assert cli_main([str(tmp_path / "nowhere" / "x y"), "--out", str(tmp_path / "b"), "--no-progress"]) == 2
    assert "no such folder" in _one_error(capsys)
    (src / "vocab.json").write_text("{}")
    (src / "tokenizer_config.json").write_text("{not json")
    assert cli_main([str(src), "--out", str(tmp_path / "c"), "--no-progress"]) == 2
    assert "tokenizer_config.json is not valid JSON" in _one_error(capsys)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    assert cli_main([str(marian_source), "--out", str(busy), "--no-progress"]) == 2
    assert "not an empty folder" in _one_error(capsys) and (busy / "keep.txt").read_text() == "mine"


def test_registered_in_the_cli(capsys):
    from aiayn.cli import main

    assert main([]) == 0 and "import-marian" in capsys.readouterr().out


# -- the app's views on an imported model (AppTest, the imported model as the en-de checkpoint) -----------------

@pytest.fixture()
def app_with_imported(imported, tiny_checkpoints, tmp_path, monkeypatch):
    import streamlit as st

    root = tmp_path / "checkpoints"
    shutil.copytree(imported, root / "en-de")
    shutil.copytree(tiny_checkpoints / "de-en", root / "de-en")
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(root))
    st.cache_data.clear()
    st.cache_resource.clear()
    yield root
    st.cache_data.clear()
    st.cache_resource.clear()


PAGES = sorted(f"pages/{p.name}" for p in (REPO / "pages").glob("*.py"))


@pytest.mark.parametrize("page", PAGES)
def test_every_page_runs_on_the_imported_model(app_with_imported, page):
    from app_pages import charts, open_page

    at = open_page(page, {"text": "The cat sat on the mat."} if "Compare" not in page else None)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    if page in ("pages/2_Attention_Explorer.py", "pages/7_Head_Ablation.py", "pages/8_Attention_Rollout.py",
                "pages/9_Compare_Sentences.py"):
        assert charts(at), page  # the model's maps are drawn


def test_explorer_and_head_statistics_show_the_imported_model(app_with_imported):
    from app_pages import arr, charts, open_page

    from aiayn import Translator

    tr = Translator.load(app_with_imported / "en-de", device="cpu")
    t = tr.translate("The cat sat on the mat.", beam_size=4, length_penalty=0.6, n_best=4)
    at = open_page("pages/2_Attention_Explorer.py", {"text": "The cat sat on the mat."})
    head = charts(at)["head_view"]["data"][0]
    esc = [f"{i}:{p}".replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
           for i, p in enumerate(t.src_tokens)]
    assert head["x"] == esc and t.src_tokens[-1] == "</s>"
    assert head["y"][0].startswith("0:&lt;pad&gt;→")  # Opus-MT's decoder starts from <pad>
    assert arr(head["z"]).shape == tuple(t.attention.cross.shape[-2:])
    at = open_page("pages/2_Attention_Explorer.py", {"text": "The cat sat on the mat.", "kind": "encoder"},
                   tab="stats")
    assert len(at.dataframe[0].value) == tr.cfg.n_layers * tr.cfg.n_heads


# -- the catalogue of checkpoints (aiayn.catalog) -----------------------------------------------------------------

def test_catalog_lists_shipped_first_then_imported(imported, tiny_checkpoints, tmp_path):
    from aiayn.catalog import list_checkpoints

    root = tmp_path / "checkpoints"
    shutil.copytree(tiny_checkpoints / "de-en", root / "de-en")
    shutil.copytree(tiny_checkpoints / "en-de", root / "en-de")
    shutil.copytree(imported, root / "opus-mt-en-de")
    shutil.copytree(imported, root / ".opus-mt-fr-en.partial")  # an import being written: hidden
    (root / "half").mkdir()
    (root / "half" / "config.json").write_text((imported / "config.json").read_text(encoding="utf-8"))
    (root / "notes.txt").write_text("not a folder")
    entries = list_checkpoints(root)
    assert [e.name for e in entries] == ["en-de", "de-en", "opus-mt-en-de"]
    shipped, imp = entries[0], entries[2]
    assert (shipped.origin, shipped.shipped, shipped.direction) == ("trained here", True, "en-de")
    assert (imp.origin, imp.shipped, imp.direction) == ("imported: Opus-MT", False, "en-de")
    config = json.loads((imported / "config.json").read_text(encoding="utf-8"))
    assert imp.num_parameters == config["num_parameters"]
    assert imp.weights_bytes == (imported / "model.safetensors").stat().st_size
    assert imp.label == f"opus-mt-en-de · en-de · {config['num_parameters']:,} parameters · imported: Opus-MT"  # tiny
    assert shipped.label.startswith("en-de · ") and "en-de · en-de" not in shipped.label
    assert list_checkpoints(tmp_path / "missing") == []


def test_across_training_says_an_imported_model_has_no_history(app_with_imported):
    from app_pages import open_page

    from aiayn.app.history import HOW_TO, IMPORTED_NOTICE

    at = open_page("pages/2_Attention_Explorer.py", tab="history")
    assert not at.exception
    assert [i.value for i in at.info if "imported" in i.value] == [IMPORTED_NOTICE.format(source="Opus-MT")]
    assert HOW_TO not in [c.value for c in at.caption]


def test_models_for_a_direction_and_resolving_a_url_value(imported, tiny_checkpoints, tmp_path):
    from aiayn.catalog import list_checkpoints, models_for, resolve_checkpoint

    root = tmp_path / "checkpoints"
    shutil.copytree(tiny_checkpoints / "en-de", root / "en-de")
    shutil.copytree(tiny_checkpoints / "de-en", root / "de-en")
    shutil.copytree(imported, root / "opus-mt-en-de")
    entries = list_checkpoints(root)
    assert [e.name for e in models_for(entries, "en-de")] == ["en-de", "opus-mt-en-de"]
    assert [e.name for e in models_for(entries, "de-en")] == ["de-en"]
    assert resolve_checkpoint(root, "en-de", "opus-mt-en-de") == root / "opus-mt-en-de"
    for foreign in (None, "", "en-de", "opus-mt-fr-en", "../checkpoints/opus-mt-en-de", ".hidden"):
        assert resolve_checkpoint(root, "en-de", foreign) == root / "en-de", foreign
    assert resolve_checkpoint(root, "de-en", "opus-mt-en-de") == root / "de-en"  # another direction's model


PICKER_SCRIPT = """
import streamlit as st

from aiayn.app.model_picker import chosen_checkpoint, model_picker

direction = st.radio("direction", ["en-de", "de-en"], key="direction", bind="query-params")
name = model_picker(direction)
st.write(f"served: {chosen_checkpoint(direction).name} ({name})")
"""


def test_model_picker_offers_every_model_of_the_direction(imported, tiny_checkpoints, tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    root = tmp_path / "checkpoints"
    shutil.copytree(tiny_checkpoints / "en-de", root / "en-de")
    shutil.copytree(tiny_checkpoints / "de-en", root / "de-en")
    shutil.copytree(imported, root / "opus-mt-en-de")
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(root))
    script = tmp_path / "picker.py"
    script.write_text(PICKER_SCRIPT, encoding="utf-8")

    def run(**query):
        at = AppTest.from_file(str(script))
        for k, v in query.items():
            at.query_params[k] = v
        return at.run()

    at = run()
    box = at.radio(key="model")
    assert box.options == ["en-de", "opus-mt-en-de"]
    captions = list(box.proto.captions)
    n = json.loads((imported / "config.json").read_text(encoding="utf-8"))["num_parameters"]
    assert captions[0].endswith("trained here")
    assert captions[1].startswith(f"{n:,} parameters · ") and captions[1].endswith("imported: Opus-MT")
    assert at.markdown[0].value == "served: en-de (en-de)"  # the shipped model is the default
    box.set_value("opus-mt-en-de").run()
    assert at.markdown[0].value == "served: opus-mt-en-de (opus-mt-en-de)"
    at.radio(key="direction").set_value("de-en").run()
    assert [r.key for r in at.radio] == ["direction"] and at.markdown[0].value == "served: de-en (de-en)"
    # the choice made for en-de is not silently kept or dropped: the sidebar says which model serves de-en now
    assert "`opus-mt-en-de` translates en-de; de-en is served by its shipped model" in at.caption[0].value
    at.radio(key="direction").set_value("en-de").run()  # ... and, as the caption promises, switching back brings it back
    assert at.markdown[0].value == "served: opus-mt-en-de (opus-mt-en-de)" and not at.caption
    mixed = run(direction="de-en", model="opus-mt-en-de")  # a link that names a model of the other direction
    assert not mixed.warning and mixed.markdown[0].value == "served: de-en (de-en)"
    assert "`opus-mt-en-de` translates en-de" in mixed.caption[0].value
    linked = run(model="opus-mt-en-de")  # a link (the choice is in the URL) opens the model
    assert linked.markdown[0].value == "served: opus-mt-en-de (opus-mt-en-de)"
    assert linked.query_params["model"] == "opus-mt-en-de"
    bad = run(model="../../etc")
    assert "model=../../etc" in bad.warning[0].value and bad.markdown[0].value == "served: en-de (en-de)"


def test_sweep_after_import_runs_on_the_written_checkpoint(marian_source, tmp_path, capsys):
    """--sweep hands the new directory to `aiayn sweep` (the sweep itself is tested in tests/test_ablation.py); a
    direction without curated examples is refused by the sweep, after the import itself has been written."""
    out = tmp_path / "fr-en"
    assert cli_main([str(marian_source), "--out", str(out), "--direction", "fr-en", "--sweep", "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert f"wrote {out}" in captured.out and (out / "model.safetensors").is_file()
    assert "head sweep: unknown direction 'fr-en'" in captured.err


def test_the_sidebar_picker_serves_the_imported_model(imported, tiny_checkpoints, tmp_path, monkeypatch):
    import streamlit as st
    from app_pages import charts, open_page

    from aiayn import Translator

    root = served_teachers_folder(imported, tiny_checkpoints, tmp_path, monkeypatch)
    text = "The cat sat on the mat."
    shown = {}
    for model in ("opus-mt-en-de", None):
        at = open_page("pages/2_Attention_Explorer.py", {"text": text, **({"model": model} if model else {})})
        assert not at.exception, at.exception
        assert at.radio(key="model").value == (model or "en-de")
        shown[model] = charts(at)["head_view"]["data"][0]["x"]
    imported_tokens = Translator.load(root / "opus-mt-en-de", device="cpu").translate(text).src_tokens
    shipped_tokens = Translator.load(root / "en-de", device="cpu").translate(text).src_tokens
    assert imported_tokens != shipped_tokens  # two tokenizers: the labels tell which model was served
    assert [x.split(":", 1)[1] for x in shown["opus-mt-en-de"]] == [t.replace("<", "&lt;").replace(">", "&gt;") for t in imported_tokens]
    assert [x.split(":", 1)[1] for x in shown[None]] == [t.replace("<", "&lt;").replace(">", "&gt;") for t in shipped_tokens]
    st.cache_data.clear()
    st.cache_resource.clear()


def test_a_class_page_announces_its_sentence_for_the_model_it_will_be_served(imported, tiny_checkpoints, tmp_path,
                                                                             monkeypatch):
    """The announcement (aiayn.serving.Announcements) names the checkpoint of the model the URL chose, the key of
    that model's decode queue: a class on the imported model never waits for a visitor of the shipped one."""
    import streamlit as st
    from app_pages import open_page

    from aiayn.app import frame, models

    root = served_teachers_folder(imported, tiny_checkpoints, tmp_path, monkeypatch)
    said: list = []
    real = frame.announce_sentence
    monkeypatch.setattr(frame, "announce_sentence", lambda *a: (said.append(a), real(*a)))
    for query in ({"model": "opus-mt-en-de"}, {}, {"direction": "de-en"}):
        at = open_page("pages/1_Translate.py", {"text": "The cat sat on the mat.", **query})
        assert not at.exception, at.exception
    assert said == [(str(root / "opus-mt-en-de"),), (str(root / "en-de"),), (str(root / "de-en"),)]
    for (path,) in said:  # the queue the page's sentence went to carries the same key
        assert models._decode_queue(path, models.checkpoint_stamp(path)).announce_key == path
    assert len(models.announcements()) == 0
    st.cache_data.clear()
    st.cache_resource.clear()


def test_parameter_counts_read_right_for_every_size():
    from aiayn.catalog import count_parameters

    assert count_parameters(73_886_208) == "73.9M parameters"
    assert count_parameters(7_120) == "7,120 parameters"  # a tiny model is never "0.0M"
    assert count_parameters(99_999) == "99,999 parameters" and count_parameters(100_000) == "0.1M parameters"


def test_cli_help_keeps_every_description_in_one_column(capsys):
    from aiayn.cli import COMMANDS, main

    main(["--help"])
    out = capsys.readouterr().out
    starts = {line.index(help_) for line in out.splitlines() for _, _, help_ in COMMANDS.values() if help_ in line}
    assert len(starts) == 1, out
