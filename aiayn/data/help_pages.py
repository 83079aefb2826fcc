"""Parallel paragraphs from translated documentation shipped as files side by side in Debian packages.

LibreOffice's help (``libreoffice-help-de`` beside ``libreoffice-help-en-us``: one HTML page per topic, every
paragraph carrying the same ``id`` in both languages), GIMP's help (``gimp-help-de`` beside ``gimp-help-en``:
HTML built from the same DocBook source, so the block structure is identical) and GNOME's help
(``gnome-user-docs``: Mallard ``.page`` XML under ``help/C/`` and ``help/de/``, translated with itstool, which
keeps the structure). :func:`text_blocks` lists a page's text blocks (paragraphs, headings, list items, table
cells) in document order with their ``id``; :func:`align_blocks` pairs the blocks of the two languages of one
page; :func:`split_sentences` cuts a paragraph into sentences so that paragraphs with the same number of
sentences on both sides give one pair per sentence.
"""
from __future__ import annotations

import html.parser
import os
import re
from pathlib import Path
from typing import NamedTuple

from .corpora import collapse_whitespace

__all__ = ["Block", "text_blocks", "align_blocks", "split_sentences", "aligned_page_pairs", "parallel_files"]

#: Elements whose text is one block (HTML and Mallard). Nested blocks (a ``<p>`` in an ``<li>``) are separate
#: blocks; the outer block keeps only its own text.
BLOCK_TAGS = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "td", "th", "dt", "dd", "title",
                        "caption", "desc", "para", "simpara", "term", "entry", "question"})
#: Elements whose content is never text to translate (code listings, scripts, screen output, Mallard
#: metadata / link lists).
SKIP_TAGS = frozenset({"script", "style", "pre", "code", "screen", "info", "links", "head", "noscript", "svg",
                       "programlisting", "screen", "synopsis", "literallayout", "author", "authorgroup",
                       "legalnotice", "othercredit", "copyright", "date", "releaseinfo"})
_VOID = frozenset({"br", "img", "hr", "meta", "link", "input", "area", "base", "col", "embed", "param", "source",
                   "track", "wbr"})


class Block(NamedTuple):
    """One text block of a page: ``tag`` (lower-case element name), ``id`` (its ``id`` or ``xml:id``, "" if
    none) and ``text`` (its own text, entities decoded, whitespace collapsed)."""

    tag: str
    id: str
    text: str


class _BlockParser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[list] = []   # [tag, id, [text parts]]
        self.skip = 0
        self.blocks: list[Block] = []

    def handle_starttag(self, tag, attrs):
        if tag in _VOID:
            if tag == "br" and self.stack:
                self.stack[-1][2].append(" ")
            return
        if tag in SKIP_TAGS:
            self.skip += 1
        elif tag in BLOCK_TAGS and not self.skip:
            a = dict(attrs)
            self.stack.append([tag, a.get("id") or a.get("xml:id") or "", []])

    def handle_startendtag(self, tag, attrs):
        if tag == "br" and self.stack:
            self.stack[-1][2].append(" ")

    def handle_endtag(self, tag):
        if tag in SKIP_TAGS:
            self.skip = max(0, self.skip - 1)
        elif tag in BLOCK_TAGS and not self.skip and self.stack:
            # close up to the matching open block (HTML may omit end tags)
            for k in range(len(self.stack) - 1, -1, -1):
                if self.stack[k][0] == tag:
                    while len(self.stack) > k:
                        t, i, parts = self.stack.pop()
                        text = collapse_whitespace("".join(parts))
                        if text:
                            self.blocks.append(Block(t, i, text))
                    break

    def handle_data(self, data):
        if self.stack and not self.skip:
            self.stack[-1][2].append(data)


def text_blocks(markup: str) -> list[Block]:
    """Text blocks of an HTML or Mallard XML page, in the order their elements close (the same order for two
    translations of one page). Text inside ``<script>``, ``<pre>``, ``<code>`` and similar (:data:`SKIP_TAGS`) is
    left out; inline markup (``<b>``, ``<gui>``, ``<link>``) is dropped and its text kept."""
    p = _BlockParser()
    p.feed(markup)
    p.close()
    while p.stack:  # unclosed blocks at the end of the page
        t, i, parts = p.stack.pop()
        text = collapse_whitespace("".join(parts))
        if text:
            p.blocks.append(Block(t, i, text))
    return p.blocks


