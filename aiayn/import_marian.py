"""``aiayn import-marian SOURCE --out DIR``: a Marian (Opus-MT) model as an aiayn checkpoint directory, once.

Opus-MT models (Tiedemann and Thottingal 2020, trained with Marian NMT, Junczys-Dowmunt et al. 2018) are the
base Transformer of Table 3 trained on millions of OPUS sentence pairs. This command reads one written by
Hugging Face's ``save_pretrained`` (a local folder; on a machine with a network, also a hub name such as
``Helsinki-NLP/opus-mt-en-de``), converts it with :func:`aiayn.interop_marian.from_marian` and writes:

* ``config.json`` + ``model.safetensors`` (:func:`aiayn.checkpoint.save_checkpoint`, float16 or float32);
* Marian's tokenizer files ``source.spm``, ``target.spm``, ``vocab.json`` (read by
  :class:`aiayn.marian_tokenizer.MarianSentencePiece`: the checkpoint loads without ``transformers``);
* the direction and origin in ``config.json["meta"]``, and with ``--serve-projection int8|bfloat16`` the precision
  of the output projection the app serves it with (``meta["serve_projection"]``, :mod:`aiayn.model.projection`;
  absent: float32, exact);
* ``MODEL_CARD.md``: origin, licence (CC-BY 4.0) and attribution, the mapping, and the agreement with the
  original measured on the written files (:func:`measure_agreement`).

Only this command needs ``transformers``. The directory appears whole or not at all (:func:`aiayn.files.atomic_dir`).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import sys
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from .checkpoint_format import CONFIG_FILE, MARIAN_TOKENIZER_FILES

__all__ = ["Agreement", "ImportFailed", "cli_main", "import_marian", "measure_agreement"]

LICENSE = "CC-BY-4.0"
ATTRIBUTION = ("Jörg Tiedemann and Santhosh Thottingal. 2020. OPUS-MT - Building open translation services for the "
               "World. In Proceedings of EAMT 2020 (Helsinki-NLP, University of Helsinki).")
#: sentences whose agreement is measured at import time (English and German: Latin-script pairs share most pieces)
AGREEMENT_SENTENCES = (
    "The cat sat on the mat.",
    "Attention is all you need.",
    "Die Katze saß auf der Matte.",
    "We went to the station, but the last train had already left.",
)
#: longest greedy output compared with ``generate`` at import time (pieces)
AGREEMENT_MAX_LEN = 40


class ImportFailed(ValueError):
    """The source is not a Marian model, lacks a file, or uses something aiayn cannot represent (message says what)."""


@dataclass(frozen=True)
class Agreement:
    """How the written checkpoint (through aiayn, without ``transformers``) agrees with the original model.

    Attributes:
        sentences: how many sentences were compared.
        ids_equal: sentences whose source ids equal ``MarianTokenizer``'s.
        max_abs_logprob_diff: max |log p_aiayn - log p_original| over every position and vocabulary entry of the
            teacher-forced pass on the original's greedy outputs (float32 computation from the stored weights).
        greedy_equal: sentences whose greedy output (ids and text) equals ``generate(num_beams=1)``'s.
        dtype: the stored weights' dtype.
    """

    sentences: int
    ids_equal: int
    max_abs_logprob_diff: float
    greedy_equal: int
    dtype: str


def _fail(message: str) -> None:
    raise ImportFailed(message)


def _check_local_source(source: Path) -> None:
    """A ``save_pretrained`` folder of a Marian model with the tokenizer files, one vocabulary."""
    config_path = source / "config.json"
    if not config_path.is_file():
        _fail(f"{source} has no config.json: not a folder written by save_pretrained")
    try:
        hc = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        _fail(f"{config_path} is not valid JSON ({exc})")
    if not isinstance(hc, dict) or hc.get("model_type") != "marian":
        found = hc.get("model_type") if isinstance(hc, dict) else None
        _fail(f"{source} is not a Marian model (config.json model_type is {found!r}, expected 'marian')")
    for name in MARIAN_TOKENIZER_FILES:
        if not (source / name).is_file():
            _fail(f"{source} lacks the tokenizer file {name} (Marian needs source.spm, target.spm, vocab.json)")
    if not any((source / w).is_file() for w in ("model.safetensors", "pytorch_model.bin")):
        _fail(f"{source} lacks the weights (model.safetensors or pytorch_model.bin)")
    tok_cfg = source / "tokenizer_config.json"
    try:
        separate = tok_cfg.is_file() and json.loads(tok_cfg.read_text(encoding="utf-8")).get("separate_vocabs")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as exc:
        _fail(f"{tok_cfg} is not valid JSON ({exc})")
    if separate:
        _fail("tokenizer_config.json separate_vocabs=true: separate source/target vocabularies are not supported")


def _load(source: str) -> tuple[Any, Any]:
    """``(MarianMTModel in eval mode, float32, MarianTokenizer)`` from a local folder or a hub name."""
    try:
        import transformers
    except ImportError:
        _fail("import-marian needs transformers to read the original model: pip install transformers sentencepiece")
    local = Path(source)
    if local.exists():
        if not local.is_dir():
            _fail(f"{local} is not a folder")
        _check_local_source(local)
    elif not re.fullmatch(r"[\w.-]+/[\w.-]+", source):
        _fail(f"{source}: no such folder (nor a hub name like Helsinki-NLP/opus-mt-en-de)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses" (the tokenizer never uses it)
        try:
            tok = transformers.MarianTokenizer.from_pretrained(source)
            model = transformers.AutoModelForSeq2SeqLM.from_pretrained(source)
        except (OSError, ValueError, KeyError) as exc:
            _fail(f"cannot read {source} with transformers: {str(exc).splitlines()[0]}")
    if type(model).__name__ != "MarianMTModel":
        _fail(f"{source} is a {type(model).__name__}, not a MarianMTModel")
    if getattr(tok, "separate_vocabs", False):
        _fail("separate_vocabs=true: separate source/target vocabularies are not supported")
    return model.float().eval(), tok


def _direction(source: str, tok: Any, given: str | None) -> str:
    """``src-tgt``: ``given``, else the tokenizer's source_lang/target_lang, else an ``opus-mt-xx-yy`` name."""
    if given:
        if not re.fullmatch(r"[A-Za-z_]+-[A-Za-z_]+", given):
            _fail(f"--direction must look like en-de, got {given!r}")
        return given
    src, tgt = getattr(tok, "source_lang", None), getattr(tok, "target_lang", None)
    if src and tgt:
        return f"{src}-{tgt}"
    m = re.search(r"opus-mt-([a-z]+)-([a-z]+)$", Path(source.rstrip("/")).name)
    if m:
        return f"{m.group(1)}-{m.group(2)}"
    _fail(f"cannot tell the direction of {source}: give --direction (e.g. --direction en-de)")
    return ""  # unreachable


