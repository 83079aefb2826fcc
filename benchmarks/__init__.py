"""Benchmarks of :mod:`aiayn`: speed and memory against ``torch.nn.Transformer``, on CPU and GPU.

Run ``python -m benchmarks`` (or ``aiayn bench``) from the repository root; ``--help`` lists the options.
Groups (``--only``):

* ``train``   training-step throughput (forward + backward + Adam step) of :class:`aiayn.Transformer` vs
  ``torch.nn.Transformer`` with identical weights (:func:`aiayn.interop.to_torch_transformer`), eager and
  ``torch.compile``; on a GPU also model FLOPs utilisation (:mod:`benchmarks.flops`).
* ``capture`` cost of returning every attention map (``return_attention=True``) vs a plain forward.
* ``decode``  translation latency (greedy / beam 4, with / without the key/value cache) and batch throughput.
* ``memory``  peak RSS of a fresh process that loads the model and translates; peak GPU memory in training.
* ``app``     time to the first rendered page of ``streamlit run app.py`` and to re-render a head switch.

Every figure is measured in the same run, printed as one table and written to a JSON file together with
the machine, the torch version, the date and the exact command (:mod:`benchmarks.report`). Timings are
medians after warm-up (p95 for latencies); ratios, not absolute times, are what to compare on shared
machines. See ``docs/benchmarks.md``.
"""
