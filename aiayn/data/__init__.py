"""Parallel data: obtaining and parsing the Ding German-English corpus, generic TSV/Moses corpora, leak-free
splits, token-count batching, and preparing a data folder (``aiayn data``). Nothing here imports torch.

:mod:`~aiayn.data.ding` owns the Ding dictionary (Frank Richter, TU Chemnitz; GPL-2.0-or-later, Debian
package ``trans-de-en``): :func:`obtain_ding` (``apt-get download`` or a given file, sha256-checked) and
:func:`parse_ding` (one pair per aligned sub-entry, first synonym, annotations stripped, with a
:class:`ParseReport` of what was dropped).

:mod:`~aiayn.data.corpora` owns the formats on disk: the :class:`Pair` record, :func:`read_tsv` /
:func:`write_tsv` (UTF-8, tab-separated, no quoting, atomic writes) and :func:`read_moses` (two line-aligned
files).

:mod:`~aiayn.data.splits` owns the leak-free train/valid/test split: :func:`is_sentence` (the held-out
pool), :func:`normalize` (the dedup/leakage key) and :func:`make_splits` (with a :class:`SplitReport`).

:mod:`~aiayn.data.batching` owns batching (Section 5.1: "Sentence pairs were batched together by approximate
sequence length"): :func:`token_batches` (batches of at most ``max_tokens`` padded tokens) and
:func:`~aiayn.data.batching.pad_ids` (the one padding routine, ``(B, W)`` int64).

:mod:`~aiayn.data.debian` (with :mod:`~aiayn.data.gettext_pairs` for ``.mo`` catalogues and the cleaning rules,
and :mod:`~aiayn.data.help_pages` for help pages shipped in two languages) owns German-English text from Debian
packages beside Ding: fetching and reading ``.deb`` files, the held-out packages of the domain test
(:data:`HELD_OUT`, :func:`check_not_held_out`).

:mod:`~aiayn.data.prepare` owns a prepared data folder and the ``aiayn data {ding,debian,tsv,moses}`` command
(:func:`cli_main`): :func:`prepare_pairs` / :func:`prepare_ding` / :func:`~aiayn.data.prepare_debian.prepare_debian` write ``train/valid/test.tsv``,
``dictionary.tsv`` (:func:`build_dictionary`, train only), a joint SentencePiece model ``spm.model``
(Section 5.1) and the datasheet. The word-by-word baseline that reads ``dictionary.tsv`` is an evaluation
tool and lives in :mod:`aiayn.evaluation.baseline`.

The names below are re-exported lazily, so ``from aiayn import data; data.parse_ding(...)`` works and
``import aiayn.data.batching`` stays light.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

#: public name -> submodule that defines it (imported on first use: a translation process needs only
#: ``batching``, not pandas or SentencePiece training)
_LAZY: dict[str, str] = {
    **dict.fromkeys(["sha256_file"], "..files"),
    **dict.fromkeys(["token_batches", "pad_ids"], ".batching"),
    **dict.fromkeys(["Pair", "read_moses", "read_tsv", "write_tsv", "read_lines"], ".corpora"),
    **dict.fromkeys(["DEFAULT_DING_DIR", "DING_ATTRIBUTION", "DING_DEBIAN_PACKAGE", "DING_LICENSE", "DING_SHA256",
                     "DING_VERSION", "ParseReport", "clean_text", "first_synonym", "obtain_ding", "parse_ding",
                     "parse_ding_line"], ".ding"),
    **dict.fromkeys(["build_dictionary", "cli_main", "prepare_ding", "prepare_pairs"], ".prepare"),
    "prepare_debian": ".prepare_debian",
    **dict.fromkeys(["HELD_OUT", "TRAIN_PACKAGES", "check_not_held_out", "obtain_debs", "read_deb"], ".debian"),
    **dict.fromkeys(["clean_message", "mo_pairs", "pair_filter"], ".gettext_pairs"),
    **dict.fromkeys(["aligned_page_pairs", "split_sentences", "text_blocks"], ".help_pages"),
    **dict.fromkeys(["SplitReport", "is_sentence", "make_splits", "normalize"], ".splits"),
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # for type checkers and IDEs; never executed
    from ..files import sha256_file
    from .batching import pad_ids, token_batches
    from .corpora import Pair, read_lines, read_moses, read_tsv, write_tsv
    from .ding import (
        DEFAULT_DING_DIR, DING_ATTRIBUTION, DING_DEBIAN_PACKAGE, DING_LICENSE, DING_SHA256, DING_VERSION, ParseReport,
        clean_text, first_synonym, obtain_ding, parse_ding, parse_ding_line,
    )
    from .debian import HELD_OUT, TRAIN_PACKAGES, check_not_held_out, obtain_debs, read_deb
    from .gettext_pairs import clean_message, mo_pairs, pair_filter
    from .help_pages import aligned_page_pairs, split_sentences, text_blocks
    from .prepare import build_dictionary, cli_main, prepare_ding, prepare_pairs
    from .prepare_debian import prepare_debian
    from .splits import SplitReport, is_sentence, make_splits, normalize

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
