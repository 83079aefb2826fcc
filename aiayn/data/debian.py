"""German-English sentence pairs from Debian packages beside Ding: ``aiayn data debian``.

Sources (see ``shared/notes/data.md`` and ``docs/data.md``): the German gettext catalogues (``.mo``) of the
packages in :data:`TRAIN_PACKAGES` (read by :mod:`~aiayn.data.gettext_pairs`) and translated documentation
shipped as parallel files (LibreOffice and GIMP help beside their English packages, GNOME Mallard help; read
by :mod:`~aiayn.data.help_pages`). Packages are fetched with ``apt-get download`` into a cache folder and read
with ``dpkg-deb --fsys-tarfile`` (nothing is installed). The catalogues of :data:`HELD_OUT` (coreutils, tar,
apt, ...) are never used for training: :func:`check_not_held_out` refuses them, and they only feed the separate
domain test ``test_domain.tsv``.

:func:`prepare_debian` writes one folder: Ding's train/valid/test exactly as ``aiayn data ding`` splits them,
the Debian pairs added to train, a second general test split ``test_general.tsv`` drawn from the Debian
sentences, ``test_domain.tsv``, a joint SentencePiece model on both sides of the combined train, and the
datasheet with one record per package (version, .deb file and sha256, licence, messages read, pairs kept).
"""
from __future__ import annotations

import os
import random
import re
import subprocess
import tarfile
from pathlib import Path

from ..files import sha256_file
from .corpora import Pair
from .game_text import STORY_FORMATS, paragraph_pairs, story_pairs
from .gettext_pairs import clean_pairs, mo_pairs
from .help_pages import aligned_page_pairs
from .splits import is_sentence, normalize, substring_hits

__all__ = ["HELD_OUT", "HELD_OUT_DEBS", "TRAIN_PACKAGES", "STORY_SOURCES", "SOURCE_KINDS", "KIND_WEIGHTS",
           "kind_of", "licence_of", "HELP_COMPANIONS", "DEFAULT_DEB_DIR", "DEFAULT_DEBIAN_DIR",
           "check_not_held_out", "obtain_debs", "read_deb", "package_pairs", "remove_leaks", "draw_heldout"]

#: Source packages whose catalogues are held out for a domain test (never training data).
HELD_OUT = frozenset("coreutils tar grep sed findutils wget bash diffutils gawk gzip apt dpkg gnupg util-linux "
                     "e2fsprogs parted nano less man-db procps passwd sudo".split())
#: Binary packages that hold the German catalogues of :data:`HELD_OUT` in Debian 12 (for ``test_domain.tsv``).
HELD_OUT_DEBS = ("apt", "bash", "coreutils", "diffutils", "dpkg", "e2fsprogs-l10n", "findutils", "gawk",
                 "gnupg-l10n", "grep", "man-db", "nano", "procps", "sed", "sudo", "tar", "util-linux-locales", "wget")
