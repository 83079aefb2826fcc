"""A tiny Opus-MT-like model on disk, as Hugging Face's ``save_pretrained`` writes one, for the import tests.

Two real SentencePiece models trained here from the committed Ding fixture (English source, German target), a joint
``vocab.json`` with Opus-MT's layout (``</s>`` 0, ``<unk>`` 1, the pieces of both models, ``<pad>`` last), a real
``MarianTokenizer`` and a randomly initialised tiny ``MarianMTModel`` (d_model 16, 2 layers, 2 heads, swish) whose
weights are redrawn far from their initialisation. Needs ``transformers``; nothing is downloaded.
"""
from __future__ import annotations

import io
import json
import shutil
import warnings
from pathlib import Path

import sentencepiece as spm
import torch


def train_spm(texts: list[str], vocab_size: int) -> bytes:
    """A unigram SentencePiece model (no byte fallback, like Opus-MT's) trained on ``texts``, serialized."""
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=buffer, vocab_size=vocab_size,
                                   model_type="unigram", character_coverage=1.0, hard_vocab_limit=False,
                                   num_threads=1, minloglevel=2, shuffle_input_sentence=False)
    return buffer.getvalue()


def redraw_marian_weights(model, seed: int) -> None:
    """Redraw every weight of a ``MarianMTModel`` but its fixed sinusoidal position tables from a wide distribution
    (seeded), so that LayerNorms, biases and the final logits bias all matter in a comparison."""
    gen = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:
                continue
            p.copy_(torch.randn(p.shape, generator=gen) * (0.5 if p.dim() > 1 else 0.2))
            if "layer_norm" in name and name.endswith("weight"):
                p.add_(1.0)
        model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape, generator=gen))


def spm_pieces(d: Path) -> list[str]:
    """Every piece of ``d/src.spm`` then of ``d/tgt.spm``, in id order."""
    pieces: list[str] = []
    for name in ("src.spm", "tgt.spm"):
        sp = spm.SentencePieceProcessor(model_file=str(d / name))
        pieces += [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    return pieces


def save_marian_tokenizer(d: Path, vocab: list[str]):
    """Save a ``MarianTokenizer`` of ``d/src.spm``, ``d/tgt.spm`` and ``vocab`` (id order) into ``d`` with
    ``save_pretrained``, remove the inputs (the saved copies are ``source.spm``, ``target.spm``, ``vocab.json``) and
    return the tokenizer."""
    import transformers

    (d / "vocab_in.json").write_text(json.dumps({p: i for i, p in enumerate(vocab)}), encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = transformers.MarianTokenizer(source_spm=str(d / "src.spm"), target_spm=str(d / "tgt.spm"),
                                           vocab=str(d / "vocab_in.json"), source_lang="en", target_lang="de")
        tok.save_pretrained(str(d))
    for name in ("src.spm", "tgt.spm", "vocab_in.json"):
        (d / name).unlink()
    return tok


def write_marian(directory: Path, pairs, *, seed: int = 0, **config_overrides) -> Path:
    """Write a tiny en-de Marian model + tokenizer into ``directory`` with ``save_pretrained``."""
    import transformers

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "src.spm").write_bytes(train_spm([p.en for p in pairs], 200))
    (d / "tgt.spm").write_bytes(train_spm([p.de for p in pairs], 200))
    skip = {"<unk>", "<s>", "</s>", "<pad>"}
    vocab = ["</s>", "<unk>"] + list(dict.fromkeys(p for p in spm_pieces(d) if p not in skip)) + ["<pad>"]
    save_marian_tokenizer(d, vocab)
    pad = len(vocab) - 1
    kwargs = dict(vocab_size=len(vocab), d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                  decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
                  activation_function="swish", scale_embedding=True, pad_token_id=pad, eos_token_id=0,
                  decoder_start_token_id=pad, forced_eos_token_id=0)
    kwargs.update(config_overrides)
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(transformers.MarianConfig(**kwargs)).eval()
    redraw_marian_weights(model, seed)
    with torch.no_grad():
        model.final_logits_bias[0, 0] += 4.5  # </s> likely but not certain: some outputs end early
    model.save_pretrained(str(d))
    return d


def served_teachers_folder(imported, tiny_checkpoints, tmp_path, monkeypatch):
    """A teacher's checkpoints folder (both tiny shipped models and the imported ``opus-mt-en-de``) served to the
    app (``AIAYN_CHECKPOINTS``), Streamlit's caches cleared; returns the folder."""
    import streamlit as st

    root = tmp_path / "checkpoints"
    shutil.copytree(tiny_checkpoints / "en-de", root / "en-de")
    shutil.copytree(tiny_checkpoints / "de-en", root / "de-en")
    shutil.copytree(imported, root / "opus-mt-en-de")
    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(root))
    st.cache_data.clear()
    st.cache_resource.clear()
    return root
