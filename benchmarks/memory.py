"""Memory: peak resident set size of a fresh process that loads the
model and translates one 15-word sentence (beam 4, cache, maps returned), beside a baseline process that
only imports torch; on a GPU, peak ``torch.cuda.max_memory_allocated`` of training each model alone
(the ``train`` group's GPU configuration), each in a fresh process.

Peak RSS is ``VmHWM`` from ``/proc/self/status`` on Linux: ``resource.getrusage(RUSAGE_SELF).ru_maxrss``
would be wrong here, because Linux keeps the parent's peak across ``fork`` + ``exec`` and the parent is
the benchmark process itself. ``ru_maxrss`` is still recorded in each row's detail (and is the fallback
where ``/proc`` is missing).
"""
from __future__ import annotations

from .common import run_worker, train_config
from .decode import SENTENCES


def run(ctx) -> list:
    from .report import Row, na

    rows: list = []
    mib = 2**20
    base, why_b = run_worker("rss", {"what": "baseline"}, threads=ctx.threads, timeout=300)
    spec = {"what": "translate", "text": SENTENCES["medium"], "checkpoint": str(ctx.checkpoint) if ctx.checkpoint else None}
    tr, why_t = run_worker("rss", spec, threads=ctx.threads, timeout=600)
    if base is None:
        rows.append(na("memory.cpu.rss_baseline", "memory", "cpu", "peak RSS, process importing torch only", "MiB", why_b))
    else:
        rows.append(Row("memory.cpu.rss_baseline", "memory", "cpu", "peak RSS, process importing torch only", base["peak_rss_bytes"] / mib, "MiB", "", base))
    if tr is None:
        rows.append(na("memory.cpu.rss_translate", "memory", "cpu", "peak RSS, load model + translate", "MiB", why_t))
    else:
        kind = tr["subject"]["kind"]
        note = "shipped checkpoint" if kind == "checkpoint" else "RANDOM model of the shipped shape (no checkpoint)"
        rows.append(Row("memory.cpu.rss_translate", "memory", "cpu", "peak RSS, load model + translate 15 words (beam 4, maps)",
                        tr["peak_rss_bytes"] / mib, "MiB", note, {k: v for k, v in tr.items() if k != "subject"}))
        if base is not None:
            rows.append(Row("memory.cpu.rss_model", "memory", "cpu", "peak RSS above the torch-only baseline",
                            (tr["peak_rss_bytes"] - base["peak_rss_bytes"]) / mib, "MiB", note))
    if "cuda" in ctx.devices:
        cfg, sizes = train_config("cuda", ctx.quick)
        for model in ("aiayn", "torch"):
            res, why = run_worker("train_memory", dict(device="cuda", cfg=cfg.to_dict(), model=model, **sizes), threads=ctx.threads, timeout=600)
            name = f"peak GPU memory, training {'aiayn.Transformer' if model == 'aiayn' else 'torch.nn.Transformer'}"
            if res is None:
                rows.append(na(f"memory.cuda.train_peak.{model}", "memory", "cuda", name, "MiB", why))
            else:
                rows.append(Row(f"memory.cuda.train_peak.{model}", "memory", "cuda", name, res["peak_bytes"] / mib, "MiB",
                                f"resident between steps {res['resident_bytes'] / mib:.0f} MiB", dict(res, **sizes)))
    return rows