#: German help package -> the package with the same pages in English.
HELP_COMPANIONS = {"libreoffice-help-de": "libreoffice-help-en-us", "gimp-help-de": "gimp-help-en"}
#: Packages read for training (Debian 12 "bookworm" names). Order is the order pairs are read (dedup keeps the
#: first occurrence), so it is part of the output's definition.
TRAIN_PACKAGES = tuple("""
libreoffice-help-de gimp-help-de gnome-user-docs gnome-devel-docs libreoffice-l10n-de gcc-12-locales a2ps
accerciser aisleriot akregator ardour-data ark artikulate atril-common audacious-plugins-data audacity-data
backintime-common baobab binutils-common bison bleachbit blender-data blinken bluefish-data blueman brasero-common
caja-common cantor cataclysm-dda-data catfish celluloid cheese-common cinnamon-l10n claws-mail-i18n cpio
cryptsetup-bin darktable dconf-editor debconf-i18n deja-dup denemo-data dia-common digikam-data dolphin
dolphin-plugins dragonplayer easytag engrampa-common enscript eog eom-common epiphany-browser-data evince-common
evolution-common evolution-data-server-common file-roller filelight filezilla-common five-or-more four-in-a-row
freeciv-data freedroidrpg-data gbrainy gdebi-core gdm3 geany-common gedit-common gettext gimp-data gitg gnome-boxes
gnome-builder gnome-calculator gnome-calendar gnome-characters gnome-chess gnome-clocks gnome-contacts
gnome-control-center-data gnome-disk-utility gnome-font-viewer gnome-initial-setup gnome-keyring gnome-klotski
gnome-logs gnome-mahjongg gnome-maps gnome-mines gnome-music gnome-nibbles gnome-photos gnome-robots
gnome-settings-daemon-common gnome-shell-common gnome-software-common gnome-sound-recorder gnome-sudoku
gnome-system-monitor gnome-taquin gnome-tetravex gnome-tweaks gnome-weather gnote gnubg-data gnucash-common
gnuchess gnumeric-common gparted-common gpredict gramps grisbi-common grub-common gscan2pdf
gstreamer1.0-plugins-bad gstreamer1.0-plugins-good gthumb-data gtranslator gufw gvfs-common gwenview
gwyddion-common hexchat-common hitori homebank-data hugin-data iagno inkscape juk k3b-i18n kalarm kalzium-data
kanagram kbruch kcachegrind kcalc kcharselect kde-config-sddm kde-spectacle kdeconnect kdenlive-data kdepim-addons
kdepim-runtime kdevelop-l10n kdiff3 keditbookmarks kfind kgeography-data kget kgpg khangman khelpcenter
khotkeys-data kig kile-l10n kinfocenter kio kio-extras-data kiten kleopatra kmail kmenuedit kmines kmix kmplot
knights knotes kolf kolourpaint kompare konsole kontact korganizer kpat kreversi krita-l10n krusader kscreen
kstars-data ksudoku ksystemlog ktexteditor-data ktimetracker ktorrent-data kturtle kwalletmanager kwordquiz
labplot-data libc-l10n libglib2.0-data libgphoto2-l10n libgstreamer1.0-0 libgtk-3-common libgtk-4-common
libkf5configwidgets-data libkf5kcmutils-data libkf5newstuff-data libkf5notifyconfig-data libkf5parts-data
libkf5service-data libkf5textwidgets-data libkf5wallet-data libkf5xmlgui-data libsane-common liferea-data lightsoff
lokalize m4 make manaplus-data marble-data mate-control-center-common mate-panel-common mate-utils-common mc-data
meld minetest-data mkvtoolnix mousepad mutt mutter-common nautilus-data navit-data network-manager
network-manager-gnome okteta okular orca parole partitionmanager pavucontrol pidgin-data pim-data-exporter
pim-sieve-editor pitivi planner-data plasma-desktop-data plasma-nm plasma-pa plasma-workspace-data pluma-common
polari polkit-kde-agent-1 powerdevil-data psmisc pulseaudio quadrapassel recode remmina-common rhythmbox-data
ristretto rocs rygel seahorse sharutils shotwell-common simple-scan skrooge-common sound-juicer step sweeper
swell-foop sylpheed-i18n synaptic system-config-printer-common systemsettings tali texinfo thunar-data timeshift
totem-common tuxpaint-data udisks2 viking vim-runtime vlc-l10n warzone2100-data wdiff wesnoth-1.16-data
wesnoth-1.16-did wesnoth-1.16-dm wesnoth-1.16-dw wesnoth-1.16-ei wesnoth-1.16-httt wesnoth-1.16-l wesnoth-1.16-low
wesnoth-1.16-nr wesnoth-1.16-sof wesnoth-1.16-sota wesnoth-1.16-sotbe wesnoth-1.16-thot wesnoth-1.16-trow
wesnoth-1.16-tsg wesnoth-1.16-ttb wesnoth-1.16-utbs widelands-data xboard xfce4-panel xfce4-power-manager-data
xfce4-session xfce4-settings xfce4-terminal xfdesktop4-data xfsprogs xfwm4 xournalpp xsane-common yelp
zenity-common
naev-data gcompris-qt-data colobot-common colobot hedgewars-data ufoai-misc freecol freedink-data freeorion-data
crawl-common
bomber bovo granatier kapman katomic kblackbox kblocks kbounce kbreakout kdiamond kfourinline kgoldrunner kigo
killbots kiriki kjumpingcube klickety klines kmahjongg knavalbattle knetwalk kollision konquest kshisen ksirk
ksnakeduel kspaceduel ksquares kubrick picmi kajongg libkf5kdegames7 ktuberling-data lskat-data palapeli-data
kalgebra-common klettres-data ktouch-data minuet-data parley-data
""".split())
#: Packages whose game text is read beside their ``.mo`` catalogues, and the formats read
#: (:data:`~aiayn.data.game_text.STORY_FORMATS`). 0ad-data (.po inside zip archives) is not read: its .deb is 1.4 GB.
STORY_SOURCES = {"gcompris-qt-data": ("qm",), "hedgewars-data": ("qm", "lua", "keyvalue"),
                 "freecol": ("properties",), "freeorion-data": ("stringtable",), "crawl-common": ("crawl",),
                 "colobot-common": ("colobot",)}
