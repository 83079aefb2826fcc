"""Pure computations behind the teaching labs (pages 3 to 6 of the app), one module per lab:

* :mod:`~aiayn.lessons.positional`: positional encoding (Section 3.5), page "Positional Encoding".
* :mod:`~aiayn.lessons.masking`: padding and look-ahead masks of the decoder (Section 3.2.3), page "Masking";
  it runs the model itself with ``Transformer.decode(self_attn_mask=...)``.
* :mod:`~aiayn.lessons.scaled_dot_product`: scaled dot-product attention (Section 3.2.1, Equation 1),
  page "Scaled Dot Product".
* :mod:`~aiayn.lessons.model_and_training`: parameter counts (Table 3), the training log (Section 5) and the
  runs a checkpoint descends from, the learning-rate schedule (Section 5.3, Equation 3) and label smoothing (Section 5.4), page "Model and Training".
* :mod:`~aiayn.lessons.inputs`: :class:`LessonInputError`, the input parsers and the size limits they share.

Nothing here imports Streamlit; every function returns numpy arrays, pandas frames or small dataclasses, and
validates its input with a :class:`LessonInputError` (a ``ValueError``) whose message a page can show as is.
Models are only read: no function changes a module, its parameters or its buffers. The names below are
re-exported, so ``from aiayn import lessons; lessons.pe_matrix(...)`` works.

Shapes: B batch, S source length, T target length, L layers, H heads, D d_model, V vocabulary.
"""
from __future__ import annotations

from .inputs import MAX_D_K, MAX_PE_D_MODEL, MAX_PE_LENGTH, MAX_SAMPLES, LessonInputError, as_int, parse_int_list
from .masking import (
    LeakLesson,
    MaskSteps,
    PaddedBatch,
    causal_leak,
    causal_mask_np,
    combined_mask,
    decode_with_self_mask,
    decoder_mask_steps,
    greedy_with_self_mask,
    padded_batch,
)
from .model_and_training import (
    COMPONENT_ORDER,
    LINEAGE_COLUMNS,
    METRIC_COLUMNS,
    MetricsLogError,
    example_prediction,
    label_smoothing_table,
    lineage_table,
    load_metrics,
    lr_schedule,
    parameter_breakdown,
    parameter_summary,
    smoothed_cross_entropy,
    smoothed_target,
)
from .positional import (
    OffsetLesson,
    SimilarityLesson,
    check_pe_size,
    embedding_norms,
    learned_positions,
    pe_curves,
    pe_matrix,
    pe_offset_map,
    pe_similarity,
    wavelengths,
)
from .scaled_dot_product import (AttentionSteps, attention_steps, check_d_k, example_qkv, names, random_dot_products,
                                 softmax_sharpness)

__all__ = [
    # inputs
    "LessonInputError", "as_int", "parse_int_list", "MAX_PE_LENGTH", "MAX_PE_D_MODEL", "MAX_D_K", "MAX_SAMPLES",
    # Section 3.5
    "check_pe_size", "pe_matrix", "wavelengths", "pe_curves", "SimilarityLesson", "pe_similarity", "OffsetLesson",
    "pe_offset_map", "embedding_norms", "learned_positions",
    # Section 3.2.3
    "PaddedBatch", "padded_batch", "causal_mask_np", "combined_mask", "decode_with_self_mask", "MaskSteps",
    "decoder_mask_steps", "LeakLesson", "causal_leak", "greedy_with_self_mask",
    # Section 3.2.1
    "check_d_k", "random_dot_products", "softmax_sharpness", "AttentionSteps", "attention_steps", "names",
    "example_qkv",
    # Table 3, Section 5
    "COMPONENT_ORDER", "parameter_breakdown", "parameter_summary", "MetricsLogError", "METRIC_COLUMNS", "load_metrics",
    "LINEAGE_COLUMNS", "lineage_table",
    "lr_schedule", "smoothed_target", "smoothed_cross_entropy", "example_prediction", "label_smoothing_table",
]
