"""Tests for aiayn.tokenizer: a tiny joint SentencePiece model trained on the Ding fixture (a second or so)."""
from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from aiayn.data import parse_ding
from aiayn.tokenizer import SPECIAL_IDS, Tokenizer, train_sentencepiece

FIX = Path(__file__).parent / "fixtures"
VOCAB = 500

ROUND_TRIP = [
    "Er wird an der Konferenz nicht teilnehmen.",
    "Größere Übungen für Mädchen und Jungen: ß, ä, ö, ü!",
    "He won't be attending the conference.",
    "Emoji 😀🚀 and a flag 🇩🇪 survive.",
    "日本語の文章と中文句子。",
    "Zahlen: 3,14 und 1.000.000 € — „Zitat“ 'quote'",
]


def _texts():
    pairs, _ = parse_ding(FIX / "ding_sample.txt")
    return [p.de for p in pairs] + [p.en for p in pairs]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return train_sentencepiece(_texts(), tmp_path_factory.mktemp("spm") / "spm.model", vocab_size=VOCAB)


@pytest.fixture(scope="module")
def tok(model_path):
    return Tokenizer.load(model_path)


def test_special_ids(tok):
    assert SPECIAL_IDS == dict(pad=0, unk=1, bos=2, eos=3)
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
    assert [tok.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tok.vocab_size == VOCAB
    assert tok.piece_to_id("</s>") == 3


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_round_trip(tok, text):
    ids = tok.encode(text)
    assert tok.unk_id not in ids            # byte fallback instead of <unk>
    assert tok.bos_id not in ids and tok.eos_id not in ids
    assert tok.decode(ids) == text


def test_unseen_characters_use_byte_pieces(tok):
    pieces = tok.encode_pieces("😀")
    # U+1F600 is 4 UTF-8 bytes: F0 9F 98 80
    assert [p for p in pieces if p.startswith("<0x")] == ["<0xF0>", "<0x9F>", "<0x98>", "<0x80>"]


def test_joint_vocabulary_covers_both_languages(tok):
    # frequent words of both languages of the fixture are single pieces of the one shared model
    for word in ("▁die", "▁und", "▁nicht", "▁the", "▁for"):
        assert tok.piece_to_id(word) != tok.unk_id, word


def test_decode_skips_pad_bos_eos_and_checks_range(tok):
    ids = tok.encode("Guten Morgen!")
    assert tok.decode([tok.bos_id] + ids + [tok.eos_id, tok.pad_id, tok.pad_id]) == "Guten Morgen!"
    with pytest.raises(ValueError, match="out of range"):
        tok.decode([VOCAB])
    with pytest.raises(ValueError):
        tok.id_to_piece(-1)


def test_pickle_round_trip(tok):
    text = "Die Krankheit ist ansteckend."
    clone = pickle.loads(pickle.dumps(tok))  # as DataLoader workers receive it: the model's bytes
    assert clone.encode(text) == tok.encode(text) and clone.vocab_size == tok.vocab_size
    assert clone.source == tok.source and clone is not tok


def test_training_is_deterministic(tmp_path, model_path):
    other = train_sentencepiece(_texts(), tmp_path / "again.model", vocab_size=VOCAB)
    assert other.read_bytes() == Path(model_path).read_bytes()


def test_concurrent_encode_matches_sequential(tok):
    texts = _texts()[:400]
    expected = [tok.encode(t) for t in texts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(tok.encode, texts))
    assert got == expected
    assert tok.encode_batch(texts) == expected


def test_load_errors(tmp_path, model_path):
    with pytest.raises(FileNotFoundError, match="missing.model"):
        Tokenizer.load(tmp_path / "missing.model")
    truncated = tmp_path / "truncated.model"
    truncated.write_bytes(Path(model_path).read_bytes()[:1000])
    with pytest.raises(ValueError, match="truncated.model"):
        Tokenizer.load(truncated)
    garbage = tmp_path / "garbage.model"
    garbage.write_bytes(b"this is not a sentencepiece model\x00\xff")
    with pytest.raises(ValueError, match="garbage.model"):
        Tokenizer.load(garbage)
    empty = tmp_path / "empty.model"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty.model is not a valid SentencePiece model: empty model data"):
        Tokenizer.load(empty)


def test_train_errors(tmp_path):
    with pytest.raises(ValueError, match="vocab_size"):
        train_sentencepiece(["a b c"], tmp_path / "m.model", vocab_size=200)
    with pytest.raises(ValueError, match="line break"):
        train_sentencepiece(["eine Zeile\nzwei Zeilen"], tmp_path / "m.model", vocab_size=300)
    with pytest.raises(ValueError, match="no non-empty text"):
        train_sentencepiece(["", "  "], tmp_path / "m.model", vocab_size=300)
    assert not (tmp_path / "m.model").exists()


def test_tiny_vocabulary_lowers_coverage_with_warning(tmp_path):
    # 320 pieces = 4 specials + 256 bytes + 60: fewer than the fixture's distinct characters
    with pytest.warns(UserWarning, match="cannot hold all"):
        path = train_sentencepiece(_texts(), tmp_path / "tiny.model", vocab_size=320)
    tiny = Tokenizer.load(path)
    assert tiny.vocab_size == 320
    text = "Größere Übungen für Mädchen: ß!"
    ids = tiny.encode(text)
    assert tiny.unk_id not in ids and tiny.decode(ids) == text
