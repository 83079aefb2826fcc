"""Training with the paper's recipe (Section 5), checkpoints, exact resume, averaging, DDP.

* Batches by token count with length bucketing (Section 5.1); a step gathers ``tokens_per_step`` target
  tokens through gradient accumulation (paper: ~25k source + 25k target tokens a step).
* Adam, beta1 = 0.9, beta2 = 0.98, eps = 1e-9, learning rate of Equation 3 (Section 5.3):
  ``lrate = lr_scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)``.
* Label smoothing eps_ls = 0.1 (Section 5.4), residual dropout P_drop = 0.1 (in the model config).
* bf16 autocast on CUDA, optional ``torch.compile``, multi-GPU / multi-node with ``torchrun`` and
  ``DistributedDataParallel``; each rank gets its own shard of every epoch's batches.
* Run state (weights, Adam moments, RNG, data position) is stored with safetensors + JSON, never
  pickle; written atomically; the last ``keep`` states are kept; ``--resume`` continues exactly.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file

from ..checkpoint import average_checkpoints, load_state, load_weights_into, save_checkpoint
from ..model.config import TransformerConfig
from ..model.transformer import Transformer


# ----------------------------------------------------------------------------------------------------------
# Recipe pieces
# ----------------------------------------------------------------------------------------------------------
def noam_lr(step: int, d_model: int, warmup_steps: int, lr_scale: float = 1.0) -> float:
    """Equation 3: ``lr_scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)``; step counts from 1.

    Raises:
        ValueError: ``step < 1`` or ``warmup_steps < 1``.
    """
    if step < 1 or warmup_steps < 1:
        raise ValueError(f"step and warmup_steps must be >= 1, got step={step}, warmup_steps={warmup_steps}")
    return lr_scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, epsilon_ls: float, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Cross-entropy against the smoothed target ``q = (1 - eps_ls) * onehot(y) + eps_ls / V`` (Section 5.4,
    Szegedy et al. 2016), summed over non-pad positions.

    Args:
        logits: ``(B, T, V)`` float. target: ``(B, T)`` int64 (``pad_id`` positions are ignored).
        epsilon_ls: smoothing mass eps_ls in [0, 1).

    Returns:
        ``(smoothed loss sum, plain NLL sum, number of target tokens)``; the sums are float32 scalars
        in nats.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    mask = target != pad_id
    nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    uniform = -logp.mean(dim=-1)  # = sum_v (1/V) * -log p_v
    loss = (1.0 - epsilon_ls) * nll + epsilon_ls * uniform
    return loss[mask].sum(), nll[mask].sum(), int(mask.sum())


@dataclass
class TrainConfig:
    """Everything that defines a training run (stored as ``train_config.json`` in the run directory)."""

    data_dir: str
    run_dir: str
    direction: str = "en-de"
    preset: str = "base"
    model_overrides: dict[str, Any] = field(default_factory=dict)
    max_tokens: int = 4096  # per micro-batch (padded source or target tokens)
    tokens_per_step: int = 25000  # target tokens a step gathers via accumulation (paper ~25k)
    accumulation: int = 0  # micro-batches per step and rank; 0 = derive from tokens_per_step
    warmup_steps: int = 4000
    lr_scale: float = 1.0
    epsilon_ls: float = 0.1
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    max_steps: int = 100000
    max_epochs: int = 1000
    max_minutes: float = 0.0  # 0 = no time limit
    seed: int = 1234
    valid_every: int = 1000
    valid_bleu_sentences: int = 200
    valid_beam_size: int = 4
    save_every: int = 1000
    keep: int = 5
    compile: bool = False
    amp: bool = True  # bf16 autocast on CUDA
    max_len: int = 128  # drop training pairs longer than this (pieces)
    threads: int = 0
    upsample_sentences: int = 1  # repeat full-sentence pairs (both sides, aiayn.data.is_sentence) this many times
    amp_cpu: bool = False  # bf16 autocast on CPU as well (CPUs with AVX512-BF16 or AMX; off by default)
    init_from: str = ""  # warm start: weights (only) of a run, run state or checkpoint directory; "" = random init


def _is_dist() -> bool:
    return dist.is_available() and dist.is_initialized()


def _rank() -> int:
    return dist.get_rank() if _is_dist() else 0


def _world() -> int:
    return dist.get_world_size() if _is_dist() else 1


# ----------------------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------------------
def load_split(data_dir: str | Path, split: str, direction: str) -> tuple[list[str], list[str]]:
    """Source and target texts of ``{split}.tsv`` (columns ``de``, ``en``) for ``direction``."""
    from ..data import read_tsv

    pairs = read_tsv(Path(data_dir) / f"{split}.tsv")
    src_lang, tgt_lang = direction.split("-")
    return [getattr(p, src_lang) for p in pairs], [getattr(p, tgt_lang) for p in pairs]


def upsample_sentences(src: list[str], tgt: list[str], times: int) -> tuple[list[str], list[str]]:
    """Repeat every pair whose two sides are full sentences (:func:`aiayn.data.is_sentence`) ``times`` times in
    total, keeping the order otherwise. A data-mix choice for phrase-heavy corpora such as Ding (95% of its
    pairs are 1-3 word phrases), not part of the paper's recipe; ``times=1`` leaves the data unchanged.

    Raises:
        ValueError: ``times < 1``.
    """
    if times < 1:
        raise ValueError(f"upsample_sentences must be >= 1, got {times}")
    if times == 1:
        return src, tgt
    from ..data import is_sentence

    out_s, out_t = [], []
    for a, b in zip(src, tgt):
        n = times if (is_sentence(a) and is_sentence(b)) else 1
        out_s.extend([a] * n)
        out_t.extend([b] * n)
    return out_s, out_t


def encode_pairs(tokenizer, src: list[str], tgt: list[str], max_len: int, eos_id: int) -> tuple[list[list[int]], list[list[int]]]:
    """Piece ids (source + EOS, target + EOS), dropping pairs longer than ``max_len``."""
    s_ids = tokenizer.encode_batch(src) if hasattr(tokenizer, "encode_batch") else [tokenizer.encode(x) for x in src]
    t_ids = tokenizer.encode_batch(tgt) if hasattr(tokenizer, "encode_batch") else [tokenizer.encode(x) for x in tgt]
    out_s, out_t = [], []
    for a, b in zip(s_ids, t_ids):
        if a and b and len(a) < max_len and len(b) < max_len:
            out_s.append(a + [eos_id])
            out_t.append(b + [eos_id])
    return out_s, out_t


def collate(idx: list[int], src_ids: list[list[int]], tgt_ids: list[list[int]], cfg: TransformerConfig):
    """``(src (B, S), decoder input (B, T) = BOS + y[:-1], target (B, T) = y)``, padded with ``pad_id``."""
    B = len(idx)
    S = max(len(src_ids[i]) for i in idx)
    T = max(len(tgt_ids[i]) for i in idx)
    src = torch.full((B, S), cfg.pad_id, dtype=torch.long)
    dec_in = torch.full((B, T), cfg.pad_id, dtype=torch.long)
    tgt = torch.full((B, T), cfg.pad_id, dtype=torch.long)
    for r, i in enumerate(idx):
        s, t = src_ids[i], tgt_ids[i]
        src[r, : len(s)] = torch.tensor(s)
        tgt[r, : len(t)] = torch.tensor(t)
        dec_in[r, 0] = cfg.bos_id
        dec_in[r, 1 : len(t)] = torch.tensor(t[:-1])
    return src, dec_in, tgt


# ----------------------------------------------------------------------------------------------------------
# Run state (no pickle): weights + Adam moments in safetensors, scalars and RNG in JSON / uint8 tensors
# ----------------------------------------------------------------------------------------------------------
def _atomic_dir(final: Path) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    return tmp


def save_state(run_dir: Path, model: Transformer, opt: torch.optim.Optimizer, state: dict[str, Any], keep: int) -> Path:
    """Write ``run_dir/step_{N:08d}/`` atomically (temp dir, then rename) and prune to the last ``keep``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    final = run_dir / f"step_{state['step']:08d}"
    tmp = _atomic_dir(final)
    try:
        save_checkpoint(tmp, model, dtype="float32", meta={"step": state["step"]})
        names = {id(p): n for n, p in model.named_parameters()}
        tensors: dict[str, torch.Tensor] = {}
        steps: dict[str, float] = {}
        for group in opt.param_groups:
            for p in group["params"]:
                st = opt.state.get(p)
                if not st:
                    continue
                n = names[id(p)]
                tensors[f"exp_avg::{n}"] = st["exp_avg"].detach().cpu().contiguous()
                tensors[f"exp_avg_sq::{n}"] = st["exp_avg_sq"].detach().cpu().contiguous()
                steps[n] = float(st["step"])
        tensors["rng::torch"] = torch.get_rng_state()
        if torch.cuda.is_available():
            tensors["rng::cuda"] = torch.cuda.get_rng_state()
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        (tmp / "trainer_state.json").write_text(json.dumps(dict(state, adam_steps=steps), indent=1))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in list_states(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_states(run_dir: str | Path) -> list[Path]:
    """Saved run states of ``run_dir``, oldest first."""
    d = Path(run_dir)
    return sorted(p for p in d.glob("step_*") if p.is_dir() and (p / "trainer_state.json").is_file())


class WarmStartError(ValueError):
    """``--init-from`` names something that cannot start this run (no weights, another vocabulary or shape)."""


def init_weights_from(source: str | Path, model: Transformer, spm_model: str | Path) -> Path:
    """Warm start: copy the weights (only) of ``source`` into ``model``; returns the weights file used.

    ``source`` is a run directory (its last state), a run state ``step_*/`` or a checkpoint directory. The
    optimizer, schedule and data position start fresh (step 0). The source may have been trained in the other
    direction: with one joint vocabulary (Section 5.1) every tensor has the same shape, and a parent model
    trained on related data is a known head start for a data-poor child (transfer learning for NMT: Zoph et al.
    2016; Kocmi and Bojar 2018, who also reverse the direction). Not part of the paper's recipe.

    Raises:
        WarmStartError: ``source`` holds no readable weights, its SentencePiece model differs from ``spm_model``
            (the token ids would mean other pieces), or its tensors do not fit ``model`` (another d_model, N,
            vocabulary size...).
    """
    src = Path(source).expanduser()
    states = list_states(src) if (src / "train_config.json").is_file() else []
    if states:
        spm_dir, weights_dir = src, states[-1]
    else:
        spm_dir = src.parent if (src / "trainer_state.json").is_file() else src
        weights_dir = src
    weights_file = weights_dir / "model.safetensors"
    if not weights_file.is_file():
        raise WarmStartError(f"--init-from {src}: no model.safetensors there (give a run, run state or checkpoint directory)")
    their_spm = spm_dir / "spm.model"
    if their_spm.is_file() and their_spm.read_bytes() != Path(spm_model).read_bytes():
        raise WarmStartError(f"--init-from {src}: its vocabulary ({their_spm}) differs from this run's ({spm_model}); "
                             "token ids would mean other pieces")
    try:
        load_weights_into(model, load_state(weights_file), weights_file, against="this run's model")
    except ValueError as exc:
        raise WarmStartError(f"--init-from {src}: its weights do not fit ({exc})") from None
    return weights_file


def load_state_into(path: Path, model: Transformer, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore weights, Adam moments and RNG from a run state; returns the trainer state dict."""
    weights = load_state(path / "model.safetensors")
    model.load_state_dict(weights)
    tensors = load_file(str(path / "optimizer.safetensors"))
    state = json.loads((path / "trainer_state.json").read_text())
    names = {n: p for n, p in model.named_parameters()}
    for n, p in names.items():
        if f"exp_avg::{n}" in tensors:
            opt.state[p] = {
                "step": torch.tensor(state["adam_steps"][n]),
                "exp_avg": tensors[f"exp_avg::{n}"].to(p.device),
                "exp_avg_sq": tensors[f"exp_avg_sq::{n}"].to(p.device),
            }
    torch.set_rng_state(tensors["rng::torch"])
    if "rng::cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng::cuda"])
    return state


# ----------------------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------------------
@torch.no_grad()
def validate(model: Transformer, tokenizer, src: list[str], tgt: list[str], cfg: TransformerConfig, *, beam_size: int, n_bleu: int, max_tokens: int, device) -> dict[str, float]:
    """Teacher-forced valid loss (per target token, no smoothing) and sacreBLEU of real beam decodes of the
    first ``n_bleu`` sentences (never teacher-forced argmax)."""
    import sacrebleu

    from ..decoding import beam_search

    was_training = model.training
    model.eval()
    s_ids, t_ids = encode_pairs(tokenizer, src, tgt, cfg.max_len - 1, cfg.eos_id)
    nll_sum, n_tok = 0.0, 0
    order = sorted(range(len(s_ids)), key=lambda i: len(s_ids[i]))
    batch: list[int] = []
    for i in order + [None]:
        if i is not None:
            batch.append(i)
        if batch and (i is None or (len(batch) + 1) * max(len(s_ids[j]) for j in batch) > max_tokens):
            s, d, t = collate(batch, s_ids, t_ids, cfg)
            logits = model(s.to(device), d.to(device))
            _, nll, n = label_smoothed_loss(logits, t.to(device), 0.0, cfg.pad_id)
            nll_sum += float(nll)
            n_tok += n
            batch = []
    hyps, refs = [], []
    n = min(n_bleu, len(src))
    for start in range(0, n, 32):
        chunk = src[start : min(n, start + 32)]
        ids = [tokenizer.encode(x)[: cfg.max_len - 2] + [cfg.eos_id] for x in chunk]
        width = max(len(x) for x in ids)
        batch_t = torch.full((len(ids), width), cfg.pad_id, dtype=torch.long)
        for r, x in enumerate(ids):
            batch_t[r, : len(x)] = torch.tensor(x)
        for res in beam_search(model, batch_t.to(device), beam_size=beam_size, length_penalty_alpha=0.6):
            hyps.append(tokenizer.decode(res[0].tokens))
        refs.extend(tgt[start : min(n, start + 32)])
    bleu = sacrebleu.corpus_bleu(hyps, [refs]).score if hyps else 0.0
    model.train(was_training)
    return {"valid_loss": nll_sum / max(n_tok, 1), "valid_bleu": bleu, "valid_samples": list(zip(src[:3], hyps[:3]))}


# ----------------------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------------------
def record_config_change(run_dir: str | Path, step: int, tc: TrainConfig) -> dict[str, list[Any]]:
    """Compare ``tc`` with the run's ``train_config.json``; on a difference, append ``{"step", "changed"}`` to
    ``config_changes.jsonl`` and make ``tc`` the run's configuration (atomic rewrite).

    A run resumed with other flags (e.g. a new data mix) is no longer the uninterrupted run that ``--resume``
    otherwise reproduces; this keeps the history, and ``export`` copies it into the checkpoint's meta so the
    model card can say what changed when. Returns ``{key: [old, new]}`` (empty when nothing changed).
    """
    run_dir = Path(run_dir)
    path = run_dir / "train_config.json"
    new = json.loads(json.dumps(asdict(tc)))  # tuples -> lists, as stored
    old = json.loads(path.read_text()) if path.is_file() else {}
    # a key missing from an older run's file had its default (the behaviour before the flag existed)
    defaults = json.loads(json.dumps(asdict(TrainConfig("", ""))))
    changed = {k: [old.get(k, defaults.get(k)), v] for k, v in new.items() if old.get(k, defaults.get(k)) != v}
    if changed and old:
        with open(run_dir / "config_changes.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"step": int(step), "changed": changed}) + "\n")
        from ..data import _atomic_write_text

        _atomic_write_text(path, json.dumps(new, indent=2))
    return changed if old else {}


def read_config_changes(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of ``config_changes.jsonl`` (``[]`` when the run never changed its configuration)."""
    path = Path(run_dir) / "config_changes.jsonl"
    if not path.is_file():
        return []
    return [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]


def _truncate_metrics(path: Path, last_step: int) -> int:
    """Drop the records of ``metrics.jsonl`` past ``last_step`` (written after the state a crashed run resumes
    from; the resumed run logs those steps again) and lines torn by the crash. Atomic rewrite; returns how many
    lines were dropped."""
    if not path.is_file():
        return 0
    def before(line: str) -> bool:
        try:
            return json.loads(line).get("step", 0) <= last_step
        except (json.JSONDecodeError, AttributeError):  # a line torn by the crash
            return False

    lines = path.read_text(encoding="utf-8").splitlines()
    keep = [ln for ln in lines if ln.strip() and before(ln)]
    dropped = sum(1 for ln in lines if ln.strip()) - len(keep)
    if dropped:
        from ..data import _atomic_write_text

        _atomic_write_text(path, "".join(ln + "\n" for ln in keep))
    return dropped


def autocast_for(tc: TrainConfig, device: torch.device):
    """The mixed-precision context of the training forward pass (weights, optimizer and loss stay float32).

    bf16 autocast on CUDA when ``tc.amp``; on CPU only when ``tc.amp_cpu`` as well (oneDNN runs the matmuls in
    bf16 on CPUs with AVX512-BF16 or AMX: 1.47x faster per step on the project's 2-core AMD EPYC, see
    docs/benchmarks.md). Otherwise a disabled autocast, i.e. float32 throughout.
    """
    if tc.amp and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if tc.amp and tc.amp_cpu and device.type == "cpu":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return torch.autocast(device.type if device.type in ("cpu", "cuda") else "cpu", enabled=False)


def _setup_distributed() -> torch.device:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not _is_dist():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def step_batches(tc: TrainConfig, src_ids, tgt_ids, epoch: int) -> list[list[list[int]]]:
    """The batches of one epoch grouped into optimizer steps, for this rank: ``steps[k]`` is the list of
    micro-batches (lists of example indices) rank r accumulates in step k. Every rank's share is disjoint.
    With ``accumulation`` = a set, a step is ``a * world`` consecutive micro-batches, so W ranks with
    accumulation a see exactly the steps of one process with accumulation ``a * W`` (Section 5.1); with
    ``accumulation=0`` the micro-batches per step are derived from ``tokens_per_step`` and rounded to a
    multiple of the world size, so the global batch is only approximately independent of the world size."""
    from ..data import token_batches

    batches = token_batches(src_ids, tgt_ids, tc.max_tokens, seed=tc.seed, epoch=epoch)
    world, rank = _world(), _rank()
    if tc.accumulation > 0:
        per_step = tc.accumulation * world
    else:
        avg_tokens = sum(sum(len(tgt_ids[i]) for i in b) for b in batches) / max(len(batches), 1)
        per_step = max(world, int(round(tc.tokens_per_step / max(avg_tokens, 1) / world)) * world)
    steps = []
    for start in range(0, len(batches) - per_step + 1, per_step):
        group = batches[start : start + per_step]
        steps.append(group[rank::world])
    return steps


def train(tc: TrainConfig, *, resume: bool = False, log=print) -> Path:
    """Run (or resume) training as configured; returns the run directory.

    Raises:
        FileExistsError: ``resume`` is False and ``run_dir`` already holds saved states (a fresh start would
            overwrite the run's metrics and mix its states with the new ones).

    The run directory holds ``train_config.json``, ``metrics.jsonl`` (one JSON object per log line: step,
    epoch, train_loss, valid_loss, valid_bleu, lr, tokens_per_s, wall_time) and ``step_*/`` states.
    """
    from tqdm import tqdm

    from ..tokenizer import Tokenizer

    device = _setup_distributed()
    if tc.threads > 0:
        torch.set_num_threads(tc.threads)
    rank, world = _rank(), _world()
    run_dir = Path(tc.run_dir).expanduser()
    data_dir = Path(tc.data_dir).expanduser()
    tokenizer = Tokenizer.load(data_dir / "spm.model")
    overrides = dict(tc.model_overrides)
    overrides.setdefault("vocab_size", tokenizer.vocab_size)
    overrides.setdefault("max_len", max(256, tc.max_len + 2))
    cfg = TransformerConfig.preset(tc.preset, **overrides)
    torch.manual_seed(tc.seed)
    model = Transformer(cfg).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=tuple(tc.adam_betas), eps=tc.adam_eps)
    state: dict[str, Any] = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "wall_time": 0.0, "tokens": 0}
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
    states = list_states(run_dir)
    if states and not resume:
        raise FileExistsError(f"{run_dir} already holds a training run (last state {states[-1].name}); pass --resume to "
                              "continue it, or choose another run directory (nothing was changed)")
    if resume and states:
        state = load_state_into(states[-1], model, opt)
        log(f"resumed from {states[-1]} (step {state['step']}, epoch {state['epoch']})")
        if rank == 0:
            changed = record_config_change(run_dir, state["step"], tc)
            if changed:
                log("resumed with a changed configuration: " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items()))
            dropped = _truncate_metrics(run_dir / "metrics.jsonl", state["step"])
            if dropped:
                log(f"dropped {dropped} metrics records logged after step {state['step']} (they will be logged again)")
    else:
        if tc.init_from:
            used = init_weights_from(tc.init_from, model, data_dir / "spm.model")
            log(f"initialised the weights from {used} (warm start; optimizer and schedule start at step 0)")
    if rank == 0 and not (resume and states):
        (run_dir / "train_config.json").write_text(json.dumps(asdict(tc), indent=2))
        (run_dir / "metrics.jsonl").write_text("")
        shutil.copyfile(data_dir / "spm.model", run_dir / "spm.model")
    train_src, train_tgt = load_split(data_dir, "train", tc.direction)
    train_src, train_tgt = upsample_sentences(train_src, train_tgt, tc.upsample_sentences)
    valid_src, valid_tgt = load_split(data_dir, "valid", tc.direction)
    src_ids, tgt_ids = encode_pairs(tokenizer, train_src, train_tgt, tc.max_len, cfg.eos_id)
    log(f"{len(src_ids)} training pairs, {model.num_parameters() / 1e6:.2f}M parameters, device {device}, world {world}")
    fwd = torch.compile(model) if tc.compile else model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        fwd = DDP(fwd, device_ids=[device.index] if device.type == "cuda" else None)
    amp = autocast_for(tc, device)
    model.train()
    t_start = time.perf_counter() - state["wall_time"]
    metrics_path = run_dir / "metrics.jsonl"
    bar = tqdm(total=tc.max_steps, initial=state["step"], disable=rank != 0, dynamic_ncols=True, desc=tc.direction)
    stop = state["step"] >= tc.max_steps  # resuming a finished run trains nothing more
    if stop:
        log(f"the run is already at step {state['step']} >= max_steps {tc.max_steps}: nothing to train")
    window_loss, window_tok, window_t0 = 0.0, 0, time.perf_counter()
    while not stop and state["epoch"] < tc.max_epochs:
        steps = step_batches(tc, src_ids, tgt_ids, state["epoch"])
        for k in range(state["batch_in_epoch"], len(steps)):
            micro = steps[k]
            n_tok_local = sum(sum(len(tgt_ids[i]) for i in b) for b in micro)
            n_tok = torch.tensor(float(n_tok_local), device=device)
            if world > 1:
                dist.all_reduce(n_tok)
            step = state["step"] + 1
            lr = noam_lr(step, cfg.d_model, tc.warmup_steps, tc.lr_scale)
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad(set_to_none=True)
            loss_sum = 0.0
            for j, b in enumerate(micro):
                s, d, t = collate(b, src_ids, tgt_ids, cfg)
                sync = world == 1 or j == len(micro) - 1
                ctx = fwd.no_sync() if (world > 1 and not sync) else _nullctx()
                with ctx, amp:
                    logits = fwd(s.to(device), d.to(device))
                    loss, _, _ = label_smoothed_loss(logits, t.to(device), tc.epsilon_ls, cfg.pad_id)
                    # DDP averages gradients over ranks: scale so the step's gradient is the mean per target
                    # token of the global batch, the same as one process accumulating all micro-batches.
                    (loss * world / n_tok).backward()
                loss_sum += float(loss.detach())
            opt.step()
            n_tok_global = int(n_tok.item())
            if world > 1:  # log the loss of the global batch, not only rank 0's share
                loss_t = torch.tensor(loss_sum, dtype=torch.float64, device=device)
                dist.all_reduce(loss_t)
                loss_sum = float(loss_t.item())
            state["step"] = step
            state["batch_in_epoch"] = k + 1
            state["tokens"] += n_tok_global
            window_loss += loss_sum
            window_tok += n_tok_global
            elapsed = time.perf_counter() - window_t0
            tps = window_tok / max(elapsed, 1e-9)
            bar.update(1)
            bar.set_postfix(loss=f"{loss_sum / max(n_tok_global, 1):.3f}", tok_s=f"{tps:,.0f}", lr=f"{lr:.2e}")
            log_now = step % max(1, tc.valid_every // 10) == 0
            valid_now = tc.valid_every > 0 and step % tc.valid_every == 0
            out_of_time = tc.max_minutes > 0 and (time.perf_counter() - t_start) / 60 >= tc.max_minutes
            if world > 1 and tc.max_minutes > 0:  # ranks must agree on stopping, or the others hang in all_reduce
                flag = torch.tensor(float(out_of_time), device=device)
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                out_of_time = bool(flag.item())
            last = step >= tc.max_steps or out_of_time
            if rank == 0 and (log_now or valid_now or last):
                rec = {"step": step, "epoch": state["epoch"], "train_loss": window_loss / max(window_tok, 1), "lr": lr,
                       "tokens_per_s": tps, "wall_time": time.perf_counter() - t_start}
                if valid_now or last:
                    v = validate(model, tokenizer, valid_src, valid_tgt, cfg, beam_size=tc.valid_beam_size,
                                 n_bleu=tc.valid_bleu_sentences, max_tokens=tc.max_tokens, device=device)
                    samples = v.pop("valid_samples")
                    rec.update(v)
                    bar.write(f"step {step}: valid loss {v['valid_loss']:.3f}, BLEU {v['valid_bleu']:.2f} | " + " || ".join(f"{a} => {b}" for a, b in samples[:2]))
                with open(metrics_path, "a") as fh:
                    fh.write(json.dumps(rec) + "\n")
                window_loss, window_tok, window_t0 = 0.0, 0, time.perf_counter()
            if rank == 0 and (step % tc.save_every == 0 or last):
                state["wall_time"] = time.perf_counter() - t_start
                save_state(run_dir, model, opt, state, tc.keep)
            if last:
                stop = True
                break
        if not stop:
            state["epoch"] += 1
            state["batch_in_epoch"] = 0
    bar.close()
    if world > 1:
        dist.barrier()
    return run_dir


class _nullctx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def export(run_dir: str | Path, out_dir: str | Path, *, last: int = 1, dtype: str = "float16", meta: dict[str, Any] | None = None) -> Path:
    """Write a shippable checkpoint directory from a run: the average of the last ``last`` states
    (Section 6.1 averages the last 5), weights in ``dtype``, with ``spm.model`` and ``metrics.jsonl``.

    Raises:
        FileNotFoundError: the run has no saved state.
    """
    run_dir = Path(run_dir).expanduser()
    states = list_states(run_dir)
    if not states:
        raise FileNotFoundError(f"no saved training state in {run_dir}")
    chosen = states[-last:]
    avg = average_checkpoints([p / "model.safetensors" for p in chosen])
    from ..checkpoint import read_config

    cfg = read_config(chosen[-1])["model_config"]
    model = Transformer(cfg)
    model.load_state_dict(avg)
    tc = json.loads((run_dir / "train_config.json").read_text())
    st = json.loads((chosen[-1] / "trainer_state.json").read_text())
    info = {"direction": tc["direction"], "src_lang": tc["direction"].split("-")[0], "tgt_lang": tc["direction"].split("-")[1],
            "averaged_states": [p.name for p in chosen], "step": st["step"], "epoch": st["epoch"],
            "train_wall_time_s": st["wall_time"], "train_tokens": st["tokens"], "train_config": tc,
            "config_changes": [c for c in read_config_changes(run_dir) if c["step"] < st["step"]]}
    try:
        import subprocess

        info["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                                            cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        info["git_commit"] = None
    info.update(meta or {})
    out = save_checkpoint(out_dir, model, spm_model=run_dir / "spm.model", dtype=dtype, meta=info)
    if (run_dir / "metrics.jsonl").is_file():
        shutil.copyfile(run_dir / "metrics.jsonl", Path(out) / "metrics.jsonl")
    return Path(out)


# ----------------------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------------------
def _parse_overrides(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"--set takes key=value, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


_VALUE_FLAGS = [("max_tokens", int), ("tokens_per_step", int), ("accumulation", int), ("warmup_steps", int), ("lr_scale", float),
                ("epsilon_ls", float), ("max_steps", int), ("max_epochs", int), ("max_minutes", float), ("seed", int),
                ("valid_every", int), ("valid_bleu_sentences", int), ("valid_beam_size", int), ("save_every", int), ("keep", int),
                ("max_len", int), ("threads", int), ("upsample_sentences", int)]


def resolve_config(given: dict[str, Any], stored: dict[str, Any] | None) -> TrainConfig:
    """The configuration of a command line: the flags it gives, over the run's stored ``train_config.json``
    when it resumes one (``stored``), over :class:`TrainConfig`'s defaults otherwise.

    So ``--resume`` continues the run's own recipe (warmup, rate scale, data mix...) and only the flags given
    change it (each change is then recorded by :func:`record_config_change`). ``model_overrides`` given with
    ``--set`` are merged key by key into the stored ones.

    Raises:
        ValueError: no data directory (neither given nor stored), or a resume that gives another
            ``direction`` or ``preset`` than the run was trained with (the weights belong to them).
    """
    base = asdict(TrainConfig("", ""))
    if stored:
        for key in ("direction", "preset"):
            if given.get(key) is not None and stored.get(key) is not None and given[key] != stored[key]:
                raise ValueError(f"this run was trained with {key} {stored[key]!r}; it cannot be resumed with "
                                 f"{key} {given[key]!r} (start a new run directory instead)")
        base.update({k: v for k, v in stored.items() if k in base})
    merged_overrides = dict(base.get("model_overrides") or {})
    merged_overrides.update(given.get("model_overrides") or {})
    base.update({k: v for k, v in given.items() if v is not None and k in base})
    base["model_overrides"] = merged_overrides
    base["adam_betas"] = tuple(base["adam_betas"])
    if not base.get("data_dir"):
        raise ValueError("no data directory: give --data DIR (a resumed run uses the one it was trained on)")
    return TrainConfig(**base)


def cli_main(argv: list[str]) -> int:
    """``aiayn train --data DIR --run DIR [--direction en-de] [--preset base] [--set d_model=256 ...]``.

    ``aiayn train --run DIR --resume [--flag value ...]`` continues a run with its stored configuration; only the
    flags given change it (recorded in ``config_changes.jsonl``). Several processes: ``torchrun
    --nproc_per_node=N -m aiayn train --data DIR --run-dir DIR ...`` (``--run-dir``, not ``--run``, which
    torchrun's own parser rejects as ambiguous).
    """
    ap = argparse.ArgumentParser(prog="aiayn train", description="Train with the paper's recipe (Section 5). Use torchrun for several GPUs.")
    ap.add_argument("--data", default=None, help="prepared data directory (train/valid.tsv, spm.model); "
                    "a resumed run defaults to the one it was trained on")
    # "--run-dir" too: under torchrun, whose own parser takes "--run" for an ambiguous abbreviation of its
    # "--run-path" and refuses the command line ("torchrun ... -m aiayn train --run-dir DIR" works).
    ap.add_argument("--run", "--run-dir", dest="run", required=True, help="run directory (states, metrics.jsonl)")
    ap.add_argument("--direction", default=None, choices=["en-de", "de-en"], help="default en-de")
    ap.add_argument("--preset", default=None, help="default base")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="model config overrides, e.g. d_model=256 n_layers=6")
    defaults = TrainConfig("", "")
    for name, typ in _VALUE_FLAGS:
        ap.add_argument("--" + name.replace("_", "-"), type=typ, default=None, help=f"default {getattr(defaults, name)}")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="torch.compile the model (default off)")
    ap.add_argument("--amp", action=argparse.BooleanOptionalAction, default=None, help="bf16 autocast on CUDA (default on)")
    ap.add_argument("--amp-cpu", action=argparse.BooleanOptionalAction, default=None,
                    help="bf16 autocast on CPU too (AVX512-BF16/AMX CPUs; 1.47x faster steps on the 2-core dev VM; default off)")
    ap.add_argument("--init-from", default=None, metavar="DIR", help="warm start a new run from the weights of a run, "
                    "run state or checkpoint with the same shape and vocabulary (e.g. the other direction's run); default off")
    ap.add_argument("--resume", action="store_true", help="continue from the run's last state, exactly, with its stored "
                    "configuration; flags given change it and are recorded")
    ap.add_argument("--export", default=None, help="after training, write a shippable checkpoint here")
    ap.add_argument("--export-average", type=int, default=5, help="average this many last states into --export")
    args = ap.parse_args(argv)
    stored = None
    cfg_file = Path(args.run).expanduser() / "train_config.json"
    if args.resume and cfg_file.is_file():
        try:
            stored = json.loads(cfg_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            ap.error(f"cannot resume: {cfg_file} is unreadable ({exc}); the run's recipe is stored there")
        if not isinstance(stored, dict):
            ap.error(f"cannot resume: {cfg_file} does not hold a training configuration")
    if args.init_from and args.resume and list_states(Path(args.run).expanduser()):
        ap.error("--init-from starts a new run from another run's weights; this run already has states, so --resume "
                 "continues from its own (drop --init-from, or choose a new run directory)")
    given = {"data_dir": args.data, "run_dir": args.run, "direction": args.direction, "preset": args.preset,
             "model_overrides": _parse_overrides(args.set), "compile": args.compile, "amp": args.amp, "amp_cpu": args.amp_cpu,
             "init_from": args.init_from,
             **{name: getattr(args, name) for name, _ in _VALUE_FLAGS}}
    try:
        tc = resolve_config(given, stored)
    except ValueError as exc:
        ap.error(str(exc))
    try:
        run = train(tc, resume=args.resume)
    except (FileExistsError, WarmStartError) as exc:
        print(f"aiayn train: {exc}", file=sys.stderr)
        return 2
    if args.export and _rank() == 0:
        out = export(run, args.export, last=args.export_average)
        print(f"exported {out}")
    if _is_dist():
        dist.destroy_process_group()
    return 0


def average_cli_main(argv: list[str]) -> int:
    """``aiayn average RUN_DIR OUT_DIR [--last 5] [--dtype float16]``: average the last k states."""
    ap = argparse.ArgumentParser(prog="aiayn average", description="Average the last k checkpoints of a run (Section 6.1).")
    ap.add_argument("run")
    ap.add_argument("out")
    ap.add_argument("--last", type=int, default=5)
    ap.add_argument("--dtype", default="float16", choices=["float32", "float16", "bfloat16"])
    args = ap.parse_args(argv)
    try:
        out = export(args.run, args.out, last=args.last, dtype=args.dtype)
    except (FileNotFoundError, ValueError) as exc:
        print(f"aiayn average: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0
