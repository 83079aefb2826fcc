"""German-English text of Debian's games and children's software that is not in gettext catalogues.

One reader per file format; each gives raw ``(de, en)`` pairs for :func:`~aiayn.data.gettext_pairs.clean_pairs`
(the same cleaning rules as every other Debian source):

- Qt ``.qm`` catalogues (:func:`qm_messages`; gcompris-qt-data ``gcompris_de.qm``, hedgewars-data
  ``hedgewars_de.qm``): the English source text is kept in the file beside the German translation.
- Java ``.properties`` paired by key (:func:`read_properties`; freecol ``FreeColMessages.properties`` beside
  ``FreeColMessages_de.properties``).
- ``key=value`` files paired by key (:func:`read_keyvalue`; hedgewars ``Locale/en.txt``/``de.txt``,
  ``missions_{en,de}.txt``, ``campaigns_{en,de}.txt``) and Lua tables ``["English"] = "Deutsch"``
  (:func:`lua_table_pairs`; hedgewars ``Locale/de.lua``).
- FreeOrion stringtables paired by key (:func:`read_stringtable`; ``stringtables/en.txt``/``de.txt``).
- Dungeon Crawl descriptions (:func:`read_crawl_entries`; ``dat/descript/*.txt`` beside ``dat/descript/de/``,
  ``%%%%``-separated entries whose first line is the English key in both languages).
- Colobot (:func:`colobot_text`, :func:`colobot_scene`): help files ``help/E/...`` beside ``help/D/...`` and
  ``help.E.txt`` beside ``help.D.txt``; level titles and summaries ``Title.E text="..."`` / ``Title.D ...``.

A text of several paragraphs (lines, or blank-line separated blocks in hard-wrapped files) is paired paragraph
by paragraph when both sides have the same number of paragraphs (else kept whole), and a paragraph pair is cut
into sentence pairs when both give the same number of sentences (:func:`~aiayn.data.help_pages.split_sentences`),
as for help pages (:func:`paragraph_pairs`); the catalogue messages of narrative and everyday packages are cut
the same way (:func:`~aiayn.data.debian.catalogue_pairs`). Format-specific placeholders (FreeCol ``%name%`` and
``{{plural:...}}`` templates, FreeOrion ``%1%`` and ``[[KEY]]`` references, Crawl ``$cmd[...]``) are rewritten to
``{0}`` so the shared placeholder rules count, replace and limit them (more than two: dropped). Crawl's
``quotes.txt`` (literary quotations whose German versions are loose, often word-by-word renderings) is not read.
:func:`story_pairs` reads every file of a package by these rules.
"""
from __future__ import annotations

import re
from typing import Callable, Iterable

from .corpora import collapse_whitespace
from .gettext_pairs import MAX_WORDS, MIN_WORDS
from .help_pages import split_sentences

__all__ = ["QM_MAGIC", "STORY_FORMATS", "GAME_RULES", "qm_messages", "read_properties", "read_keyvalue",
           "lua_table_pairs", "read_stringtable", "read_crawl_entries", "colobot_text", "colobot_scene",
           "paragraph_pairs", "keyed_pairs", "story_pairs"]

#: The first 16 bytes of every Qt ``.qm`` file (``QTranslator``'s magic number).
QM_MAGIC = bytes.fromhex("3cb86418caef9c95cd211cbf60a1bddd")
_QM_MESSAGES = 0x69          # section tags: 0x2f contexts, 0x42 hash table, 0x69 messages, 0x88 numerus rules, ...
_QM_END, _QM_TRANSLATION, _QM_OBSOLETE1 = 1, 3, 5
_QM_SOURCE, _QM_CONTEXT, _QM_COMMENT = 6, 7, 8
_QM_LENGTH_TAGS = {2, 3, 4, 6, 7, 8, 9}   # tags followed by a 4-byte big-endian length and that many bytes

#: Rules of this module, as written into the datasheet (beside :data:`~aiayn.data.gettext_pairs.RULES`).
GAME_RULES = {
    "game_placeholders": "game placeholders count as placeholders (become `X`): FreeCol `%name%` and `{{plural:...}}`, "
                         "FreeOrion `%1%` and `[[KEY]]`, Crawl `$cmd[...]`",
    "paragraphs_unequal": "multi-paragraph game texts whose two sides have different paragraph counts are kept "
                          "whole (paragraphs joined)",
}