def measure_agreement(original: Any, tok: Any, directory: str | Path, *,
                      sentences: Sequence[str] = AGREEMENT_SENTENCES,
                      max_len: int = AGREEMENT_MAX_LEN) -> Agreement:
    """Compare the checkpoint in ``directory`` (loaded by :meth:`aiayn.Translator.load`, i.e. the stored weights
    and :class:`~aiayn.marian_tokenizer.MarianSentencePiece`) with the original ``MarianMTModel`` and its
    ``MarianTokenizer``: the source ids, the log-probabilities of a teacher-forced pass on the original's greedy
    outputs (through :func:`aiayn.calls.teacher_forced_ids`, whose decoder input is fed to the original too), and
    the greedy outputs (``generate(num_beams=1)`` with ``<pad>`` banned and no forced ``</s>``, as
    :func:`aiayn.interop_marian.from_marian` documents).

    Raises:
        ValueError, FileNotFoundError: the checkpoint cannot be loaded.
    """
    import torch

    from . import calls
    from .translator import Translator

    ours = Translator.load(directory, device="cpu", projection="float32")  # the conversion, whatever it serves with
    cfg, pad = ours.cfg, ours.cfg.pad_id
    encoded = [ours.encode_source(s).ids for s in sentences]
    ids_equal = sum(e == tok(s)["input_ids"] for e, s in zip(encoded, sentences))
    src = calls.batch(cfg, encoded)
    with torch.no_grad():
        out = original.generate(input_ids=src, attention_mask=(src != pad).long(), num_beams=1, do_sample=False,
                                max_new_tokens=max_len, bad_words_ids=[[pad]], forced_eos_token_id=None)
    expected = [[i for i in row[1:] if i != pad] for row in out.tolist()]
    forced = calls.teacher_forced_ids(ours.model, encoded, expected)
    with torch.no_grad():
        logits = original(input_ids=src, attention_mask=(src != pad).long(),
                          decoder_input_ids=forced.decoder_input).logits
    theirs = torch.log_softmax(logits.float(), dim=-1)
    real = (forced.target != pad).unsqueeze(-1)
    diff = float(((forced.log_probs - theirs).abs() * real).max())
    greedy_equal = 0
    for text, exp in zip(sentences, expected):
        tr = ours.translate(text, beam_size=1, max_len=max_len, return_attention=False)
        greedy_equal += tr.output_ids == exp and tr.text == tok.decode(exp, skip_special_tokens=True)
    return Agreement(len(sentences), int(ids_equal), diff, greedy_equal, str(ours.meta.get("dtype")))