#: The kind of text of each package that is not user-interface text (``"ui"``) or help pages
#: (``"documentation"``, :data:`HELP_COMPANIONS` and Mallard/HTML help): game stories, dialogue and mission text
#: (``"narrative"``) or short everyday sentences and instructions (``"everyday"``). Used for :data:`KIND_WEIGHTS`.
SOURCE_KINDS = {
    **{p: "narrative" for p in """cataclysm-dda-data freedroidrpg-data widelands-data warzone2100-data freeciv-data
       wesnoth-1.16-data wesnoth-1.16-did wesnoth-1.16-dm wesnoth-1.16-dw wesnoth-1.16-ei wesnoth-1.16-httt
       wesnoth-1.16-l wesnoth-1.16-low wesnoth-1.16-nr wesnoth-1.16-sof wesnoth-1.16-sota wesnoth-1.16-sotbe
       wesnoth-1.16-thot wesnoth-1.16-trow wesnoth-1.16-tsg wesnoth-1.16-ttb wesnoth-1.16-utbs naev-data
       hedgewars-data ufoai-misc freecol freeorion-data crawl-common colobot-common""".split()},
    **{p: "everyday" for p in "freedink-data gcompris-qt-data gbrainy tuxpaint-data ktuberling-data".split()},
    **{p: "documentation" for p in "libreoffice-help-de gimp-help-de gnome-user-docs gnome-devel-docs".split()},
}
#: Default upsampling factor per kind: how many times a train pair of that kind is seen per epoch when training
#: weights the mix (``train_kinds.txt`` of a prepared folder names each train pair's kind). A starting point that
#: tilts the mix toward everyday and narrative sentences, to be tuned by measurement (docs/data.md).
KIND_WEIGHTS = {"ding": 1, "ui": 1, "documentation": 1, "narrative": 2, "everyday": 3}
DEFAULT_DEB_DIR = Path("~/.cache/aiayn/debs")
DEFAULT_DEBIAN_DIR = Path("~/.cache/aiayn/data/debian")

_MO = re.compile(r"/(?:de|de_DE)(?:\.UTF-8|\.utf8)?/LC_MESSAGES/([^/]+)\.mo$")
_HELP = re.compile(r"^(.*?/help/)(C|en|en-US|de)/(.+\.(?:page|html))$")
_COPYRIGHT = re.compile(r"^usr/share/doc/[^/]+/copyright$")


def check_not_held_out(package: str, source: str | None = None) -> None:
    """Raise ``ValueError`` if ``package`` (a binary package) or its ``source`` package is held out for the
    domain test (:data:`HELD_OUT`), so its catalogues can never become training data."""
    for name in (package, source or ""):
        name = name.split(" ")[0]
        if name in HELD_OUT or package in HELD_OUT_DEBS:
            raise ValueError(f"package {package!r} (source {source or package!r}) is held out for the domain test "
                             f"and may not be used for training (held out: {', '.join(sorted(HELD_OUT))})")