def align_blocks(en: list[Block], de: list[Block]) -> tuple[list[tuple[str, str]], str]:
    """Pair the blocks of the English and German version of one page.

    * Same number of blocks and the same tag sequence: paired in order ("order").
    * Otherwise, blocks whose ``id`` occurs once on each side are paired by ``id`` ("id"; LibreOffice help).
    * Otherwise nothing is paired ("skipped").

    Returns ``([(de_text, en_text), ...], how)``.
    """
    if len(en) == len(de) and all(a.tag == b.tag for a, b in zip(en, de)):
        return [(b.text, a.text) for a, b in zip(en, de)], "order"
    def unique(blocks):
        seen, dup = {}, set()
        for b in blocks:
            if b.id:
                if b.id in seen:
                    dup.add(b.id)
                seen[b.id] = b
        return {k: v for k, v in seen.items() if k not in dup}
    ue, ud = unique(en), unique(de)
    common = [k for k in ue if k in ud]
    if common:
        return [(ud[k].text, ue[k].text) for k in common], "id"
    return [], "skipped"


#: A sentence boundary: ``.`` ``!`` ``?`` (optionally closing quotes/brackets), whitespace, then an upper-case
#: letter, digit or opening quote. Abbreviations such as "z. B." or "e.g." are followed by lower case in
#: practice, and a paragraph is only cut when both languages give the same number of pieces.
_SENT_BOUNDARY = re.compile(r"(?<=[.!?])[\"'»”’)]*\s+(?=[A-ZÄÖÜ0-9\"„“«(])")
_NO_SPLIT_AFTER = re.compile(r"(?:\b(?:z|d|u|o|B|h|bzw|ggf|usw|vgl|Nr|Abb|ca|e\.g|i\.e|etc|Fig|No|vs|Dr|Mr|Mrs|St)|\b\w)\.$")


def split_sentences(text: str) -> list[str]:
    """``text`` cut at sentence boundaries (see ``_SENT_BOUNDARY``); a cut right after a known abbreviation
    ("z.", "B.", "Nr.", "e.g.") or a single letter is not made. Returns the pieces, stripped, in order."""
    pieces, start = [], 0
    for m in _SENT_BOUNDARY.finditer(text):
        head = text[start:m.start()].rstrip("\"'»”’)")
        if _NO_SPLIT_AFTER.search(head):
            continue
        pieces.append(text[start:m.start()].strip())
        start = m.end()
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


def aligned_page_pairs(en_markup: str, de_markup: str) -> tuple[list[tuple[str, str]], str]:
    """``(de, en)`` text pairs of one page in two languages: blocks aligned by :func:`align_blocks`, then
    each block pair cut into sentences by :func:`split_sentences` when both sides give the same number of
    sentences (otherwise the block pair is kept whole). Returns ``(pairs, how)``."""
    blocks, how = align_blocks(text_blocks(en_markup), text_blocks(de_markup))
    out = []
    for de, en in blocks:
        sd, se = split_sentences(de), split_sentences(en)
        if len(sd) == len(se) and len(sd) > 1:
            out.extend(zip(sd, se))
        else:
            out.append((de, en))
    return out, how


def parallel_files(en_root: str | os.PathLike, de_root: str | os.PathLike,
                   suffixes: tuple[str, ...] = (".html", ".page", ".docbook")) -> list[tuple[Path, Path]]:
    """``(en_file, de_file)`` for every file under ``en_root`` with one of ``suffixes`` that has a file of the
    same relative path under ``de_root``, sorted by relative path (deterministic).

    Raises:
        FileNotFoundError: a root folder is missing.
    """
    en_root, de_root = Path(en_root), Path(de_root)
    for r in (en_root, de_root):
        if not r.is_dir():
            raise FileNotFoundError(f"help folder not found: {r}")
    out = []
    for f in sorted(en_root.rglob("*")):
        if f.suffix in suffixes and f.is_file():
            g = de_root / f.relative_to(en_root)
            if g.is_file():
                out.append((f, g))
    return out