#: Path patterns of the files each story format reads (matched on the path inside the .deb).
STORY_FORMATS = {
    "qm": re.compile(r"/[^/]+_de(?:_DE)?\.qm$"),
    "properties": re.compile(r"/strings/FreeColMessages(?:_de)?\.properties$"),
    "keyvalue": re.compile(r"/Locale/(?:missions_|campaigns_)?(?:de|en)\.txt$"),
    "lua": re.compile(r"/Locale/de\.lua$"),
    "stringtable": re.compile(r"/stringtables/(?:de|en)\.txt$"),
    "crawl": re.compile(r"/descript/(?:de/)?(?!quotes\.txt)[^/]+\.txt$"),
    "colobot": re.compile(r"/colobot/(?:help/[ED]/.+|levels/.+/(?:help\.[ED]|scene|chaptertitle))\.txt$"),
}
_GAME_PLACEHOLDER = re.compile(
    r"%[A-Za-z_][\w.]*%|%\d+%"                       # FreeCol %name%, FreeOrion %1%
    r"|\$cmd\[[A-Z_]+\]"                             # Crawl key bindings
    r"|\{\{(?:[^{}]|\{\{[^{}]*\}\})*\}\}"              # FreeCol {{plural:...}} (one level of nesting)
    r"|\[\[[^\[\]]*\]\]")                            # FreeOrion [[KEY]] references


def qm_messages(data: bytes) -> list[tuple[str, str, str]]:
    """``(context, source text, translation)`` of every message of a Qt ``.qm`` catalogue, in file order.

    The file is ``QM_MAGIC`` then sections ``tag (1 byte), length (4 bytes, big-endian), data``; the messages
    section (tag 0x69) holds each message as tagged fields ending with tag 1: 3 translation (UTF-16BE; one per
    plural form, the first is kept; length 0xFFFFFFFF = none), 6 source text (UTF-8), 7 context, 8 comment,
    5 an obsolete 4-byte field (Qt's ``qtranslator.cpp``). Messages without source text (id-based catalogues,
    or ``lrelease`` told to strip it) come back with source "".

    Raises:
        ValueError: not a ``.qm`` file, or a truncated or unknown field.
    """
    if not data.startswith(QM_MAGIC):
        raise ValueError("not a Qt .qm catalogue (bad magic number)")
    pos, out = len(QM_MAGIC), []
    while pos < len(data):
        if pos + 5 > len(data):
            raise ValueError(f"truncated .qm section header at byte {pos}")
        tag, n = data[pos], int.from_bytes(data[pos + 1:pos + 5], "big")
        if pos + 5 + n > len(data):
            raise ValueError(f"truncated .qm section (tag 0x{tag:02x}) at byte {pos}")
        if tag == _QM_MESSAGES:
            out.extend(_qm_message_block(data[pos + 5:pos + 5 + n]))
        pos += 5 + n
    return out


def _qm_message_block(b: bytes) -> list[tuple[str, str, str]]:
    out, pos, fields = [], 0, {}
    while pos < len(b):
        tag = b[pos]
        pos += 1
        if tag == _QM_END:
            out.append((fields.get(_QM_CONTEXT, ""), fields.get(_QM_SOURCE, ""), fields.get(_QM_TRANSLATION, "")))
            fields = {}
        elif tag == _QM_OBSOLETE1:
            pos += 4
        elif tag in _QM_LENGTH_TAGS:
            n = int.from_bytes(b[pos:pos + 4], "big")
            pos += 4
            if n == 0xFFFFFFFF:
                continue
            raw = b[pos:pos + n]
            if len(raw) < n:
                raise ValueError("truncated .qm message")
            pos += n
            if tag == _QM_TRANSLATION:
                fields.setdefault(tag, raw.decode("utf-16-be", "replace"))  # first plural form only
            elif tag in (_QM_SOURCE, _QM_CONTEXT, _QM_COMMENT):
                fields[tag] = raw.decode("utf-8", "replace").rstrip("\0")
        else:
            raise ValueError(f"unknown .qm message field tag {tag} at byte {pos - 1}")
    return out


