"""A training run on disk, without pickle: the run states ``step_{N:08d}/`` (weights and Adam moments in
safetensors, RNG states as uint8 tensors, step / epoch / data position in JSON), each written atomically
(:func:`aiayn.files.atomic_dir`) and pruned to the last ``keep`` so that ``--resume`` continues exactly; the
warm start from another run's weights (``--init-from``); the record of configuration changes across resumes
(``config_changes.jsonl``); the lineage a run inherits from its parent and the hardware it ran on
(``lineage.json``, :mod:`aiayn.lineage`); and the truncation of ``metrics.jsonl`` back to the state a crashed run resumes.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file

from ..checkpoint import load_state, load_weights_into, save_checkpoint
from ..files import atomic_dir, atomic_write_text
from ..lineage import LINEAGE_FILE, lineage_of, read_run_lineage, run_entry
from ..model.transformer import Transformer
from .recipe import TrainConfig
from .stacking import stack_layers

if TYPE_CHECKING:
    from .history import AttentionRecorder


def save_state(run_dir: Path, model: Transformer, opt: torch.optim.Optimizer, state: dict[str, Any], keep: int,
               history: AttentionRecorder | None = None) -> Path:
    """Write the run state ``run_dir/step_{N:08d}/`` (N = ``state["step"]``) atomically and prune to the last
    ``keep`` states (``keep <= 0`` keeps all); returns the state's directory. With ``history``, the attention
    of its curated sentences at step N is then appended to ``run_dir/attention_history.safetensors``
    (:meth:`.history.AttentionRecorder.record`; after the state is in place, so the history never holds a
    step past the last state).

    The folder holds ``model.safetensors`` + ``config.json`` (float32, as :func:`aiayn.checkpoint.save_checkpoint`),
    ``optimizer.safetensors`` (Adam ``exp_avg::NAME`` / ``exp_avg_sq::NAME`` float32 tensors shaped as the
    parameters, ``rng::torch`` / ``rng::cuda`` uint8 RNG states) and ``trainer_state.json`` (``state`` plus
    ``adam_steps``: Adam's step count per parameter). On any error the previous states are left untouched.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    final = run_dir / f"step_{state['step']:08d}"
    with atomic_dir(final) as tmp:
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
    if history is not None:
        history.record(run_dir, model, state["step"])
    for old in list_states(run_dir)[:-keep] if keep > 0 else []:
        prune_state(old)
    for left in run_dir.glob(".step_*.pruned"):  # what an interrupted prune left behind
        shutil.rmtree(left, ignore_errors=True)
    return final


def prune_state(state_dir: Path) -> None:
    """Remove a run state: first renamed out of :func:`list_states`' sight (one atomic step), then deleted, so an
    interrupt during the deletion never leaves a half-deleted ``step_*/`` that looks like a state."""
    hidden = state_dir.with_name(f".{state_dir.name}.pruned")
    if hidden.exists():
        shutil.rmtree(hidden, ignore_errors=True)
    os.replace(state_dir, hidden)
    shutil.rmtree(hidden, ignore_errors=True)


def list_states(run_dir: str | Path) -> list[Path]:
    """Saved run states of ``run_dir`` (``step_*/`` folders holding a ``trainer_state.json``), oldest first;
    ``[]`` when there are none or ``run_dir`` does not exist."""
    d = Path(run_dir)
    return sorted(p for p in d.glob("step_*") if p.is_dir() and (p / "trainer_state.json").is_file())


def load_state_into(path: Path, model: Transformer, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore weights, Adam moments and the RNG states from the run state ``path`` (written by
    :func:`save_state`) into ``model`` and ``opt``; returns the trainer state dict (step, epoch,
    batch_in_epoch, wall_time in seconds, tokens, adam_steps).

    Raises:
        FileNotFoundError: a file of the state is missing; ValueError: ``model.safetensors`` is truncated or not
            a safetensors file (:func:`aiayn.checkpoint.load_state`); RuntimeError: the weights do not fit ``model``.
    """
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


class WarmStartError(ValueError):
    """``--init-from`` names something that cannot start this run (no weights, another vocabulary or shape)."""


def init_weights_from(source: str | Path, model: Transformer, spm_model: str | Path, *, stack: bool = False) -> Path:
    """Warm start: copy the weights (only) of ``source`` into ``model``; returns the weights file used.

    ``source`` is a run directory (its last state), a run state ``step_*/`` or a checkpoint directory. The
    optimizer, schedule and data position start fresh (step 0). The source may have been trained in the other
    direction: with one joint vocabulary (Section 5.1) every tensor has the same shape, and a parent model
    trained on related data is a known head start for a data-poor child (transfer learning for NMT: Zoph et al.
    2016; Kocmi and Bojar 2018, who also reverse the direction). Not part of the paper's recipe.

    A ``model`` with language tags (``--bidirectional``) or domain tags (``--domain-tags``) may start from a model
    without: each tag's embedding row starts as a copy of the start piece's (:func:`add_tag_rows`), the
    position the tags take over.

    ``stack``: ``source`` may be shallower than ``model``: its layers are copied on top of themselves until they
    reach ``model``'s depth (progressive stacking, :func:`aiayn.training.stacking.stack_layers`).

    Raises:
        WarmStartError: ``source`` holds no readable weights, its SentencePiece model differs from ``spm_model``
            (the token ids would mean other pieces), its tensors do not fit ``model`` (another d_model, N,
            vocabulary size...), or with ``stack``, ``model``'s depth is not a multiple of ``source``'s.
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
        state = load_state(weights_file)
        if stack:
            try:
                state = stack_layers(state, len(model.encoder_layers))
            except ValueError as exc:
                raise WarmStartError(f"--init-from {src} --init-stack: {exc}") from None
        state = add_tag_rows(state, model)
        load_weights_into(model, state, weights_file, against="this run's model")
    except WarmStartError:
        raise
    except ValueError as exc:
        raise WarmStartError(f"--init-from {src}: its weights do not fit ({exc})") from None
    return weights_file


def add_tag_rows(state: dict[str, torch.Tensor], model: Transformer) -> dict[str, torch.Tensor]:
    """``state`` with the embedding rows of ``model``'s tags added where it has fewer (``(V, D)`` ->
    ``(V + n_tags, D)``): its language tags (a warm start of a bidirectional model from a directional one) or its
    domain tags (``--domain-tags``), each new row a copy of the start piece's row (``bos_id``), the position the
    tags take over. Other tensors, and a state that already has the rows, unchanged."""
    cfg = model.cfg
    if cfg.n_embeddings == cfg.vocab_size:
        return state
    out = dict(state)
    for key in ("embedding.weight", "src_embedding.weight", "tgt_embedding.weight"):
        w = out.get(key)
        if w is not None and w.dim() == 2 and w.size(0) == cfg.vocab_size:
            out[key] = torch.cat([w, w[cfg.bos_id].expand(cfg.n_embeddings - cfg.vocab_size, -1)])
    return out


def parent_lineage(source: str | Path) -> list[dict[str, Any]]:
    """The lineage a warm start from ``source`` inherits (:mod:`aiayn.lineage`), oldest run first: a checkpoint
    directory's ``meta["lineage"]`` (or the one entry its meta gives); for a run directory or a run state, the
    run's own parents plus the run itself up to that state. ``[]`` when ``source`` holds no training record."""
    src = Path(source).expanduser()
    states = list_states(src) if (src / "train_config.json").is_file() else []
    if (src / "trainer_state.json").is_file():  # a run state step_*/
        run, state_dir = src.parent, src
    elif states:
        run, state_dir = src, states[-1]
    else:  # a checkpoint directory
        try:
            return lineage_of(json.loads((src / "config.json").read_text(encoding="utf-8")).get("meta"))
        except (OSError, ValueError, AttributeError):
            return []
    try:
        tc = json.loads((run / "train_config.json").read_text(encoding="utf-8"))
        st = json.loads((state_dir / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    own = read_run_lineage(run)
    return own["parents"] + [run_entry(tc, st, own["hardware"])]


def describe_hardware(device: torch.device, threads: int, world: int = 1) -> str:
    """Where a run trains, in words for its lineage: the GPU's name (times ``world`` processes) or the CPU's
    model, its logical cores and the threads used, and the torch version."""
    if device.type == "cuda":
        where = torch.cuda.get_device_name(device) + (f" x{world}" if world > 1 else "")
    else:
        model = ""
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        cores = os.cpu_count()
        where = f"CPU {model or 'unknown model'} ({cores} logical cores), {threads or torch.get_num_threads()} thread(s)"
    return f"{where}, torch {torch.__version__}"


def record_run_start(run_dir: str | Path, tc: TrainConfig, hardware: str, *, fresh: bool) -> None:
    """Keep the run's lineage file ``lineage.json`` (:mod:`aiayn.lineage`) current when it starts: a fresh run
    stores the lineage of its ``--init-from`` parent (:func:`parent_lineage`; read now, since the parent may be
    overwritten later, e.g. a checkpoint re-exported over the one it started from) and ``hardware``; a resumed
    run adds ``hardware`` when it differs from what the run already ran on. Atomic rewrite."""
    path = Path(run_dir) / LINEAGE_FILE
    data = read_run_lineage(run_dir) if not fresh else {
        "parents": parent_lineage(tc.init_from) if tc.init_from else [], "hardware": []}
    if hardware not in data["hardware"]:
        data["hardware"].append(hardware)
    atomic_write_text(path, json.dumps(data, indent=1))


def record_config_change(run_dir: str | Path, step: int, tc: TrainConfig) -> dict[str, list[Any]]:
    """Compare ``tc`` with the run's ``train_config.json``; on a difference, append ``{"step", "changed"}`` to
    ``config_changes.jsonl`` and make ``tc`` the run's configuration (atomic rewrite).

    A run resumed with other flags (e.g. a new data mix) is no longer the uninterrupted run that ``--resume``
    otherwise reproduces; this keeps the history, and ``export`` copies it into the checkpoint's meta so the
    model card can say what changed when. Returns ``{key: [old, new]}`` (empty when nothing changed or the run
    has no stored configuration yet).
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
        atomic_write_text(path, json.dumps(new, indent=2))
    return changed if old else {}


def read_config_changes(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records ``{"step": int, "changed": {key: [old, new]}}`` of ``config_changes.jsonl``, in order
    (``[]`` when the run never changed its configuration)."""
    path = Path(run_dir) / "config_changes.jsonl"
    if not path.is_file():
        return []
    return [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]


def truncate_metrics(path: Path, last_step: int) -> int:
    """Drop the records of ``metrics.jsonl`` past ``last_step`` (written after the state a crashed run resumes
    from; the resumed run logs those steps again) and lines torn by the crash. Atomic rewrite; returns how many
    lines were dropped (0, and nothing written, when ``path`` does not exist or nothing is dropped)."""
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
        atomic_write_text(path, "".join(ln + "\n" for ln in keep))
    return dropped
