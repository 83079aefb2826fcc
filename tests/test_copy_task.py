"""A tiny Transformer trained here, on a synthetic copy task, really learns it.

Vocabulary of 20 ids (pad 0, unk 1, bos 2, eos 3, symbols 4..19), sequences of 3-8 random symbols; the
target is the source. The "tiny" preset (d_model 64, h 4, N 2) is trained with Adam (beta_2 0.98,
epsilon 1e-9, Section 5.3) on the label-smoothed loss of Section 5.4 for 300 steps, then decoded on
held-out sequences (never seen in training) with greedy and beam search (beam 4, alpha 0.6).
"""
from __future__ import annotations

import pytest
import torch

from aiayn import Transformer, TransformerConfig
from aiayn.decoding import beam_search, greedy_decode
from aiayn.training.recipe import label_smoothed_loss

V, PAD, BOS, EOS = 20, 0, 2, 3
STEPS, BATCH, LR, WARMUP = 300, 64, 2e-3, 40


def _sample(g: torch.Generator) -> tuple[int, ...]:
    length = int(torch.randint(3, 9, (1,), generator=g))
    return tuple(torch.randint(4, V, (length,), generator=g).tolist())


def _tensors(seqs):
    src = [list(s) + [EOS] for s in seqs]
    tgt = [[BOS] + list(s) + [EOS] for s in seqs]
    pad = lambda xs: torch.tensor([x + [PAD] * (max(map(len, xs)) - len(x)) for x in xs])  # noqa: E731
    return pad(src), pad(tgt)


def _exact_match(hyps, seqs) -> float:
    return sum(h.tokens == list(s) + [EOS] for h, s in zip(hyps, seqs)) / len(seqs)


@pytest.mark.slow
def test_tiny_transformer_learns_to_copy():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g_test = torch.Generator().manual_seed(1234)
        held_out = list(dict.fromkeys(_sample(g_test) for _ in range(200)))
        unseen = set(held_out)
        test_src, _ = _tensors(held_out)

        cfg = TransformerConfig.preset("tiny", vocab_size=V, max_len=64)
        torch.manual_seed(0)
        model = Transformer(cfg)
        model.eval()
        before = _exact_match(greedy_decode(model, test_src[:50], max_len=10), held_out[:50])
        assert before < 0.05  # an untrained model does not copy

        opt = torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.98), eps=1e-9)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / WARMUP, max(0.05, 1 - s / STEPS)))
        g = torch.Generator().manual_seed(0)
        model.train()
        for _ in range(STEPS):
            seqs = []
            while len(seqs) < BATCH:
                s = _sample(g)
                if s not in unseen:  # held-out sequences are never trained on
                    seqs.append(s)
            src, tgt = _tensors(seqs)
            loss, n_tokens = label_smoothed_loss(model(src, tgt[:, :-1]), tgt[:, 1:], 0.1, PAD)
            opt.zero_grad()
            (loss / n_tokens).backward()
            opt.step()
            sched.step()
        model.eval()

        greedy = greedy_decode(model, test_src)
        beam = [hs[0] for hs in beam_search(model, test_src, beam_size=4, length_penalty_alpha=0.6)]
        assert _exact_match(greedy, held_out) >= 0.95
        assert _exact_match(beam, held_out) >= 0.95
        assert all(h.finished for h in beam)
    finally:
        torch.set_num_threads(threads)
