"""The classroom on the paper-size model: a randomly initialised ``MarianMTModel`` of Opus-MT en-de's exact shape,
converted through the path a teacher uses for a real one (``save_pretrained`` -> ``aiayn import-marian`` -> a
checkpoint directory the app's model picker lists), then served to the class with ``?model=``.

**The model.** :data:`OPUS_MT_EN_DE` is the published ``config.json`` of ``Helsinki-NLP/opus-mt-en-de``
(Tiedemann and Thottingal 2020): Table 3's base Transformer (N = 6, d_model 512, h = 8, d_ff 2,048), a joint
vocabulary of 58,101 pieces (``</s>`` 0, ``<pad>`` 58,100, the decoder starting from ``<pad>``), swish, 512 static
sinusoidal positions, embeddings shared by encoder, decoder and output layer and scaled by sqrt(d_model). The
weights are Hugging Face's initialisation (``init_std`` 0.02, seeded): 73,886,208 parameters as aiayn counts them,
74,410,496 as Hugging Face does (with the two 512 x 512 position tables), as many as the real one.

**The tokenizer.** Marian's two SentencePiece models are small unigram models trained here on the committed Ding
fixture (``tests/fixtures/ding_sample.txt``, :func:`tests.marian_fixture.train_spm`, as the import tests do):
training a 58k-piece model needs far more text than the repository holds. ``vocab.json`` has exactly 58,101
entries: Opus-MT's layout (``</s>``, ``<unk>``, the pieces of both models, ``<pad>`` last) padded with synthetic
pieces ``▁opus12345`` up to the real size, so every matrix (embedding, output projection, ``final_logits_bias``) has
the real shape. Source sentences are cut by the small models (a few more pieces per word than Opus-MT's);
outputs are mostly synthetic pieces (the model is untrained), detokenised by the same code for the server and the
lone reference.

**Output length.** An untrained model never chooses ``</s>`` (it repeats one piece), so every beam would run to the
maximum length (source + 50 pieces, Section 6.1), several times the steps a trained model takes
(docs/benchmarks.md), and a constant ``</s>`` bias only switches between ending at once and never ending. So one
row of the weights is fitted, nothing else: :func:`end_near` sets ``</s>``'s embedding row (tied: its output row too) and its
``final_logits_bias`` by ridge regression on the decoder's last hidden states (random decoder inputs from the
model's own top pieces, fixture sentences) so that its logit crosses the best other piece's near output position
:data:`OUTPUT_PIECES`. Outputs then end after about as many pieces as Opus-MT writes for the classroom's sentences;
the lengths are in the rows' details (``output_pieces``).

Needs ``transformers`` and ``sentencepiece`` to build (``requirements-dev.txt``); without them the rows are n/a.
``$AIAYN_BENCH_OPUS_CHECKPOINT``: a checkpoint directory :func:`build_opus_shape_checkpoint` wrote before, served
instead of building one (the build takes about 100 s; for repeated A/B runs).
"""
from __future__ import annotations

import importlib.util
import json
import tempfile
from pathlib import Path
from typing import Any

from .common import REPO

#: The published ``config.json`` of Helsinki-NLP/opus-mt-en-de (the fields that shape the model).
OPUS_MT_EN_DE: dict[str, Any] = dict(
    vocab_size=58101, decoder_vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6,
    encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
    max_position_embeddings=512, activation_function="swish", scale_embedding=True, static_position_embeddings=True,
    share_encoder_decoder_embeddings=True, tie_word_embeddings=True, normalize_before=False,
    normalize_embedding=False, pad_token_id=58100, eos_token_id=0, bos_token_id=0, decoder_start_token_id=58100,
    forced_eos_token_id=0, bad_words_ids=[[58100]], init_std=0.02, dropout=0.1, attention_dropout=0.0,
    activation_dropout=0.0, max_length=512, num_beams=4,
)
#: the directory name under the checkpoints folder, the ``?model=`` value the students open
MODEL_NAME = "opus-shape-en-de"
#: the output position near which ``</s>`` overtakes the other pieces (:func:`end_near`)
OUTPUT_PIECES = 14
#: how fast ``</s>``'s logit gains on the best other piece per output position (:func:`end_near`)
EOS_SLOPE = 1.0
#: environment variable: a prebuilt Opus-shape checkpoint directory to serve instead of building one
PREBUILT_ENV = "AIAYN_BENCH_OPUS_CHECKPOINT"
#: the synthetic pieces that pad ``vocab.json`` to 58,101 entries
SYNTHETIC = "\u2581opus{:05d}"


