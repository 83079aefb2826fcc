"""Model configuration and the paper's presets (Vaswani et al. 2017, Table 3).

A :class:`TransformerConfig` is plain data: it is written into every checkpoint as
``config.json`` and read back with :meth:`TransformerConfig.from_dict`. Presets are
never changed in place; a new shape gets a new preset name.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

_POSITIONAL = ("sinusoidal", "learned")
#: the sinusoidal table's layouts (aiayn.model.positional.LAYOUTS, repeated here to keep this module torch-free)
_POSITIONAL_LAYOUTS = ("interleaved", "concatenated")
#: FFN activations: "relu" (Eq. 2), "gelu" (exact, erf), "swish" (x * sigmoid(x), a.k.a. SiLU; Opus-MT)
_ACTIVATIONS = ("relu", "gelu", "swish")
#: the token fed first to the decoder: "bos" (ours) or "pad" (Marian / Opus-MT)
_DECODER_STARTS = ("bos", "pad")
#: the three uses of attention (Section 3.2.3) in the order of AttentionMaps' fields and of a head mask's first axis:
#: encoder self-attention, masked decoder self-attention, encoder-decoder (cross) attention. Here, without torch, so
#: that the torch-free analysis and the pages share the one tuple.
KINDS = ("encoder", "decoder", "cross")

#: Table 3 of the paper. "base": N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1;
#: "big": d_model=1024, d_ff=4096, h=16, P_drop=0.3. "tiny" is ours, for tests and demos.
PRESETS: dict[str, dict[str, Any]] = {
    "base": dict(d_model=512, n_heads=8, d_ff=2048, n_layers=6, dropout=0.1),
    "big": dict(d_model=1024, n_heads=16, d_ff=4096, n_layers=6, dropout=0.3),
    "tiny": dict(d_model=64, n_heads=4, d_ff=128, n_layers=2, dropout=0.0),
}


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of an encoder-decoder Transformer (Section 3, Table 3).

    Fields follow the paper's names: ``d_model``, ``n_heads`` (h), ``d_ff``, ``n_layers`` (N, for the
    encoder and the decoder alike), ``dropout`` (P_drop, Section 5.4, applied to each sub-layer output
    before the residual sum and to the sum of embeddings and positions), ``attention_dropout`` (on the
    attention weights; 0 in the paper's text, tensor2tensor's option), ``layer_norm_eps`` (1e-6 as in
    tensor2tensor; torch's default is 1e-5). ``d_k = d_v = d_model / h`` (Section 3.2.2).

    ``norm_first=False`` is the paper's post-LN, ``LayerNorm(x + Sublayer(x))`` (Section 3.1), with no
    extra final LayerNorm; ``norm_first=True`` is pre-LN, which adds one final LayerNorm to each stack.
    ``positional`` is ``"sinusoidal"`` (Section 3.5) or ``"learned"`` (the Table 3 row (E) variant).
    ``share_embeddings`` ties the source embedding, the target embedding and the pre-softmax linear
    map (Section 3.4; needs the joint vocabulary of Section 5.1). ``max_len`` is the longest sequence
    (in pieces, BOS/EOS included) the model accepts; longer input is truncated by the Translator.

    Four fields exist for models converted from elsewhere (:func:`aiayn.interop.from_marian`); their defaults
    are the paper's, so every checkpoint written before they existed loads unchanged:
    ``activation`` of the FFN (``"relu"``, Eq. 2; ``"gelu"``; ``"swish"``, Opus-MT's);
    ``positional_layout`` of the sinusoidal table (``"interleaved"``, the paper; ``"concatenated"``, all sines
    then all cosines: tensor2tensor and Marian; ignored for learned positions); ``final_logits_bias`` (a
    per-piece bias ``(V,)`` added to the logits, a buffer: Marian's ``final_logits_bias``); ``decoder_start``,
    the token fed first to the decoder (``"bos"``; ``"pad"`` for Opus-MT, whose decoder starts from
    ``<pad>``): see :attr:`decoder_start_id`.

    Two fields make one model translate both ways (a multilingual decoder told its target language by its
    first input, as mBART, Liu et al. 2020, and NLLB, 2022, do): ``language_tags`` names the languages whose tag
    ``<2xx>`` has an embedding row after the vocabulary (tag i is id ``vocab_size + i``; empty: no tags, every
    model trained before them), and ``target_language`` picks the tag fed first to the decoder instead of the
    start piece (None: the start piece). The tags are inputs only: the pre-softmax map keeps the ``vocab_size``
    pieces (:attr:`n_embeddings` rows are embedded, ``vocab_size`` are predicted), so no tag is ever output and
    logits stay ``(B, T, vocab_size)``.

    Two fields tell the decoder the register to write in, the same way (a domain tag: Kobus et al. 2017, "Domain
    control for neural machine translation"; Sennrich et al. 2016's side constraints, here on the decoder side as the
    language tags): ``domain_tags`` names the domains whose tag ``<name>`` has an embedding row after the vocabulary
    and the language tags (id ``vocab_size + len(language_tags) + i``; empty: none, every model trained before them),
    and ``domain`` picks the tag fed first to the decoder (None: the start piece, or the language tag). A model
    has language tags or domain tags, not both: the decoder has one first position.

    Raises:
        ValueError: on inconsistent values (``d_model`` not divisible by ``n_heads``, ids outside the
            vocabulary, unknown ``positional`` / ``positional_layout`` / ``activation`` / ``decoder_start``,
            negative sizes, dropout outside [0, 1)).
    """

    vocab_size: int = 37000
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    pad_id: int = 0
    bos_id: int = 2
    eos_id: int = 3
    norm_first: bool = False
    positional: str = "sinusoidal"
    share_embeddings: bool = True
    layer_norm_eps: float = 1e-6
    max_len: int = 256
    activation: str = "relu"
    positional_layout: str = "interleaved"
    final_logits_bias: bool = False
    decoder_start: str = "bos"
    language_tags: tuple[str, ...] = ()
    target_language: str | None = None
    domain_tags: tuple[str, ...] = ()
    domain: str | None = None
    preset_name: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "d_ff", "n_layers", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"TransformerConfig.{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}): d_k = d_model / h"
            )
        for name in ("dropout", "attention_dropout"):
            value = getattr(self, name)
            if not 0.0 <= float(value) < 1.0:
                raise ValueError(f"TransformerConfig.{name} must be in [0, 1), got {value!r}")
        for name in ("pad_id", "bos_id", "eos_id"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value < self.vocab_size:
                raise ValueError(f"TransformerConfig.{name}={value!r} is outside the vocabulary [0, {self.vocab_size})")
        if len({self.pad_id, self.bos_id, self.eos_id}) != 3:
            raise ValueError("pad_id, bos_id and eos_id must be three different ids")
        if self.positional not in _POSITIONAL:
            raise ValueError(f"positional must be one of {_POSITIONAL}, got {self.positional!r}")
        if not self.layer_norm_eps > 0:
            raise ValueError(f"layer_norm_eps must be > 0, got {self.layer_norm_eps!r}")
        for name, allowed in (
            ("activation", _ACTIVATIONS),
            ("positional_layout", _POSITIONAL_LAYOUTS),
            ("decoder_start", _DECODER_STARTS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if not isinstance(self.final_logits_bias, bool):
            raise ValueError(f"final_logits_bias must be a bool, got {self.final_logits_bias!r}")
        self._check_tags()

    def _tags(self, name: str, valid, what: str) -> tuple[str, ...]:
        """The field ``name`` (a list of tag names) as a tuple, each name ``valid`` and none twice."""
        tags = getattr(self, name)
        if isinstance(tags, str) or not isinstance(tags, (list, tuple)):
            raise ValueError(f"{name} must be a list of {what}, got {tags!r}")
        tags = tuple(tags)
        object.__setattr__(self, name, tags)  # JSON gives a list; the frozen config keeps a tuple
        if any(not isinstance(t, str) or not valid(t) for t in tags) or len(set(tags)) != len(tags):
            raise ValueError(f"{name} must be distinct {what}, got {list(tags)!r}")
        return tags

    def _check_tags(self) -> None:
        """Language tags (``<2de>``) and domain tags (``<general>``): valid names, the chosen one among them, and
        not both kinds (the decoder has one first position)."""
        langs = self._tags("language_tags", str.isalpha, "language codes such as 'de', 'en'")
        domains = self._tags("domain_tags", lambda t: t.isascii() and t.replace("_", "").isalnum(),
                             "names of letters, digits and _, such as 'general'")
        if langs and domains:
            raise ValueError("a model has language tags or domain tags, not both (the decoder has one first position)")
        for chosen, tags in (("target_language", langs), ("domain", domains)):
            value = getattr(self, chosen)
            if value is not None and value not in tags:
                raise ValueError(f"{chosen} {value!r} has no tag in this model (it has {', '.join(tags) if tags else 'none'})")

    @property
    def n_embeddings(self) -> int:
        """Rows of the embedding table: the ``vocab_size`` pieces, then one per language tag, then one per domain
        tag."""
        return self.vocab_size + len(self.language_tags) + len(self.domain_tags)

    def domain_tag_id(self, domain: str) -> int:
        """Id of the tag ``<domain>`` (``vocab_size + len(language_tags) + i``). Raises ValueError: the model has no
        such tag."""
        if domain not in self.domain_tags:
            raise ValueError(f"this model has no domain tag for {domain!r} "
                             f"(it has {', '.join(self.domain_tags) if self.domain_tags else 'none'})")
        return self.vocab_size + len(self.language_tags) + self.domain_tags.index(domain)

    def language_tag_id(self, language: str) -> int:
        """Id of the tag ``<2language>`` (``vocab_size + i``). Raises ValueError: the model has no such tag."""
        if language not in self.language_tags:
            raise ValueError(f"this model has no language tag for {language!r} "
                             f"(it has {', '.join(self.language_tags) if self.language_tags else 'none'})")
        return self.vocab_size + self.language_tags.index(language)

    @property
    def decoder_start_id(self) -> int:
        """Id fed first to the decoder (the ``<s>`` of ``decoder_input_tokens``): ``bos_id`` by default,
        ``pad_id`` with ``decoder_start="pad"`` (Opus-MT). Decoding never predicts it, and the decoder never
        masks it as padding. With a ``target_language``, that language's tag (:meth:`language_tag_id`); with a
        ``domain``, that domain's tag (:meth:`domain_tag_id`)."""
        if self.domain is not None:
            return self.domain_tag_id(self.domain)
        if self.target_language is not None:
            return self.language_tag_id(self.target_language)
        return self.start_piece_id

    @property
    def start_piece_id(self) -> int:
        """The vocabulary piece that starts the decoder without a language tag: ``pad_id`` with
        ``decoder_start="pad"`` (Opus-MT), else ``bos_id``. Never predicted, tags or not (a model with tags was
        warm-started from one that began with this piece)."""
        return self.pad_id if self.decoder_start == "pad" else self.bos_id

    def tag_piece(self, i: int) -> str | None:
        """The name of id ``i`` when it is a language tag (``"<2de>"``, mBART's and NLLB's spelling) or a domain tag
        (``"<general>"``), else None (a piece of the vocabulary: its tokenizer names it)."""
        k = int(i) - self.vocab_size
        if 0 <= k < len(self.language_tags):
            return f"<2{self.language_tags[k]}>"
        k -= len(self.language_tags)
        return f"<{self.domain_tags[k]}>" if 0 <= k < len(self.domain_tags) else None

    @property
    def never_predicted(self) -> tuple[int, ...]:
        """Output ids decoding never predicts: padding and the start piece (a language tag is not an output id
        at all, see :meth:`aiayn.model.transformer.Transformer.project`), sorted."""
        return tuple(sorted({self.pad_id, self.start_piece_id}))

    @property
    def d_k(self) -> int:
        """Per-head query/key size, d_model / h (Section 3.2.2)."""
        return self.d_model // self.n_heads

    @property
    def d_v(self) -> int:
        """Per-head value size, d_model / h (Section 3.2.2)."""
        return self.d_model // self.n_heads

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "TransformerConfig":
        """A preset of Table 3 (``"base"``, ``"big"``) or ``"tiny"``, with keyword overrides.

        Raises:
            ValueError: unknown preset name or unknown field in ``overrides``.
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown TransformerConfig field(s): {sorted(unknown)}")
        values = dict(PRESETS[name], preset_name=name)
        values.update(overrides)
        return cls(**values)

    def replace(self, **changes: Any) -> "TransformerConfig":
        """A copy with some fields changed (the config itself is immutable)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of every field (``language_tags`` and ``domain_tags`` as lists, as JSON reads them
        back)."""
        out = dataclasses.asdict(self)
        out["language_tags"] = list(self.language_tags)
        out["domain_tags"] = list(self.domain_tags)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TransformerConfig":
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: ``data`` is not a dict, has unknown fields or invalid values.
        """
        if not isinstance(data, dict):
            raise ValueError(f"a TransformerConfig needs a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown TransformerConfig field(s): {sorted(unknown)}")
        try:
            return cls(**data)
        except TypeError as exc:  # pragma: no cover - defensive
            raise ValueError(f"invalid TransformerConfig: {exc}") from exc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)