def _card(source: str, direction: str, cfg: Any, n_params: int, agreement: Agreement) -> str:
    """``MODEL_CARD.md`` of an imported checkpoint."""
    a = agreement
    return f"""# Opus-MT {direction} (imported)

A real production model, converted for aiayn's views: **imported: Opus-MT**, not trained here.

## Origin and licence
* Source: `{source}` (Hugging Face `MarianMTModel`, trained with Marian NMT on OPUS data).
* Licence: **CC-BY 4.0** (https://creativecommons.org/licenses/by/4.0/). Attribution: {ATTRIBUTION}
  Changes: the weights were converted to aiayn's format by `aiayn import-marian` on
  {_dt.date.today().isoformat()} (stored as {a.dtype}); nothing was retrained.
* It has no training history in this project ("Across training" has nothing to show for it).

## The model
Table 3's base Transformer shape: N = {cfg.n_layers}, d_model = {cfg.d_model}, h = {cfg.n_heads},
d_ff = {cfg.d_ff}, vocabulary {cfg.vocab_size:,} (joint), {n_params:,} parameters, {cfg.max_len} positions.

## What aiayn maps, and how
* Post-LN layers (Section 3.1): `q/k/v/out_proj` -> `w_q/w_k/w_v/w_o`, `fc1/fc2` -> the FFN (Eq. 2),
  `self_attn_layer_norm` / `encoder_attn_layer_norm` / `final_layer_norm` -> `norm1` / `norm2` / `norm3`.
* FFN activation: `{cfg.activation}` (Marian's; the paper uses ReLU).
* Positions: Marian's sinusoids (Section 3.5) with sines in the first half of d_model and cosines in the second
  (`positional_layout="concatenated"`; checked against the model's own tables at import).
* Embeddings scaled by sqrt(d_model) and {"shared by encoder, decoder and output layer" if cfg.share_embeddings
  else "not shared"} (Section 3.4); Marian's `final_logits_bias` is added to the logits.
* Special pieces: `</s>` = {cfg.eos_id}, `<pad>` = {cfg.pad_id}; the decoder starts from `<pad>`
  (`decoder_start="{cfg.decoder_start}"`): Marian has no `<s>`.
* Tokenizer: Marian's two SentencePiece models (`source.spm`, `target.spm`) and its vocabulary (`vocab.json`),
  read by `aiayn.marian_tokenizer` with `sentencepiece` alone (no `transformers` needed to use this folder).
* Beam search uses the paper's GNMT length penalty (Section 6.1), not Marian's; greedy decoding is the same.

## Measured agreement with the original (at import, on {a.sentences} sentences)
* Source ids equal to `MarianTokenizer`'s: {a.ids_equal}/{a.sentences}.
* Max |log-probability difference| over every position and vocabulary entry of a teacher-forced pass on the
  original's greedy outputs: {a.max_abs_logprob_diff:.2e} ({a.dtype} weights, float32 computation).
* Greedy output (ids and text) equal to `generate(num_beams=1)`: {a.greedy_equal}/{a.sentences}.
"""


def import_marian(source: str | Path, out: str | Path, *, dtype: str = "float16", direction: str | None = None,
                  progress: bool = True, serve_projection: str = "float32") -> tuple[Path, Agreement]:
    """Convert the Marian model at ``source`` into the checkpoint directory ``out`` (see the module docstring).

    Args:
        source: a ``save_pretrained`` folder, or a hub name (needs a network; never used by the tests).
        out: the checkpoint directory to write; it must not exist or be empty.
        dtype: ``"float16"`` or ``"float32"`` for the stored weights.
        direction: ``"src-tgt"``; default from the tokenizer's languages or an ``opus-mt-xx-yy`` name.
        progress: show a tqdm progress bar on stderr.
        serve_projection: the output projection's precision the checkpoint is served with by default
            (``meta["serve_projection"]``, :mod:`aiayn.model.projection`: ``"float32"``, ``"int8"``,
            ``"bfloat16"``); the agreement is measured in float32 either way (it checks the conversion).

    Returns:
        ``(out, the measured Agreement)``.

    Raises:
        ImportFailed: not a Marian model, a missing file, an unsupported feature (named), a bad option,
            ``transformers`` not installed, ``out`` not empty.
    """
    from tqdm import tqdm

    from .model.projection import precision_error

    if dtype not in ("float16", "float32"):
        _fail(f"--dtype must be float16 or float32, got {dtype!r}")
    error = precision_error(serve_projection, source="--serve-projection")
    if error:
        _fail(error)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        _fail(f"{out} exists and is not an empty folder")
    bar = tqdm(total=4, desc="import-marian", unit="step", disable=not progress, file=sys.stderr)
    try:
        bar.set_postfix_str("reading the original")
        model, tok = _load(str(source))
        direction = _direction(str(source), tok, direction)
        bar.update()
        written, agreement = _convert_and_write(model, tok, str(source), out, dtype, direction, bar, serve_projection)
    finally:
        bar.close()
    return written, agreement


