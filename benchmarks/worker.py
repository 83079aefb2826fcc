"""Worker processes: ``python -m benchmarks.worker TASK SPEC_JSON`` prints one JSON line (the result).

Tasks: ``train`` (:func:`benchmarks.training.measure_train`, used for ``torch.compile`` so that a slow
compilation can be time-boxed), ``train_memory`` (:func:`benchmarks.training.measure_train_memory`),
``rss`` (peak resident memory of this fresh process after ``spec["what"]``: ``"baseline"`` imports torch
only; ``"translate"`` loads the model and translates one sentence).
"""
from __future__ import annotations

import json
import resource
import sys
import time


def max_rss_bytes() -> int:
    """Peak resident set size of this process, bytes (``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def rss(spec: dict) -> dict:
    import torch

    torch.set_num_threads(int(spec.get("threads", 1)))
    out = {"what": spec["what"]}
    if spec["what"] == "translate":
        from benchmarks.decode import load_subject

        t0 = time.perf_counter()
        subject = load_subject(spec.get("checkpoint"), "cpu")
        out["load_s"] = time.perf_counter() - t0
        out["output_pieces"] = subject.run([spec["text"]], beam_size=4, use_cache=True, return_attention=True)[0]
        out["subject"] = subject.describe()
    out["max_rss_bytes"] = max_rss_bytes()
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m benchmarks.worker TASK SPEC_JSON", file=sys.stderr)
        return 2
    task, spec = argv[0], json.loads(argv[1])
    if task == "rss":
        result = rss(spec)
    else:
        import torch

        torch.set_num_threads(int(spec.get("threads", torch.get_num_threads())))
        from benchmarks import training

        if task == "train":
            result = training.measure_train(spec)
        elif task == "train_memory":
            result = training.measure_train_memory(spec)
        else:
            print(f"unknown task {task!r}", file=sys.stderr)
            return 2
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