_PROP_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f"}


def _unescape_properties(s: str) -> str:
    def repl(m):
        c = m.group(1)
        if c.startswith("u"):
            return chr(int(c[1:], 16))
        return _PROP_ESCAPES.get(c, c)
    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", repl, s)


def read_properties(text: str) -> dict[str, str]:
    """``{key: value}`` of a Java ``.properties`` file: ``#``/``!`` comment lines skipped, a line ending in an odd
    number of backslashes continues on the next (its leading blanks dropped), the key ends at the first unescaped
    ``=``, ``:`` or blank, escapes ``\\uXXXX`` ``\\n`` ``\\t`` decoded. A repeated key keeps its last value."""
    out, buf = {}, ""
    for line in text.splitlines():
        part = line.lstrip() if buf else line
        if not buf and (not part.strip() or part.lstrip()[:1] in ("#", "!")):
            continue
        trail = len(part) - len(part.rstrip("\\"))
        if trail % 2:
            buf += part[:-1]
            continue
        logical, buf = (buf + part).lstrip(), ""
        m = re.match(r"((?:\\.|[^=:\s\\])*)\s*[=:]?\s*(.*)$", logical, re.S)
        if m and m.group(1):
            out[_unescape_properties(m.group(1))] = _unescape_properties(m.group(2))
    return out


def read_keyvalue(text: str) -> dict[str, str]:
    """``{key: value}`` of a ``key=value`` file (hedgewars locale, missions and campaigns): blank lines and lines
    starting with ``;`` or ``#`` skipped, surrounding double quotes of a value removed, ``|`` (a line break in
    hedgewars) kept as a newline."""
    out = {}
    for line in text.splitlines():
        s = line.strip()
        if not s or s[0] in ";#":
            continue
        key, sep, val = s.partition("=")
        if not sep:
            continue
        val = val.strip()
        if len(val) >= 2 and val[0] == val[-1] == '"':
            val = val[1:-1]
        out[key.strip()] = val.replace("|", "\n")
    return out


_LUA_ENTRY = re.compile(r'^\s*\[\s*"((?:[^"\\]|\\.)*)"\s*\]\s*=\s*"((?:[^"\\]|\\.)*)"', re.M)
_LUA_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'"}


def lua_table_pairs(text: str) -> list[tuple[str, str]]:
    """``(de, en)`` of every entry ``["English"] = "Deutsch"`` of a Lua locale table (hedgewars ``de.lua``), in file
    order. Commented-out entries (``-- ["..."] = ...``, untranslated in hedgewars) are skipped; Lua escapes are
    decoded and ``|`` (a line break in hedgewars) becomes a newline."""
    def unesc(s):
        return re.sub(r"\\(.)", lambda m: _LUA_ESCAPES.get(m.group(1), m.group(1)), s).replace("|", "\n")
    return [(unesc(de), unesc(en)) for en, de in _LUA_ENTRY.findall(text)]


def read_stringtable(text: str) -> dict[str, str]:
    """``{key: value}`` of a FreeOrion stringtable: the first line names the language; then a key line followed
    by its value line, or by a value in ``'''`` quotes over several lines; ``#`` lines and blank lines between
    entries are skipped."""
    lines = text.lstrip("\ufeff").splitlines()
    out, i = {}, 1
    while i < len(lines):
        key = lines[i].strip()
        i += 1
        if not key or key.startswith("#") or i >= len(lines):
            continue
        val = lines[i]
        i += 1
        if val.startswith("'''"):
            body = [val[3:]]
            while not body[-1].rstrip().endswith("'''") and i < len(lines):
                body.append(lines[i])
                i += 1
            val = "\n".join(body).rstrip()
            val = val[:-3] if val.endswith("'''") else val
        out[key] = val
    return out