def _marian_fixture():
    """``tests/marian_fixture.py`` (the import tests' SentencePiece trainer), loaded from its file."""
    path = REPO / "tests" / "marian_fixture.py"
    spec = importlib.util.spec_from_file_location("aiayn_bench_marian_fixture", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def opus_vocab(pieces: list[str], size: int) -> list[str]:
    """Opus-MT's joint vocabulary layout over ``pieces`` (``</s>`` 0, ``<unk>`` 1, the pieces once each, in order),
    padded with synthetic pieces to ``size`` entries, ``<pad>`` last (id ``size - 1``).

    Raises:
        ValueError: the pieces do not fit in ``size``.
    """
    skip = {"<unk>", "<s>", "</s>", "<pad>"}
    vocab = ["</s>", "<unk>"] + list(dict.fromkeys(p for p in pieces if p not in skip))
    if len(vocab) + 1 > size:
        raise ValueError(f"{len(vocab) + 1} pieces do not fit in a vocabulary of {size}")
    taken, i = set(vocab), 0
    while len(vocab) < size - 1:
        if SYNTHETIC.format(i) not in taken:
            vocab.append(SYNTHETIC.format(i))
        i += 1
    return vocab + ["<pad>"]


def write_opus_shape_source(directory: str | Path, *, seed: int = 0, output_pieces: int = OUTPUT_PIECES,
                            **config_overrides) -> Path:
    """Write a randomly initialised ``MarianMTModel`` of :data:`OPUS_MT_EN_DE`'s shape (``config_overrides``
    change fields, for tests) with its tokenizer into ``directory``, as ``save_pretrained`` writes a hub model.

    Raises:
        ImportError: ``transformers`` or ``sentencepiece`` is not installed.
    """
    import torch
    import transformers

    from aiayn.data import parse_ding

    fixture = _marian_fixture()
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    pairs, _ = parse_ding(REPO / "tests" / "fixtures" / "ding_sample.txt")
    (d / "src.spm").write_bytes(fixture.train_spm([p.en for p in pairs], 200))
    (d / "tgt.spm").write_bytes(fixture.train_spm([p.de for p in pairs], 200))
    config = dict(OPUS_MT_EN_DE, **config_overrides)
    tok = fixture.save_marian_tokenizer(d, opus_vocab(fixture.spm_pieces(d), config["vocab_size"]))
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(transformers.MarianConfig(**config)).eval()
    pairs_en = [p.en for p in pairs if 20 < len(p.en) < 80][:12]
    end_near(model, tok, pairs_en, output_pieces, seed=seed)
    model.save_pretrained(str(d))
    return d


def build_opus_shape_checkpoint(root: str | Path, *, seed: int = 0, output_pieces: int = OUTPUT_PIECES,
                                **config_overrides) -> Path:
    """``root / MODEL_NAME``: the Opus-shape model (:func:`write_opus_shape_source`) converted by ``aiayn
    import-marian`` (float16 weights, the command's default), as a teacher converts a real Opus-MT model.

    Raises:
        ImportError: ``transformers`` is not installed; aiayn.import_marian.ImportFailed: the import refused.
    """
    from aiayn.import_marian import ImportFailed, cli_main

    root = Path(root)
    with tempfile.TemporaryDirectory(prefix="opus-shape-src-") as tmp:
        source = write_opus_shape_source(Path(tmp) / "opus-mt-en-de", seed=seed, output_pieces=output_pieces,
                                         **config_overrides)
        out = root / MODEL_NAME
        if cli_main([str(source), "--out", str(out), "--no-progress"]) != 0:
            raise ImportFailed(f"aiayn import-marian refused {source} (its message is above)")
    return out


def end_near(model: Any, tok: Any, texts: list[str], output_pieces: int, *, slope: float = EOS_SLOPE,
             steps: int = 30, rounds: int = 2, ridge: float = 0.01, seed: int = 0) -> float:
    """Fit ``</s>``'s row of an untrained ``MarianMTModel`` (see the module docstring) so that its logit is the best
    other piece's plus ``slope * (t - output_pieces)`` at output position ``t``: least squares with a ridge
    (``ridge`` x the mean squared feature) on the decoder's last hidden states ``(B, T, D)`` of ``texts``, along the
    greedy output (``</s>`` banned, ``steps`` pieces) and along decoder inputs drawn from the top 6 pieces of each
    position (what the other beams feed). The embedding row is also an encoder input (every source ends with
    ``</s>``), so the fit is repeated ``rounds`` times. Changes ``model`` in place; returns the last fit's mean
    absolute residual (logit units).
    """
    import torch

    cfg = model.config
    eos, pad, d = cfg.eos_token_id, cfg.pad_token_id, cfg.d_model
    gen = torch.Generator().manual_seed(seed)
    residual = float("nan")
    for _ in range(rounds):
        enc = tok(texts, return_tensors="pt", padding=True)
        with torch.no_grad():
            seq = model.generate(**enc, num_beams=1, do_sample=False, max_new_tokens=steps, min_new_tokens=steps,
                                 bad_words_ids=[[pad]], forced_eos_token_id=None)
            greedy = seq[:, :-1]
            scores = model(**enc, decoder_input_ids=greedy).logits[..., :pad]
            scores[..., eos] = float("-inf")
            top = scores.topk(6, -1).indices
            drawn = top.gather(-1, torch.randint(0, 6, (*top.shape[:2], 1), generator=gen))[..., 0]
            dec = torch.cat([greedy, torch.cat([greedy[:, :1], drawn[:, :-1]], 1)])
            both = {k: torch.cat([v, v]) for k, v in enc.items()}
            h = model.model(**both, decoder_input_ids=dec).last_hidden_state  # (2B, T, D)
            logits = model.lm_head(h) + model.final_logits_bias
            logits[..., eos] = float("-inf")
            best = logits.max(-1).values  # (2B, T)
        t = torch.arange(1, h.size(1) + 1, dtype=h.dtype).expand_as(best)
        y = (best + slope * (t - output_pieces)).reshape(-1)
        x = torch.cat([h.reshape(-1, d), torch.ones(y.numel(), 1)], 1)
        lam = ridge * float((x * x).sum()) / x.size(1)
        w = torch.linalg.solve(x.T @ x + lam * torch.eye(d + 1), x.T @ y)
        residual = float((x @ w - y).abs().mean())
        with torch.no_grad():
            model.model.shared.weight[eos] = w[:d]
            model.final_logits_bias[0, eos] = w[d]
    return residual


#: ``--quick``: the same path on a small model of the same kind (the figures then say nothing about speed)
QUICK_SHAPE: dict[str, Any] = dict(vocab_size=4000, decoder_vocab_size=4000, d_model=64, encoder_layers=2,
                                   decoder_layers=2, encoder_ffn_dim=256, decoder_ffn_dim=256,
                                   max_position_embeddings=128, pad_token_id=3999, decoder_start_token_id=3999,
                                   bad_words_ids=[[3999]])


def _teachers_folder(root: Path) -> None:
    """Link the shipped checkpoints (``$AIAYN_CHECKPOINTS`` or ``checkpoints/``) into ``root``, as a teacher's
    checkpoints folder holds them beside an imported model: the picker then offers both."""
    import os

    from aiayn.catalog import SHIPPED
    from aiayn.checkpoint_format import DEFAULT_CHECKPOINTS_DIR

    env = os.environ.get("AIAYN_CHECKPOINTS")
    for name in SHIPPED:
        shipped = (Path(env) if env else DEFAULT_CHECKPOINTS_DIR) / name
        if shipped.is_dir():
            (root / name).symlink_to(shipped.resolve(), target_is_directory=True)


def _prebuilt(root: Path) -> Path | None:
    """``$AIAYN_BENCH_OPUS_CHECKPOINT`` linked into ``root`` as :data:`MODEL_NAME`, or None when it is not set.

    Raises:
        FileNotFoundError: the variable names a directory without a ``config.json``.
    """
    import os

    raw = os.environ.get(PREBUILT_ENV, "").strip()
    if not raw:
        return None
    source = Path(raw).expanduser().resolve()
    if not (source / "config.json").is_file():
        raise FileNotFoundError(f"{PREBUILT_ENV}={raw!r} is not a checkpoint directory (no config.json)")
    (root / MODEL_NAME).symlink_to(source, target_is_directory=True)
    return root / MODEL_NAME


def run_opus_shape(ctx, chromium: str | None) -> list:
    """The class on the Opus-shape model (module docstring): build it through ``aiayn import-marian`` into a
    temporary checkpoints folder, serve that folder (``AIAYN_CHECKPOINTS``), every student opening
    ``?model=`` :data:`MODEL_NAME`; rows ``classroom.cpu.opus_shape.n<N>...`` as the shipped class's."""
    import time

    import os

    from .classroom import LEVELS, QUICK_LEVELS, SERVER_ENV, run_levels, rows_of
    from .report import na

    levels = QUICK_LEVELS if ctx.quick else LEVELS
    prefix = "classroom.cpu.opus_shape"
    top, name = f"{prefix}.n{levels[-1]}.all.p95", f"{levels[-1]} students on the Opus-MT-shape model, p95"
    missing = [m for m in ("transformers", "sentencepiece", "websockets") if importlib.util.find_spec(m) is None]
    if missing:
        return [na(top, "classroom", "cpu", name, "s", f"needs {', '.join(missing)} (pip install -r requirements-dev.txt)")]
    overrides = QUICK_SHAPE if ctx.quick else {}
    with tempfile.TemporaryDirectory(prefix="aiayn-classroom-opus-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        ctx.log(f"[classroom] building the Opus-MT-shape model{' (quick: small)' if ctx.quick else ''} through import-marian")
        try:
            _teachers_folder(root)
            checkpoint = _prebuilt(root) or build_opus_shape_checkpoint(root, **overrides)
        except Exception as exc:  # noqa: BLE001 - reported as an n/a row
            return [na(top, "classroom", "cpu", name, "s", f"building the model: {type(exc).__name__}: {str(exc)[:200]}")]
        build_s = time.perf_counter() - t0
        config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
        n_params = int(config["num_parameters"])
        ctx.log(f"[classroom] levels {levels}, one server, {checkpoint.name} ({n_params:,} parameters, built in "
                f"{build_s:.0f} s), probes: {chromium or 'none'}")
        try:
            res = run_levels(levels=levels, checkpoint=checkpoint, chromium=chromium, quick=ctx.quick,
                             server_env={"AIAYN_CHECKPOINTS": str(root)}, query={"model": MODEL_NAME}, log=ctx.log)
        except Exception as exc:  # noqa: BLE001 - a broken app must not lose the other groups
            return [na(top, "classroom", "cpu", name, "s", f"{type(exc).__name__}: {str(exc)[:200]}")]
    ctx.info["classroom_opus_shape"] = {"model": config["model"], "num_parameters": n_params,
                                        "build_s": round(build_s, 1), "warmup": res["warmup"],
                                        "agreement": config["meta"]["imported"].get("agreement"),
                                        "server_env": {k: os.environ.get(k, "(default)") for k in SERVER_ENV}}
    rows = rows_of(res, prefix=prefix)
    shape = config["model"]
    about = (f"Opus-MT-shape model: {n_params:,} parameters, N={shape['n_layers']}, d_model {shape['d_model']}, "
             f"V {shape['vocab_size']:,}, random weights via import-marian")
    failed = [f"{w['page']}: {w['error']}" for w in res["warmup"] if w["error"]]
    for r in rows:
        r.name = r.name.replace("classroom ", "classroom (Opus-MT shape) ", 1)
        r.note = "; ".join(x for x in (about, r.note, failed and "warm-up visit failed (" + "; ".join(failed)[:160] + ")") if x)
    return rows
