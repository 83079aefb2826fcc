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
    """Peak resident set size of this process, bytes: ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (KiB on
    Linux, bytes on macOS). Caveat: Linux carries a parent's peak over ``fork`` + ``exec``, so a worker
    started by a big process reports at least its parent's peak; see :func:`peak_rss_bytes`."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def hwm_bytes() -> int | None:
    """``VmHWM`` of ``/proc/self/status`` (Linux): the peak RSS of this process image since ``exec``, not
    inherited from the parent; None where there is no ``/proc``."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def peak_rss_bytes() -> tuple[int, str]:
    """``(bytes, source)``: ``VmHWM`` where available (Linux), else ``ru_maxrss``."""
    hwm = hwm_bytes()
    return (hwm, "VmHWM") if hwm is not None else (max_rss_bytes(), "ru_maxrss")


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
    out["peak_rss_bytes"], out["peak_rss_source"] = peak_rss_bytes()
    out["ru_maxrss_bytes"] = max_rss_bytes()
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
