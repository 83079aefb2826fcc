"""Training with the paper's recipe (Section 5), by role. Nothing is imported here, so that importing one
module (the app's lessons import :mod:`.recipe`) does not load the loop; import from the module itself.

* :mod:`.recipe`: Equation 3's learning rate ``noam_lr`` (Section 5.3), ``label_smoothed_loss`` (Section 5.4)
  and ``TrainConfig``, every setting of a run; imports only torch.
* :mod:`.pipeline`: splits to piece ids, sentence upsampling, token-count batches grouped into accumulated
  steps per DDP rank (Section 5.1), ``collate`` into padded ``(B, S)`` / ``(B, T)`` tensors.
* :mod:`.loader`: the token id cache (memory-mapped, keyed by sha256 of spm.model and the split), vectorised
  collation into one buffer per micro-batch, the prefetching ``BatchLoader`` (pinned memory, non-blocking copies).
* :mod:`.state`: the run on disk (no pickle): atomic run states, exact resume, warm start (``--init-from``),
  configuration changes, ``metrics.jsonl`` truncation.
* :mod:`.loop`: ``train`` (Adam, bf16 autocast, ``torch.compile``, DDP with ``torchrun``) and ``validate``
  (teacher-forced loss, BLEU of beam decodes).
* :mod:`.history`: the attention of a few curated sentences at every saved state
  (``attention_history.safetensors``, ``AttentionRecorder``) and its torch-free reader ``load_history``.
* :mod:`.export`: averaging the last k states into a shippable checkpoint (Section 6.1); ``aiayn average``.
* :mod:`.both`, :mod:`.finish`: ``aiayn train-both``, both directions in one time budget, then average, evaluate,
  card and sweep.
* :mod:`.cli`: ``aiayn train`` (flags over a resumed run's stored configuration over the defaults).
"""