def obtain_debs(packages, deb_dir: str | os.PathLike = DEFAULT_DEB_DIR, download: bool = True) -> dict[str, Path]:
    """``{package: .deb path}`` for ``packages``, from ``deb_dir`` (``NAME_*.deb``; the last in name order if
    several: keep one version per package there) or fetched into it with one ``apt-get download`` (no root needed).

    Raises:
        FileNotFoundError: a package is not cached and ``download`` is False.
        RuntimeError: ``apt-get download`` failed (its message included).
    """
    deb_dir = Path(deb_dir).expanduser()
    deb_dir.mkdir(parents=True, exist_ok=True)

    def cached(p):
        hits = sorted(deb_dir.glob(f"{p}_*.deb"))
        return hits[-1] if hits else None
    missing = [p for p in packages if cached(p) is None]
    if missing:
        if not download:
            more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
            raise FileNotFoundError(f"{len(missing)} packages not in {deb_dir}: {', '.join(missing[:10])}{more} "
                                    "(run without --no-download)")
        r = subprocess.run(["apt-get", "download", *missing], cwd=deb_dir, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"apt-get download failed: {r.stderr.strip()[-800:]}")
    out = {}
    for p in packages:
        f = cached(p)
        if f is None:
            raise FileNotFoundError(f"apt-get download gave no .deb for {p} in {deb_dir}")
        out[p] = f
    return out


def read_deb(deb: str | os.PathLike, story_formats: tuple[str, ...] = ()) -> dict:
    """Control fields and the files this module reads from one ``.deb``: ``{"package", "version", "source",
    "sha256", "file", "mo": {path: bytes}, "help": {path: bytes}, "story": {path: bytes}, "copyright": text,
    "doc_link": package}`` (``story``: the files matching the patterns of ``story_formats``, keys of
    :data:`~aiayn.data.game_text.STORY_FORMATS`; ``doc_link``: the package whose doc folder
    ``usr/share/doc/PACKAGE`` links to, "" if none).

    Raises:
        RuntimeError: ``dpkg-deb`` cannot read the file.
    """
    deb = Path(deb)
    r = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Version", "Source"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"dpkg-deb cannot read {deb}: {r.stderr.strip()}")
    fields = dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)
    info = {"package": fields.get("Package", ""), "version": fields.get("Version", ""),
            "source": fields.get("Source", fields.get("Package", "")).split(" ")[0],
            "file": deb.name, "sha256": sha256_file(deb), "mo": {}, "help": {}, "story": {}, "copyright": "",
            "doc_link": ""}
    story = [STORY_FORMATS[f] for f in story_formats]
    proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
    with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
        for m in tar:
            name = m.name[2:] if m.name.startswith("./") else m.name
            if m.issym() and re.fullmatch(r"usr/share/doc/[^/]+", name) and "/" not in m.linkname:
                info["doc_link"] = m.linkname  # e.g. gcc-12-locales -> gcc-12-base: copyright lives there
            if not m.isfile():
                continue
            key = "mo" if _MO.search(name) else "help" if _HELP.match(name) else \
                "copyright" if _COPYRIGHT.match(name) else \
                "story" if any(p.search("/" + name) for p in story) else None
            if key:
                data = tar.extractfile(m).read()
                if key == "copyright":
                    info["copyright"] = data.decode("utf-8", "replace")
                else:
                    info[key][name] = data
    proc.wait()
    return info


