"""Model FLOPs of a training step and model FLOPs utilisation (MFU) against a GPU's bf16 peak, or against this
CPU's bf16 matmul peak measured on the spot (:func:`measure_matmul_peak`).

Count (per sentence pair with S source and T target positions; D = d_model, L = N layers, V vocabulary;
a multiply-add is 2 FLOPs; backward = 2 x forward, so a training step is 3 x the forward pass):

    training FLOPs = 6 * (P_enc * S + P_dec,kv * S + (P_dec + D * V) * T)
                   + 12 * L * D * (S^2 + T^2 + S * T)

* ``P_enc = L (4 D^2 + 2 D d_ff)``: the weight matrices of the encoder layers (W^Q, W^K, W^V, W^O and the
  FFN's W_1, W_2, Sections 3.2.2, 3.3), applied to every source position.
* ``P_dec = L (6 D^2 + 2 D d_ff)``: decoder self-attention W^Q..W^O, cross-attention W^Q and W^O, FFN,
  applied to every target position; ``P_dec,kv = L * 2 D^2``: cross-attention W^K, W^V, applied to the
  encoder output (every source position).
* ``D * V``: the pre-softmax linear map (tied to the embedding, Section 3.4) at every target position.
  Embedding look-ups cost no FLOPs; biases and LayerNorm (< 0.5 %) are left out.
* ``12 L D (S^2 + T^2 + S T)``: ``Q K^T`` and ``A V`` of encoder self-attention (S x S), decoder
  self-attention (T x T, counted in full: the causal mask is a mask, the kernel still computes the
  square) and encoder-decoder attention (T x S).

This is the "6 N tokens + attention" rule of Kaplan et al. (2020) / PaLM (Chowdhery et al. 2022, App. B)
written out for an encoder-decoder, and it equals the matrix-multiply FLOPs that
``torch.utils.flop_counter.FlopCounterMode`` counts for one forward + backward (the tests check both).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from aiayn.model.config import TransformerConfig

#: Dense bf16 tensor-core peak (TFLOP/s, no sparsity) by GPU name; matched case-insensitively, first hit
#: wins, so more specific names come first. Sources: NVIDIA H100/H200 datasheets (H100 SXM 989.4,
#: PCIe 756, NVL 835; H200 SXM 989.4, NVL 835), A100 datasheet (312), L40S (362), L4 (121).
GPU_BF16_PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H200 NVL", 835.0),
    ("H100", 989.4),
    ("H200", 989.4),
    ("GH200", 989.4),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("L4", 121.0),
)


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one pass over a batch, split by term (all plain ints).

    Attributes:
        linear: weight-matrix FLOPs (the ``6 * P * tokens`` part for training).
        attention: ``Q K^T`` and ``A V`` FLOPs.
        total: ``linear + attention``.
        passes: 1 for a forward pass, 3 for forward + backward.
    """

    linear: int
    attention: int
    passes: int

    @property
    def total(self) -> int:
        return self.linear + self.attention

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), total=self.total)


def weight_params(cfg: TransformerConfig) -> dict[str, int]:
    """Weight-matrix parameter counts of the formula: ``enc`` (P_enc), ``dec`` (P_dec), ``dec_kv``
    (P_dec,kv), ``generator`` (D * V). Biases, LayerNorm and embeddings are excluded."""
    d, f, n = cfg.d_model, cfg.d_ff, cfg.n_layers
    return {
        "enc": n * (4 * d * d + 2 * d * f),
        "dec": n * (6 * d * d + 2 * d * f),
        "dec_kv": n * 2 * d * d,
        "generator": d * cfg.vocab_size,
    }


def forward_flops(cfg: TransformerConfig, batch: int, src_len: int, tgt_len: int) -> FlopCount:
    """FLOPs of one teacher-forced forward pass over ``batch`` pairs of ``src_len`` x ``tgt_len`` positions.

    Raises:
        ValueError: a non-positive size.
    """
    for name, v in (("batch", batch), ("src_len", src_len), ("tgt_len", tgt_len)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    p = weight_params(cfg)
    s, t = src_len, tgt_len
    linear = 2 * batch * (p["enc"] * s + p["dec_kv"] * s + (p["dec"] + p["generator"]) * t)
    attention = 4 * batch * cfg.n_layers * cfg.d_model * (s * s + t * t + s * t)
    return FlopCount(linear, attention, 1)


def training_flops(cfg: TransformerConfig, batch: int, src_len: int, tgt_len: int) -> FlopCount:
    """FLOPs of one training step (forward + backward = 3 x forward; the optimizer step is not counted)."""
    f = forward_flops(cfg, batch, src_len, tgt_len)
    return FlopCount(3 * f.linear, 3 * f.attention, 3)


def gpu_bf16_peak_tflops(name: str | None) -> float | None:
    """Dense bf16 peak of the GPU called ``name`` (e.g. ``torch.cuda.get_device_name()``), TFLOP/s, or None
    when the card is not in :data:`GPU_BF16_PEAK_TFLOPS`."""
    if not name:
        return None
    low = name.lower()
    for key, peak in GPU_BF16_PEAK_TFLOPS:
        if key.lower() in low:
            return peak
    return None


def mfu(flops_per_step: float, seconds_per_step: float, peak_tflops: float) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over the peak, a fraction in [0, 1] (more would mean the
    count or the peak is wrong).

    Raises:
        ValueError: non-positive time or peak.
    """
    if seconds_per_step <= 0 or peak_tflops <= 0:
        raise ValueError(f"need positive seconds and peak, got {seconds_per_step!r}, {peak_tflops!r}")
    return flops_per_step / seconds_per_step / (peak_tflops * 1e12)


#: the matmul shapes :func:`measure_matmul_peak` times: a d_model-256 FFN's W_1 over 4,096 positions, and a square
#: 2048^3 (the largest single matmul a 2-core CPU reaches its peak on)
PEAK_SHAPES: tuple[tuple[int, int, int], ...] = ((4096, 256, 1024), (2048, 2048, 2048))


def measure_matmul_peak(dtype=None, *, repeats: int = 5, shapes=PEAK_SHAPES, threads=None) -> dict[str, Any]:
    """This machine's matmul peak right now: the best FLOP/s of ``repeats`` timed ``a @ b`` per shape of
    :data:`PEAK_SHAPES` (``(m, k, n)``: ``2 m k n`` FLOPs) and per thread count of ``threads`` (default: 1 and
    torch's current count, which is restored: on a busy machine one thread can beat two), in ``dtype`` (default
    bfloat16, which oneDNN runs natively on AVX512-BF16 / AMX CPUs); one untimed call per shape first.

    Returns:
        ``{"gflops": best over shapes and threads, "by_shape": {"MxKxN@T": GFLOP/s}, "dtype": str, "threads": int}``
        (``threads``: the count that gave the best).
    """
    import time

    import torch

    dtype = dtype or torch.bfloat16
    current = torch.get_num_threads()
    by_shape: dict[str, float] = {}
    try:
        for t in sorted(set(threads or (1, current))):
            torch.set_num_threads(t)
            for m, k, n in shapes:
                a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
                a @ b
                best = float("inf")
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    a @ b
                    best = min(best, time.perf_counter() - t0)
                by_shape[f"{m}x{k}x{n}@{t}"] = 2 * m * k * n / best / 1e9
    finally:
        torch.set_num_threads(current)
    top = max(by_shape, key=by_shape.get)
    return {"gflops": by_shape[top], "by_shape": by_shape, "dtype": str(dtype).replace("torch.", ""),
            "threads": int(top.rsplit("@", 1)[1])}