def read_crawl_entries(text: str) -> dict[str, str]:
    """``{key: body}`` of a Dungeon Crawl description file: entries separated by ``%%%%`` lines, the first line of
    an entry is its key (English in every language), the rest its text (hard-wrapped lines, blank-line separated
    paragraphs). Lines starting with ``#`` before an entry are comments."""
    out = {}
    for chunk in re.split(r"^%%%%[ \t]*$", text, flags=re.M):
        lines = [ln for ln in chunk.strip("\n").split("\n")]
        while lines and (not lines[0].strip() or lines[0].startswith("#")):
            lines.pop(0)
        if len(lines) >= 2:
            out[lines[0].strip()] = "\n".join(lines[1:]).strip("\n")
    return out


_COLOBOT_LINK = re.compile(r"\\l;(.*?)\\u [^;]*;")
_COLOBOT_CODE_LINE = re.compile(r"^\s*\\(?:s;|image|button|key|tab)")


def colobot_text(text: str) -> str:
    """A Colobot help file as plain text with blank-line separated paragraphs: ``\\l;text\\u target;`` links
    become their text, code lines (``\\s;``) and images are dropped, headings (``\\b;`` ``\\t;``) become
    paragraphs of their own, other markers (``\\c;`` ``\\n;``) are removed."""
    out = []
    for line in text.splitlines():
        if _COLOBOT_CODE_LINE.match(line):
            out.append("")
            continue
        heading = line.startswith(("\\b;", "\\t;"))
        line = _COLOBOT_LINK.sub(r"\1", line)
        line = re.sub(r"\\[a-z];", "", line)
        out.extend(["", line, ""] if heading else [line])
    return "\n".join(out)


_SCENE_LINE = re.compile(r"^(\w+)\.([A-Z])\s+(.*)$")
_SCENE_ATTR = re.compile(r'(\w+)="([^"]*)"')


