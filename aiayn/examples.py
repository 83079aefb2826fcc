"""The curated example sentences of the app, per direction: a source sentence, its reference translation and
what to look for in its attention maps. Plain data, no torch: the explorer offers them, the head-ablation sweep
scores heads on them and training records their attention at every saved state (the sentences a student sees
change over training). Not a paper section.
"""
from __future__ import annotations

#: curated sentences per direction: ``(sentence, reference translation, what to look for)``
EXAMPLES: dict[str, list[tuple[str, str, str]]] = {
    "en-de": [
        ("I have no time.", "Ich habe keine Zeit.",
         "Cross-attention: find the row that predicts **Zeit** and see which source piece it looks at (**time**)."),
        ("I would like to buy a new car.", "Ich möchte ein neues Auto kaufen.",
         "Word order: German puts **kaufen** at the end. Teacher-force the reference and follow the row "
         "predicting *kaufen* back to **buy**: the alignment leaves the diagonal."),
        ("The house is small.", "Das Haus ist klein.",
         "A short, monotonic sentence: in cross-attention the brightest cells run roughly down the diagonal."),
        ("The cat sat on the mat.", "Die Katze saß auf der Matte.",
         "Encoder self-attention: sort the head table by **previous** or **next** to find positional heads "
         "that look one word to the left or right."),
        ("Good morning!", "Guten Morgen!",
         "Sink heads: many heads park their weight on **</s>** when they have nothing to do. Sort the head "
         "table by **eos**."),
        ("He reads the book that she gave him.", "Er liest das Buch, das sie ihm gab.",
         "Decoder self-attention is masked: every row attends only to pieces already written (lower triangle). "
         "Use the step-by-step tab to watch it grow."),
    ],
    "de-en": [
        ("Ich habe keine Zeit.", "I have no time.",
         "Cross-attention: the row predicting **time** should look at **Zeit**."),
        ("Ich möchte ein neues Auto kaufen.", "I would like to buy a new car.",
         "Word order: *kaufen* comes last in German but **buy** comes early in English: find the row predicting "
         "*buy* and see it reach to the end of the source."),
        ("Das Haus ist klein.", "The house is small.",
         "A short, monotonic sentence: cross-attention runs roughly down the diagonal."),
        ("Der Hund schläft im Garten.", "The dog is sleeping in the garden.",
         "Encoder: sort the head table by **previous** / **next** to find positional heads."),
        ("Guten Morgen!", "Good morning!",
         "Sink heads: sort the head table by **eos** to find heads parking their weight on **</s>**."),
    ],
}


#: the labs' default sentences: the Masking lab's sentence per source language (with its reference translation)
MASKING_DEFAULTS: dict[str, tuple[str, str]] = {
    "en": ("I like to read books in the garden.", "Ich lese gern Bücher im Garten."),
    "de": ("Ich lese gern Bücher im Garten.", "I like to read books in the garden."),
}
#: the Compare lab's default pair per direction, A then B (sentence, reference): one word changed
COMPARE_DEFAULTS: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "en-de": (("I have no time.", "Ich habe keine Zeit."), ("I have no money.", "Ich habe kein Geld.")),
    "de-en": (("Ich habe keine Zeit.", "I have no time."), ("Ich habe kein Geld.", "I have no money.")),
}
#: other translations that are just as right as the reference (written by hand, like the references): a sentence
#: has one reference for the explorer's teacher-forced view, but a model is right when it gives any of these
ALSO_CORRECT: dict[str, dict[str, tuple[str, ...]]] = {
    "en-de": {
        "I would like to buy a new car.": ("Ich würde gern ein neues Auto kaufen.",
                                           "Ich würde gerne ein neues Auto kaufen."),
        "The cat sat on the mat.": ("Die Katze setzte sich auf die Matte.",),
        "He reads the book that she gave him.": ("Er liest das Buch, das sie ihm gegeben hat.",),
        "I like to read books in the garden.": ("Ich lese gerne Bücher im Garten.", "Ich lese im Garten gern Bücher.",
                                                "Ich lese im Garten gerne Bücher."),
    },
    "de-en": {
        "Ich möchte ein neues Auto kaufen.": ("I'd like to buy a new car.", "I want to buy a new car."),
        "Der Hund schläft im Garten.": ("The dog sleeps in the garden.",),
        "Ich lese gern Bücher im Garten.": ("I like reading books in the garden.",
                                            "I enjoy reading books in the garden."),
        "Ich habe kein Geld.": ("I don't have any money.",),
    },
}


def demo_sentences(direction: str) -> list[tuple[str, tuple[str, ...]]]:
    """Every sentence the app puts in front of a class in ``direction``: the curated examples, the Masking lab's
    default and the Compare lab's pair, each with the translations that count as right (its reference first,
    then :data:`ALSO_CORRECT`). Sentences are unique, in the order above.

    Raises:
        ValueError: unknown direction.
    """
    pairs = sentence_pairs(direction) + [MASKING_DEFAULTS[direction[:2]]] + list(COMPARE_DEFAULTS[direction])
    also = ALSO_CORRECT.get(direction, {})
    out: dict[str, tuple[str, ...]] = {}
    for src, ref in pairs:
        out.setdefault(src, tuple(dict.fromkeys((ref, *also.get(src, ())))))
    return list(out.items())


def sentence_pairs(direction: str) -> list[tuple[str, str]]:
    """``(source, reference)`` of the curated examples of ``direction`` (``"en-de"`` or ``"de-en"``).

    Raises:
        ValueError: unknown direction.
    """
    try:
        return [(src, ref) for src, ref, _ in EXAMPLES[direction]]
    except KeyError:
        raise ValueError(f"unknown direction {direction!r}; choose one of {sorted(EXAMPLES)}") from None
