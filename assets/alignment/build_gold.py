"""Build gold.de-en.tsv (or second_pass.de-en.tsv) from its hand-written source (gold.hand.txt).

The source names links by the words themselves (``Zug-train``, ``halb+sieben~half+past+six``, ``das#2-the#2``),
which is easier to write and check by eye than index pairs; this script turns each block into
``German <TAB> English <TAB> links`` with 0-based ``i-j`` (sure) and ``ipj`` (possible) links, German index first,
and stops with the block's line number on a word that is not in the sentence, a repeated word without ``#k``,
or a link given twice.

    python assets/alignment/build_gold.py assets/alignment/gold.hand.txt assets/alignment/gold.de-en.tsv
"""
from __future__ import annotations

import sys
from pathlib import Path


def _index(word: str, tokens: list[str], where: str) -> int:
    name, _, k = word.partition("#")
    hits = [i for i, t in enumerate(tokens) if t == name]
    if not hits:
        raise SystemExit(f"{where}: {name!r} is not a token of {' '.join(tokens)!r}")
    if not k:
        if len(hits) > 1:
            raise SystemExit(f"{where}: {name!r} occurs {len(hits)} times; write {name}#1 .. {name}#{len(hits)}")
        return hits[0]
    if not k.isdigit() or not 1 <= int(k) <= len(hits):
        raise SystemExit(f"{where}: {word!r}: {name!r} occurs {len(hits)} times")
    return hits[int(k) - 1]


def _split(item: str, where: str) -> tuple[str, str, str]:
    for pos in range(1, len(item) - 1):  # the left word is never empty, so "--" or ".-." split right
        if item[pos] in "-~":
            return item[:pos], item[pos], item[pos + 1:]
    raise SystemExit(f"{where}: link {item!r} has no '-' or '~'")


def block_links(de: list[str], en: list[str], spec: str, where: str) -> dict[tuple[int, int], bool]:
    """{(German index, English index): sure?} for one block's link line."""
    links: dict[tuple[int, int], bool] = {}
    for item in spec.split():
        left, kind, right = _split(item, where)
        for lw in left.split("+"):
            for rw in right.split("+"):
                key = (_index(lw, de, where), _index(rw, en, where))
                if key in links:
                    raise SystemExit(f"{where}: link {lw}{kind}{rw} given twice")
                links[key] = kind == "-"
    return links


def convert(source: Path) -> list[str]:
    lines = source.read_text(encoding="utf-8").splitlines()
    rows, block, start = [], [], 0
    for n, line in enumerate(lines + [""], start=1):
        if line.startswith("#"):
            continue
        if line.strip():
            if not block:
                start = n
            block.append(line.strip())
            continue
        if not block:
            continue
        where = f"{source.name}:{start}"
        if len(block) != 3:
            raise SystemExit(f"{where}: a block has {len(block)} lines, not 3 (German, English, links)")
        de, en = block[0].split(), block[1].split()
        links = block_links(de, en, block[2], where)
        text = " ".join(f"{i}{'-' if s else 'p'}{j}" for (i, j), s in sorted(links.items()))
        rows.append(f"{block[0]}\t{block[1]}\t{text}")
        block = []
    return rows


if __name__ == "__main__":
    rows = convert(Path(sys.argv[1]))
    Path(sys.argv[2]).write_text("\n".join(rows) + "\n", encoding="utf-8")
    print(f"{len(rows)} pairs -> {sys.argv[2]}")
