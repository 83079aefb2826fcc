"""Head ablation latency: what the app's head-ablation page asks of the model when a head is
switched off. On the shipped checkpoint (``checkpoints/en-de``) or, when absent, a random model of the same shape.

Rows (CPU or GPU, per device): ``ablation.<device>.one_head``: one sentence (the curated "I would like to buy a
new car.") translated with one cross-attention head removed, beam 4, key/value cache, every map returned (the
page's ablated translation), against ``ablation.<device>.intact`` (the same without a mask) and their ratio;
``ablation.<device>.one_head_page``: the ablated translation plus the teacher-forced maps of both models over
the intact output (what a head switch recomputes on the page; the intact side is cached there, so this is an
upper bound); ``ablation.<device>.mask_overhead``: an all-ones mask against no mask (the multiply itself; with a
head removed the beam may also run a different number of steps, which is the model's doing, not the mask's).
The target (docs/benchmarks.md): one head on one sentence <= 1 s.
"""
from __future__ import annotations

import torch

from .timing import Stats, interleaved

SENTENCE = "I would like to buy a new car."


def run(ctx) -> list:
    """The ``ablation`` group (see the module docstring)."""
    from aiayn.analysis.ablation import head_mask_array
    from aiayn.sweep import forced_maps

    from .decode import load_subject
    from .report import Row, na

    rows: list = []
    for device in ctx.devices:
        try:
            subject = load_subject(ctx.checkpoint, device)
        except (FileNotFoundError, ValueError) as exc:
            rows.append(na(f"ablation.{device}.one_head", "ablation", device, "translate with one head removed", "ms",
                           f"cannot load checkpoint: {exc}"))
            continue
        if subject.translator is None:
            rows.append(na(f"ablation.{device}.one_head", "ablation", device, "translate with one head removed", "ms",
                           "needs the shipped checkpoint (a Translator with its tokenizer)"))
            continue
        tr = subject.translator
        cfg = tr.cfg
        mask = torch.from_numpy(head_mask_array([("cross", cfg.n_layers - 1, 1)], cfg.n_layers, cfg.n_heads))
        ctx.log(f"[ablation] {device}: {SENTENCE!r}, cross layer {cfg.n_layers} head 2 removed")
        outs: dict[str, object] = {}

        def intact():
            outs["intact"] = tr.translate(SENTENCE, beam_size=4, return_attention=True)

        ones = torch.ones(3, cfg.n_layers, cfg.n_heads)

        def all_ones():
            tr.translate(SENTENCE, beam_size=4, return_attention=True, head_mask=ones)

        def one_head():
            outs["ablated"] = tr.translate(SENTENCE, beam_size=4, return_attention=True, head_mask=mask)

        def page():
            t = tr.translate(SENTENCE, beam_size=4, return_attention=True, head_mask=mask)
            base = outs["intact"]
            forced_maps(tr, base.src_ids, base.output_ids)
            forced_maps(tr, base.src_ids, base.output_ids, head_mask=mask)
            return t

        intact()
        times = interleaved({"intact": intact, "ones": all_ones, "one_head": one_head, "page": page}, warmup=min(ctx.warmup, 2),
                            repeats=ctx.latency_repeats, device=device)
        st = {k: Stats.of(v) for k, v in times.items()}
        n_out = len(outs["ablated"].output_ids)
        detail = {"sentence": SENTENCE, "removed": f"cross.{cfg.n_layers}.2", "output_pieces": n_out,
                  "intact_output": outs["intact"].text, "ablated_output": outs["ablated"].text}
        rows.append(Row(f"ablation.{device}.intact", "ablation", device, "translate one sentence, no mask, beam 4, maps",
                        1000 * st["intact"].median, "ms", f"p95 {1000 * st['intact'].p95:.1f} ms",
                        dict(detail, stats_s=st["intact"].to_dict())))
        rows.append(Row(f"ablation.{device}.one_head", "ablation", device,
                        "translate one sentence with one head removed, beam 4, maps", 1000 * st["one_head"].median, "ms",
                        f"p95 {1000 * st['one_head'].p95:.1f} ms, {n_out} output pieces",
                        dict(detail, stats_s=st["one_head"].to_dict())))
        rows.append(Row(f"ablation.{device}.one_head_page", "ablation", device,
                        "head switch on the page: ablated translation + forced maps of both models", 1000 * st["page"].median,
                        "ms", f"p95 {1000 * st['page'].p95:.1f} ms", dict(detail, stats_s=st["page"].to_dict())))
        rows.append(Row(f"ablation.{device}.mask_overhead", "ablation", device, "head mask cost (all-ones mask / no mask)",
                        st["ones"].median / st["intact"].median, "x", "median all-ones mask / median no mask (same output)",
                        {"ones_s": st["ones"].to_dict(), "intact_s": st["intact"].to_dict()}))
    return rows
