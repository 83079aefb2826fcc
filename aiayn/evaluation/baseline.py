"""The word-by-word dictionary baseline that ``aiayn evaluate`` scores beside the model (our addition: the paper
compares with other published systems, Table 2). A model is only worth something if it beats this trivial
system: every word is looked up in ``dictionary.tsv`` (short entries with one word on one side, from the train split only, written by
:func:`aiayn.data.prepare.build_dictionary`) and replaced; unknown words are copied. :func:`load_lexicon` reads
the dictionary into a lexicon, :func:`dictionary_baseline` translates one text with it.
"""
from __future__ import annotations

import os
import re

from ..data.corpora import read_tsv

__all__ = ["WORD_PATTERN", "load_lexicon", "dictionary_baseline"]

#: What the baseline treats as a word: ``\w+`` with inner apostrophes or hyphens ("hab's", "name-dropping").
WORD_PATTERN = re.compile(r"\w+(?:['’\-]\w+)*")


def load_lexicon(path: str | os.PathLike, direction: str = "de-en") -> dict[str, str]:
    """Read ``dictionary.tsv`` (columns de, en) into a one-word lexicon ``{source word (lower-case):
    target text}`` for :func:`dictionary_baseline`.

    For each source word the target with the fewest words wins (ties: first in the file). For
    ``direction="en-de"``, English infinitives "to X" are also indexed under "x" (at lower priority than
    an entry "x" itself).

    Raises:
        FileNotFoundError: missing file. ValueError: bad direction or missing columns (file named).
    """
    if direction not in ("de-en", "en-de"):
        raise ValueError(f"direction must be 'de-en' or 'en-de', got {direction!r}")
    pairs = read_tsv(path, "de", "en")
    src_i, tgt_i = (0, 1) if direction == "de-en" else (1, 0)
    best: dict[str, tuple[int, int, str]] = {}
    for order, p in enumerate(pairs):
        src, tgt = p[src_i], p[tgt_i]
        if not src or not tgt:
            continue
        words = src.split()
        candidates = []
        if len(words) == 1:
            candidates.append((words[0], 0))
        elif direction == "en-de" and len(words) == 2 and words[0].lower() == "to":
            candidates.append((words[1], 1))
        for w, penalty in candidates:
            key = w.lower()
            rank = (penalty, len(tgt.split()), order)
            if key not in best or rank < best[key][:3]:
                best[key] = (*rank, tgt)
    return {k: v[3] for k, v in best.items()}


def dictionary_baseline(text: str, lexicon: dict[str, str], src_lang: str = "de") -> str:
    """Translate word by word: each word (``\\w+`` with inner ' or -) is looked up lower-cased in
    ``lexicon`` and replaced; unknown words are copied; punctuation and spacing are kept. If the
    source word starts with a capital at the start of the text, the translation's first letter is
    capitalised. This is the floor a trained model must beat (``aiayn evaluate``).

    Raises:
        ValueError: ``src_lang`` is not "de" or "en".
    """
    if src_lang not in ("de", "en"):
        raise ValueError(f"src_lang must be 'de' or 'en', got {src_lang!r}")

    def repl(m: re.Match) -> str:
        word = m.group(0)
        tgt = lexicon.get(word.lower())
        if tgt is None:
            return word
        if m.start() == 0 and word[:1].isupper() and tgt[:1].islower():
            tgt = tgt[:1].upper() + tgt[1:]
        return tgt

    return WORD_PATTERN.sub(repl, text)