def licence_of(copyright_text: str) -> str:
    """The licence of a Debian ``copyright`` file: the ``License:`` of its ``Files: *`` stanza (machine-readable
    format), else the licence names it mentions, else the BSD licence when its text is quoted without a name
    (``BSD-2-clause``, ``BSD-3-clause`` or ``BSD-4-clause`` by the clauses it has, as in the ``fortunes`` packages),
    else ``"see copyright file"`` (or, for a package without its own copyright file, e.g. one whose doc folder is a
    symlink, ``"see source package copyright"``)."""
    if not copyright_text.strip():
        return "see source package copyright"
    for stanza in re.split(r"\n\s*\n", copyright_text):
        if re.search(r"^Files:\s*\*\s*$", stanza, re.M):
            m = re.search(r"^License:\s*(.+)$", stanza, re.M)
            if m and len(m.group(1).split()) <= 12 and "free software" not in m.group(1):
                return m.group(1).strip()
    names = re.findall(r"\b(L?GPL-?[23](?:\.[01])?\+?|GFDL-?1\.[23]\+?|MPL-?2\.0|Apache-2\.0|BSD-[234]-clause|"
                       r"CC-BY-SA-[34]\.0|Expat|MIT)\b", copyright_text)
    text = " ".join(re.sub(r"(?m)^\s*[*#]+", " ", copyright_text).split())
    for m in re.finditer(r"GNU (Lesser |Library )?General Public License,? (?:as published by the Free Software "
                         r"Foundation[;,]? )?(?:either )?version (\d(?:\.\d)?)( of the License,? or \(?at your option\)? "
                         r"any later version)?", text):
        names.append(("LGPL-" if m.group(1) else "GPL-") + m.group(2) + ("+" if m.group(3) else ""))
    for m in re.finditer(r"GNU Free Documentation License,? Version (\d\.\d)", text):
        names.append("GFDL-" + m.group(1))
    if not names and re.search(r"GNU GPL|GNU General Public License", text, re.I):
        names.append("GPL (version not stated)")
    if not names and "Redistribution and use in source and binary forms" in text and \
            "Redistributions of source code must retain" in text:
        # the BSD licence quoted in full without its name (fortunes: "This program falls under the BSD copyright"),
        # told apart by its clauses: the advertising clause (4-clause), the no-endorsement clause (3-clause)
        names.append("BSD-4-clause" if "All advertising materials mentioning" in text else
                     "BSD-3-clause" if "to endorse or promote products" in text else "BSD-2-clause")
    return ", ".join(dict.fromkeys(names)) or "see copyright file"


def catalogue_pairs(info: dict, counts: dict, *, skip_held_out: bool = True,
                    split: bool = False) -> tuple[list, int, list[str]]:
    """The raw ``(msgstr, msgid)`` messages of every German ``.mo`` catalogue of a package read by :func:`read_deb`,
    in path order: ``(pairs, messages read, catalogue paths used)``. Unreadable catalogues are skipped and counted in
    ``counts["unreadable_mo"]``; with ``skip_held_out``, so are catalogues whose text domain is a held-out package
    (``counts["held_out_domain_skipped"]``; off for the domain test, which reads exactly those). With ``split``
    (narrative and everyday packages), a message of several lines or sentences is cut into paragraph and sentence
    pairs by :func:`~aiayn.data.game_text.paragraph_pairs` (game dialogue and mission text are long messages)."""
    raw, messages, files = [], 0, []
    for path in sorted(info["mo"]):
        domain = _MO.search(path).group(1)
        if skip_held_out and (domain in HELD_OUT or domain.split("-")[0] in HELD_OUT):
            counts["held_out_domain_skipped"] = counts.get("held_out_domain_skipped", 0) + 1
            continue
        try:
            pairs, n = mo_pairs(info["mo"][path])
        except ValueError:
            counts["unreadable_mo"] = counts.get("unreadable_mo", 0) + 1
            continue
        if split:
            pairs = [q for d, e in pairs for q in paragraph_pairs(d, e, counts)]
        raw.extend(pairs)
        messages += n
        files.append(path)
    return raw, messages, files


def kind_of(package: str) -> str:
    """The kind of text a training package gives (:data:`SOURCE_KINDS`; ``"ui"`` for every other package)."""
    return SOURCE_KINDS.get(package, "ui")


def help_pairs(info: dict, companion: dict | None, counts: dict) -> tuple[list[tuple[str, str]], int]:
    """Raw ``(de, en)`` pairs of the help pages of a package read by :func:`read_deb` (``companion``: the English
    help package of a German one), page by page in path order, and the number of pages paired."""
    help_files = dict(info["help"])
    if companion:
        help_files.update(companion["help"])
    en, de = {}, {}
    for path, data in help_files.items():
        m = _HELP.match(path)
        (de if m.group(2) == "de" else en)[(m.group(1), m.group(3))] = data
    raw, pages = [], 0
    for key in sorted(en):
        if key in de:
            pairs, how = aligned_page_pairs(en[key].decode("utf-8", "replace"), de[key].decode("utf-8", "replace"))
            counts[f"pages_{how}"] = counts.get(f"pages_{how}", 0) + 1
            raw.extend(pairs)
            pages += 1
    return raw, pages