def _convert_and_write(model: Any, tok: Any, source: str, out: Path, dtype: str, direction: str,
                       bar: Any, serve_projection: str = "float32") -> tuple[Path, Agreement]:
    from .checkpoint import save_checkpoint
    from .files import atomic_dir, atomic_write_bytes, umask_mode
    from .interop_marian import from_marian
    from .model.projection import PROJECTION_META

    bar.set_postfix_str("converting")
    try:
        ours, _ = from_marian(model, tok)
    except ValueError as exc:
        _fail(str(exc))
    bar.update()
    src_lang, tgt_lang = direction.split("-")
    meta = {"direction": direction, "src_lang": src_lang, "tgt_lang": tgt_lang, "origin": "imported",
            "imported": {"from": "Opus-MT", "source": source, "license": LICENSE, "attribution": ATTRIBUTION,
                         "tool": "aiayn import-marian", "date": _dt.date.today().isoformat()}}
    if serve_projection != "float32":
        meta[PROJECTION_META] = serve_projection
    with atomic_dir(out) as tmp:
        bar.set_postfix_str("writing")
        save_checkpoint(tmp, ours, dtype=dtype, meta=meta)
        tok.save_vocabulary(str(tmp))
        bar.update()
        bar.set_postfix_str("measuring agreement")
        agreement = measure_agreement(model, tok, tmp)
        config = json.loads((tmp / CONFIG_FILE).read_text(encoding="utf-8"))
        config["meta"]["imported"]["agreement"] = asdict(agreement)
        atomic_write_bytes(tmp / CONFIG_FILE, json.dumps(config, indent=2, sort_keys=True).encode())
        card = _card(source, direction, ours.cfg, ours.num_parameters(), agreement)
        atomic_write_bytes(tmp / "MODEL_CARD.md", card.encode("utf-8"))
        tmp.chmod(umask_mode() | 0o111)  # mkdtemp makes 0700: the app's server may run as another user
        bar.update()
    return out, agreement


def cli_main(argv: list[str] | None = None) -> int:
    """``aiayn import-marian SOURCE --out DIR [--dtype float16|float32] [--direction en-de] [--sweep]``; exit 2
    with a one-line error when the import is refused."""
    ap = argparse.ArgumentParser(prog="aiayn import-marian",
                                 description="Convert a Marian (Opus-MT) model into an aiayn checkpoint directory "
                                             "(needs transformers; the result does not).")
    ap.add_argument("source", help="a folder written by save_pretrained, or a hub name (network needed)")
    ap.add_argument("--out", required=True, help="checkpoint directory to write (must not exist or be empty)")
    ap.add_argument("--dtype", choices=["float16", "float32"], default="float16", help="stored weights")
    ap.add_argument("--direction", default=None, help="src-tgt (default: from the tokenizer or the model name)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--serve-projection", default="float32",
                    help="output projection precision the app serves it with: float32 (default, exact), int8 (CPU; "
                         "faster for a large vocabulary, logits a few hundredths of a nat off) or bfloat16 "
                         "(CPUs with bf16 matrix units); $AIAYN_SERVE_PROJECTION overrides it")
    ap.add_argument("--sweep", action="store_true",
                    help="then compute the head-ablation sweep into DIR/head_sweep.json (aiayn sweep; en-de and de-en "
                         "only), so no visitor of the app ever waits for it")
    args = ap.parse_args(argv)
    try:
        out, a = import_marian(args.source, args.out, dtype=args.dtype, direction=args.direction,
                               progress=not args.no_progress, serve_projection=args.serve_projection)
    except (ImportFailed, FileNotFoundError) as exc:
        print(f"aiayn import-marian: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}: greedy output equal on {a.greedy_equal}/{a.sentences} sentences, max |log-prob "
          f"difference| {a.max_abs_logprob_diff:.2e} ({a.dtype} weights)")
    if args.sweep:
        from .sweep import cli_main as sweep_main

        return sweep_main(["--checkpoint", str(out)])
    return 0