def colobot_scene(text: str) -> dict[str, dict[str, str]]:
    """``{language letter: {"Name.attribute": text}}`` of a Colobot ``scene.txt``/``chaptertitle.txt``: lines
    ``Title.E text="..." resume="..."`` (E English, D German, ...)."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        m = _SCENE_LINE.match(line.strip())
        if m:
            for attr, val in _SCENE_ATTR.findall(m.group(3)):
                out.setdefault(m.group(2), {})[f"{m.group(1)}.{attr}"] = val
    return out


def _paragraphs(text: str, wrapped: bool) -> list[str]:
    parts = re.split(r"\n\s*\n", text) if wrapped else text.split("\n")
    return [p for p in (collapse_whitespace(x) for x in parts) if p]


def paragraph_pairs(de: str, en: str, counts: dict, wrapped: bool = False) -> list[tuple[str, str]]:
    """``(de, en)`` pairs of one text in two languages: paragraphs (lines; with ``wrapped``, blank-line separated
    blocks of hard-wrapped lines) paired in order when both sides have as many (else the whole texts, counted as
    ``paragraphs_unequal``), each pair cut into sentence pairs when both sides give the same number of sentences
    and either every sentence has :data:`~aiayn.data.gettext_pairs.MIN_WORDS`+ words or the paragraph is longer
    than :data:`~aiayn.data.gettext_pairs.MAX_WORDS` (a cut that would only make pieces too short to keep is not
    made).
    Game placeholders and templates become ``{0}`` first (counted as ``game_placeholders``)."""
    d2, e2 = _GAME_PLACEHOLDER.sub("{0}", de), _GAME_PLACEHOLDER.sub("{0}", en)
    if (d2, e2) != (de, en):
        counts["game_placeholders"] = counts.get("game_placeholders", 0) + 1
    de, en = d2, e2
    pd, pe = _paragraphs(de, wrapped), _paragraphs(en, wrapped)
    if len(pd) != len(pe):
        counts["paragraphs_unequal"] = counts.get("paragraphs_unequal", 0) + 1
        pd, pe = [" ".join(pd)], [" ".join(pe)]
    out = []
    for d, e in zip(pd, pe):
        sd, se = split_sentences(d), split_sentences(e)
        cut = len(sd) == len(se) > 1 and (min(len(x.split()) for x in sd + se) >= MIN_WORDS
                                          or max(len(d.split()), len(e.split())) > MAX_WORDS)
        out.extend(zip(sd, se) if cut else [(d, e)])
    return out


def keyed_pairs(de: dict[str, str], en: dict[str, str], counts: dict, wrapped: bool = False) -> list[tuple[str, str]]:
    """:func:`paragraph_pairs` of every key present in both tables with a German value, in the English table's
    order (deterministic)."""
    out = []
    for key, e in en.items():
        d = de.get(key)
        if d and e:
            out.extend(paragraph_pairs(d, e, counts, wrapped))
    return out


def _decode(data: bytes) -> str:
    return data.decode("utf-8-sig", "replace")


def _by_partner(files: dict[str, bytes], de_to_en: Callable[[str], str], read, wrapped: bool,
                counts: dict) -> tuple[list, int, list[str]]:
    raw, n, used = [], 0, []
    for path in sorted(files):
        en_path = de_to_en(path)
        if en_path == path or en_path not in files:
            continue
        de_tab, en_tab = read(_decode(files[path])), read(_decode(files[en_path]))
        n += sum(1 for k in en_tab if de_tab.get(k))
        raw.extend(keyed_pairs(de_tab, en_tab, counts, wrapped))
        used.append(path)
    return raw, n, used


def _qm(files, counts):
    raw, n, used = [], 0, []
    for path in sorted(files):
        msgs = qm_messages(files[path])
        n += len(msgs)
        raw.extend((de, en) for _, en, de in msgs if en and de)
        used.append(path)
    return raw, n, used


def _lua(files, counts):
    raw, n, used = [], 0, []
    for path in sorted(files):
        entries = lua_table_pairs(_decode(files[path]))
        n += len(entries)
        for de, en in entries:
            raw.extend(paragraph_pairs(de, en, counts))
        used.append(path)
    return raw, n, used


def _colobot(files, counts):
    raw, n, used = [], 0, []
    for path in sorted(files):
        if path.endswith(("/scene.txt", "/chaptertitle.txt")):
            langs = colobot_scene(_decode(files[path]))
            de, en = langs.get("D", {}), langs.get("E", {})
            n += sum(1 for k in en if de.get(k))
            raw.extend(keyed_pairs(de, en, counts))
            used.append(path)
            continue
        en_path = re.sub(r"/help/D/", "/help/E/", re.sub(r"help\.D\.txt$", "help.E.txt", path))
        if en_path != path and en_path in files:
            de, en = colobot_text(_decode(files[path])), colobot_text(_decode(files[en_path]))
            n += 1
            raw.extend(paragraph_pairs(de, en, counts, wrapped=True))
            used.append(path)
    return raw, n, used


_READERS = {
    "qm": _qm,
    "lua": _lua,
    "colobot": _colobot,
    "properties": lambda f, c: _by_partner(f, lambda p: p.replace("_de.properties", ".properties"),
                                           read_properties, False, c),
    "keyvalue": lambda f, c: _by_partner(f, lambda p: re.sub(r"(/|_)de\.txt$", r"\1en.txt", p),
                                         read_keyvalue, False, c),
    "stringtable": lambda f, c: _by_partner(f, lambda p: re.sub(r"/de\.txt$", "/en.txt", p),
                                            read_stringtable, False, c),
    "crawl": lambda f, c: _by_partner(f, lambda p: p.replace("/descript/de/", "/descript/"),
                                      read_crawl_entries, True, c),
}


def story_pairs(files: dict[str, bytes], formats: Iterable[str], counts: dict) -> tuple[list, int, list[str]]:
    """Raw ``(de, en)`` pairs of a package's story files (``{path in the .deb: bytes}``, as collected by
    :func:`~aiayn.data.debian.read_deb`) read in each of ``formats`` (keys of :data:`STORY_FORMATS`), format by
    format in the given order, files in path order. Returns ``(pairs, messages read, German files used)``; a
    file a reader cannot parse is skipped and counted as ``unreadable_story``."""
    raw, n, used = [], 0, []
    for fmt in formats:
        pat = STORY_FORMATS[fmt]
        mine = {p: b for p, b in files.items() if pat.search("/" + p)}
        try:
            r, k, u = _READERS[fmt](mine, counts)
        except ValueError:
            counts["unreadable_story"] = counts.get("unreadable_story", 0) + 1
            continue
        raw.extend(r)
        n += k
        used.extend(u)
    return raw, n, used
