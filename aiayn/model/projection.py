"""The output projection at a serving precision: Section 3.4's pre-softmax linear map (tied to the embedding), for
decoding only.

A model of Opus-MT's shape spends most of a beam step in this one matrix product: ``(rows, d_model) x (d_model, V)``
with V = 58,101 (docs/benchmarks.md, "Classroom on the paper-size model"). A server may run it at a lower precision,
chosen explicitly and the same for every user of a loaded model (:func:`serving_precision`):

* ``"float32"`` (default): :meth:`~aiayn.model.transformer.Transformer.project` itself, unchanged.
* ``"int8"``: weights quantized once, symmetric, one scale per output piece (``s_w[v] = max |W[v]| / 127``);
  each decoder state ``h`` quantized the same way with its own scale (``s_h = max |h| / 127``); the integer
  product (``torch._int_mm``, int32 accumulation: exact) rescaled ``s_h s_w[v]`` in float32, plus
  ``final_logits_bias``. Every row is quantized alone and integer sums are exact, so a sentence's logits do not
  depend on the other sentences of its batch: a class's batch gives exactly a lone run's logits.
  CPU only. The cost: each logit moves by up to a few hundredths of a nat (rounding of 512 products), so a beam
  can choose differently where two candidates were that close (measured on the shipped models' development
  sets: docs/benchmarks.md).
* ``"bfloat16"``: weights cast once to bfloat16, the states cast per call, float32 accumulation inside the
  product; logits about 1e-2 from float32's. For CPUs whose bfloat16 matrix units beat float32 (AMX, Zen 5);
  on a CPU without them it is slower than float32 at batch sizes (docs/benchmarks.md).

Log-probabilities stay float32 after the projection (the log-softmax, the beam scores). The setting concerns the
searches of :class:`aiayn.Translator` (beam, greedy, sampling: translations, the explorer, the beam tree, the head
sweep's ablated translations); teacher-forced passes (a reference's scores, traces, the logit lens) use float32.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from torch import Tensor
# torch is imported inside the functions: the app's sidebar reads the setting (serving_precision) on pages that
# never load a model, and a cold server must not import torch for it (aiayn.app.preload does, in the background)

#: environment variable: the output projection's precision for every model a process loads (overrides the checkpoint)
PROJECTION_ENV = "AIAYN_SERVE_PROJECTION"
#: the checkpoint's ``meta`` field naming its default serving precision (``aiayn import-marian --serve-projection``)
PROJECTION_META = "serve_projection"
#: the precisions :class:`OutputProjection` offers, float32 (exact) first
PRECISIONS = ("float32", "int8", "bfloat16")


def precision_error(value: Any, *, source: str = "projection precision") -> str | None:
    """One line saying why ``value`` is not a precision of :data:`PRECISIONS` (``source`` names where it came
    from), or None when it is one."""
    if isinstance(value, str) and value in PRECISIONS:
        return None
    return f"{source} must be one of {', '.join(PRECISIONS)}, got {value!r}"


def serving_precision(explicit: str | None = None, meta: Mapping[str, Any] | None = None) -> str:
    """The precision a loaded model serves with: ``explicit`` when given, else ``$AIAYN_SERVE_PROJECTION`` when set,
    else the checkpoint's ``meta["serve_projection"]``, else ``"float32"``.

    Raises:
        ValueError (one line): the chosen value is not one of :data:`PRECISIONS` (names where it came from).
    """
    if explicit is not None:
        value, source = explicit, "projection"
    elif os.environ.get(PROJECTION_ENV, "").strip():
        value, source = os.environ[PROJECTION_ENV].strip(), f"${PROJECTION_ENV}"
    elif meta and meta.get(PROJECTION_META) is not None:
        value, source = meta[PROJECTION_META], f"the checkpoint's {PROJECTION_META}"
    else:
        return "float32"
    error = precision_error(value, source=source)
    if error:
        raise ValueError(error)
    return value


class OutputProjection:
    """A model's output projection at ``precision`` (:data:`PRECISIONS`), its weights converted once here.

    Built once per loaded model and held by its :class:`aiayn.Translator`; it never changes the model (no state on
    its modules), so float32 users of the same model are unaffected. Call :attr:`function` as
    ``Transformer.decode(project=...)``: hidden states ``(..., D)`` -> float32 logits ``(..., V)``; it is None for
    float32 (the model's own :meth:`~aiayn.model.transformer.Transformer.project`).

    Raises:
        ValueError (one line): an unknown precision; ``"int8"`` on a device other than the CPU.
    """

    def __init__(self, model: Any, precision: str = "float32") -> None:
        import torch

        error = precision_error(precision)
        if error:
            raise ValueError(error)
        self.precision = precision
        weight, bias = model.output_layer()
        weight = weight.detach()
        self._bias = None if bias is None else bias.detach().float()
        if precision == "int8":
            if weight.device.type != "cpu":
                raise ValueError(f"the int8 output projection runs on the CPU only (model on {weight.device})")
            w = weight.float()
            self._w_scale = _scale(w)                                               # (V,)
            self._w_int8_t = _quantize(w, self._w_scale).t().contiguous()           # (D, V), what _int_mm reads
        elif precision == "bfloat16":
            self._w_bf16 = weight.to(torch.bfloat16).contiguous()                   # (V, D)

    @property
    def function(self) -> Callable[[Tensor], Tensor] | None:
        """``(..., D)`` hidden states -> ``(..., V)`` float32 logits, or None for float32 (the model's own)."""
        return {"int8": self._int8, "bfloat16": self._bfloat16}.get(self.precision)

    def _bfloat16(self, hidden: Tensor) -> Tensor:
        import torch
        import torch.nn.functional as F

        logits = F.linear(hidden.to(torch.bfloat16), self._w_bf16).float()
        return logits if self._bias is None else logits + self._bias

    def _int8(self, hidden: Tensor) -> Tensor:
        import torch

        x = hidden.float().reshape(-1, hidden.size(-1))                             # (N, D)
        x_scale = _scale(x)[:, None]                                                # (N, 1)
        acc = torch._int_mm(_quantize(x, x_scale[:, 0]), self._w_int8_t)           # (N, V) int32, exact
        logits = acc.float().mul_(self._w_scale).mul_(x_scale)
        if self._bias is not None:
            logits.add_(self._bias)
        return logits.reshape(*hidden.shape[:-1], -1)


def _scale(rows: Tensor) -> Tensor:
    """``(R, D)`` -> ``(R,)`` symmetric int8 scale of each row, ``max |row| / 127`` (a tiny floor for zero rows)."""
    return rows.abs().amax(dim=-1).clamp_min(1e-12) / 127.0


def _quantize(rows: Tensor, scale: Tensor) -> Tensor:
    """``(R, D)`` float -> ``(R, D)`` int8, ``round(row / scale)`` in [-127, 127]."""
    import torch

    return torch.round(rows / scale[:, None]).clamp_(-127, 127).to(torch.int8)