def package_pairs(info: dict, companion: dict | None = None) -> tuple[list[tuple[str, str, bool]], dict]:
    """Cleaned ``(de, en, normalised)`` pairs of one package read by :func:`read_deb` (``companion``: the English
    help package for a German help package) and its census record: catalogues, then help pages, then the story
    files of :data:`STORY_SOURCES` (:func:`~aiayn.data.game_text.story_pairs`). ``.mo`` catalogues whose text
    domain is held out are skipped and counted.

    Raises:
        ValueError: the package is held out (:func:`check_not_held_out`).
    """
    check_not_held_out(info["package"], info["source"])
    counts: dict = {}
    raw, messages, files = catalogue_pairs(info, counts, split=kind_of(info["package"]) in ("narrative", "everyday"))
    hp, pages = help_pairs(info, companion, counts)
    story, n_story, story_files = story_pairs(info.get("story", {}), STORY_SOURCES.get(info["package"], ()), counts)
    raw += hp + story
    kept = clean_pairs(raw, counts)
    record = {"package": info["package"], "version": info["version"], "source": info["source"],
              "file": info["file"], "sha256": info["sha256"], "licence": licence_of(info["copyright"]),
              "kind": kind_of(info["package"]), "mo_files": len(files), "help_pages": pages,
              "story_files": len(story_files), "messages_read": messages + len(hp) + n_story,
              "pairs_kept": len(kept), "rules": counts}
    if companion:
        record["companion"] = {k: companion[k] for k in ("package", "version", "file", "sha256")}
    return kept, record


def remove_leaks(pairs: list[Pair], held: set[str], min_substring_words: int = 4) -> tuple[list[Pair], int, int]:
    """``pairs`` without those whose normalised German or English side equals a string in ``held`` or contains
    one of ``min_substring_words``+ words (the rule of :func:`~aiayn.data.splits.make_splits`). Returns
    ``(kept, removed_exact, removed_substring)``."""
    subs = sorted({h for h in held if len(h.split()) >= min_substring_words}, key=len)
    keys = [(normalize(p.de), normalize(p.en)) for p in pairs]
    bad: dict[int, str] = {}
    for i, (kd, ke) in enumerate(keys):
        if kd in held or ke in held:
            bad[i] = "exact"
    if subs:
        texts, owners = [], []
        for i, k in enumerate(keys):
            if i not in bad:
                for t in k:
                    if len(t) > len(subs[0]):
                        texts.append(t)
                        owners.append(i)
        for i, _ in substring_hits(texts, owners, subs):
            bad.setdefault(i, "substring")
    kept = [p for i, p in enumerate(pairs) if i not in bad]
    vals = list(bad.values())
    return kept, vals.count("exact"), vals.count("substring")


def draw_heldout(cands: list[Pair], n: int, seed: int, taken: set[str]) -> list[Pair]:
    """Up to ``n`` pairs drawn from ``cands`` (shuffled with ``random.Random(seed)``) whose two sides are full
    sentences (:func:`~aiayn.data.splits.is_sentence`, no "/") and whose normalised sides are not in ``taken``;
    each drawn side is added to ``taken`` (so a sentence occurs once in all held-out sets)."""
    idx = [i for i, p in enumerate(cands)
           if is_sentence(p.de) and is_sentence(p.en) and "/" not in p.de and "/" not in p.en]
    random.Random(seed).shuffle(idx)
    out = []
    for i in idx:
        if len(out) >= n:
            break
        kd, ke = normalize(cands[i].de), normalize(cands[i].en)
        if kd in taken or ke in taken:
            continue
        taken.update((kd, ke))
        out.append(cands[i])
    return out
