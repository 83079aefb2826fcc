"""The `aiayn` command line: ``aiayn data | train | average | evaluate | translate | bench``.

Each sub-command lives in the module that owns its work and is imported lazily, so that
``aiayn translate`` does not pay for the training code and vice versa. A sub-command is a
function ``main(argv: list[str]) -> int`` in the module named below.
"""
from __future__ import annotations

import importlib
import sys

#: sub-command -> (module, function, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "data": ("aiayn.data.prepare", "cli_main", "obtain and prepare parallel data (Ding, Debian packages, TSV, Moses) and the SentencePiece model"),
    "backtranslate": ("aiayn.data.backtranslate", "cli_main", "back-translate monolingual German (fortunes-de; de-en model, pairs for en-de) or English (fortunes; en-de model, pairs for de-en) and add the pairs to a copy of a data folder (Sennrich et al. 2016)"),
    "train": ("aiayn.training.cli", "cli_main", "train a Transformer with the paper's recipe (Section 5); torchrun for DDP"),
    "train-both": ("aiayn.training.both", "cli_main", "train en-de and de-en side by side in a time budget, then average, evaluate, card (one GPU session)"),
    "train-on": ("aiayn.training.continuous", "cli_main", "go on training a shipped model until a deadline, then average, evaluate on the test split and dev sets, judge"),
    "average": ("aiayn.training.export", "average_cli_main", "average the last k checkpoints of a run (Section 6.1)"),
    "interpolate": ("aiayn.training.export", "interpolate_cli_main",
                    "weight interpolation (1 - w) A + w B of two checkpoints of one model (WiSE-FT)"),
    "ship": ("aiayn.training.shipping", "cli_main",
             "copy a candidate that `aiayn train-on` judged better on the test split and every development set over the shipped checkpoint"),
    "soup": ("aiayn.training.soup", "cli_main",
             "average fine-tunes of one model (a model soup: uniform, or greedy on the valid split) and judge it"),
    "evaluate": ("aiayn.evaluation.scoring", "cli_main", "sacreBLEU and chrF on a test split, beside a dictionary baseline"),
    "evaluate-dev": ("aiayn.evaluation.devsets", "cli_main", "BLEU and chrF on the project's development sets (assets/devsets: short, long, classic)"),
    "compare-evals": ("aiayn.evaluation.paired", "cli_main",
                      "which outputs changed between two checkpoints' evaluations, and whether each chrF difference is more than chance (paired bootstrap)"),
    "card": ("aiayn.evaluation.modelcard", "cli_main", "write MODEL_CARD.md for a checkpoint from measured results"),
    "translate": ("aiayn.translate_cli", "cli_main", "translate text with a checkpoint (beam search, Section 6.1)"),
    "bench": ("benchmarks.__main__", "main", "speed and memory against torch.nn.Transformer"),
    "sweep": ("aiayn.sweep", "cli_main", "head-ablation sweep of a checkpoint into its head_sweep.json (Michel et al. 2019)"),
    "import-marian": ("aiayn.import_marian", "cli_main", "convert a Marian (Opus-MT) model into a checkpoint directory (needs transformers once)"),
    "align": ("aiayn.alignment_eval", "cli_main", "alignment error rate of every cross-attention head on the gold German-English set into alignment.json (and at every recorded training state into alignment_history.json)"),
    "attribution": ("aiayn.attribution_eval", "cli_main", "rank agreement of gradient attribution with every head, head mean, rollout and norm-based attention over the gold set into attribution.json"),
}


def _usage() -> str:
    lines = ["usage: aiayn <command> [options]", "", "commands:"]
    width = max(map(len, COMMANDS))
    lines += [f"  {name:<{width}} {help_}" for name, (_, _, help_) in COMMANDS.items()]
    lines += ["", "`aiayn <command> --help` shows a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``aiayn`` console script; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"aiayn: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module, func, _ = COMMANDS[name]
    try:
        fn = getattr(importlib.import_module(module), func)
    except ImportError as exc:  # pragma: no cover - only when an optional part is missing
        print(f"aiayn {name}: cannot load {module}: {exc}", file=sys.stderr)
        return 2
    code = fn(rest)
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
