"""``aiayn translate``: translate sentences from the command line or standard input with a checkpoint (beam search,
Section 6.1). Piped input gives exactly one output line per input line: a blank line stays blank, and a line that
cannot be translated gives a blank line (its reason on standard error), so outputs stay aligned with inputs."""
from __future__ import annotations

import argparse
import sys
from typing import Iterable

from .decoding import beam_option_error
from .reranking import add_cli_options as add_rerank_options

DIRECTIONS = ("en-de", "de-en")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="aiayn translate", description="Translate text with a checkpoint (beam search, Section 6.1).")
    ap.add_argument("text", nargs="*", help="sentences to translate; read from standard input, one per line, when none")
    ap.add_argument("--checkpoint", "-c", default=None, help="checkpoint directory (default: the shipped checkpoint of --direction)")
    ap.add_argument("--direction", choices=DIRECTIONS, default=None,
                    help="use the shipped checkpoint of this direction (default en-de); with --checkpoint it must be that "
                         "checkpoint's own direction, or one of a model trained for both (aiayn train --bidirectional)")
    ap.add_argument("--beam-size", type=int, default=4)
    ap.add_argument("--alpha", type=float, default=0.6, help="length penalty alpha")
    ap.add_argument("--max-len", type=int, default=None)
    ap.add_argument("--device", default=None)
    ap.add_argument("--pieces", action="store_true", help="also print the source and output pieces")
    ap.add_argument("--domain", default=None, help="a model trained with domain tags (aiayn train --domain-tags): the "
                    "tag to start the decoder with (default: the model's own, e.g. general)")
    add_rerank_options(ap)
    return ap


def direction_error(asked: str | None, meta: dict) -> str | None:
    """The message when ``--direction`` contradicts the checkpoint's recorded direction (``meta["direction"]``),
    else None (no ``--direction``, or a checkpoint that records none)."""
    own = meta.get("direction")
    if asked is None or own is None or asked == own:
        return None
    return (f"--direction {asked} contradicts the checkpoint, which translates {own}; drop --direction or pass "
            f"a {asked} checkpoint")


def _lines(args: argparse.Namespace) -> Iterable[str]:
    return args.text if args.text else (line.rstrip("\r\n") for line in sys.stdin)


def cli_main(argv: list[str]) -> int:
    """``aiayn translate [--checkpoint DIR | --direction en-de] [--beam-size 4] [--alpha 0.6] TEXT...`` (stdin when
    no TEXT). Exit code 2 on a bad option, a missing or contradicting checkpoint, or any line that failed."""
    from .reranking import cli_weight, rerank, reverse_for
    from .translator import DEFAULT_DIRECTION, Translator, default_checkpoint  # imports torch: only when it runs

    args = _parser().parse_args(argv)
    bad = beam_option_error(beam_size=args.beam_size, length_penalty=args.alpha, max_len=args.max_len, cli=True)
    if bad:
        print(f"aiayn translate: {bad}", file=sys.stderr)
        return 2
    path = args.checkpoint or default_checkpoint(args.direction or DEFAULT_DIRECTION)
    try:
        tr = Translator.load(path, device=args.device)
        if args.direction and tr.cfg.language_tags:  # one model for both directions: decode the one asked for
            tr = tr.for_direction(args.direction)
        tr = tr.for_domain(args.domain)
    except (FileNotFoundError, ValueError) as exc:
        print(f"aiayn translate: {exc}", file=sys.stderr)
        return 2
    contradiction = direction_error(args.direction, tr.meta)
    if contradiction:
        print(f"aiayn translate: {contradiction}", file=sys.stderr)
        return 2
    reverse = None
    try:
        weight = cli_weight(args)
        if weight is not None:
            reverse = reverse_for(tr, tr.meta.get("direction") or DEFAULT_DIRECTION, args.reverse, device=args.device)
    except ValueError as exc:
        print(f"aiayn translate: {exc}", file=sys.stderr)
        return 2
    code = 0
    for n, text in enumerate(_lines(args), start=1):
        if not text.strip():
            print(flush=True)
            continue
        try:
            t = tr.translate(text, beam_size=args.beam_size, length_penalty=args.alpha, max_len=args.max_len,
                             return_attention=False, n_best=args.beam_size if reverse is not None else 1)
            best = t.text if reverse is None else rerank(text, t.nbest, reverse, weight)[0].text
        except ValueError as exc:
            print(f"aiayn translate: line {n}: {exc}", file=sys.stderr)
            print(flush=True)
            code = 2
            continue
        print(best, flush=True)
        if args.pieces and best != t.text:
            print("  (reranked: the pieces below are the beam's output,", repr(t.text) + ")")
        if args.pieces:
            print("  src:", " ".join(t.src_tokens))
            print("  out:", " ".join(t.output_tokens))
            print("  decoder's first input:", t.decoder_input_tokens[0])
        if t.truncated:
            print(f"  (line {n}: source truncated to the model's limit)", file=sys.stderr)
    return code
