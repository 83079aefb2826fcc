"""aiayn.serving.DecodeQueue: one job at a time, waiting free-running sentences decoded together, each caller its
own result or error; and aiayn.analysis.explain_batch, the batched path, against lone explain() calls.

The batch-equality tests use the shipped en-de checkpoint (a trained model: a random one ranks near-ties by noise);
the queue's mechanics use a stand-in for explain_batch that records each batch, and one test runs real threads on the
shipped model."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from aiayn import serving
from aiayn.analysis import explain, explain_batch
from aiayn.serving import DecodeQueue

SENTENCES = ["The cat sleeps on the sofa.", "Where is the nearest station?", "I would like a cup of coffee.",
             "My brother plays football every Sunday.", "Good morning."]
ATOL = 1e-5  # float32 rounding of a padded batch (measured: at most 2e-6 on the maps)


@pytest.fixture(scope="module")
def shipped(shipped_en_de):
    return shipped_en_de


@pytest.fixture(scope="module")
def lone(shipped):
    return {s: explain(shipped, s) for s in SENTENCES}


def assert_same_up_to_rounding(a, b, *, exact: bool = False):
    """Everything the app shows of two explained sentences: equal texts, pieces and n-best texts; scores, maps and
    next-piece probabilities equal (exactly, or to ATOL)."""
    assert a.text == b.text and a.src_tokens == b.src_tokens and a.output_tokens == b.output_tokens
    assert [t for t, _ in a.nbest] == [t for t, _ in b.nbest]
    close = (lambda x, y: np.array_equal(x, y)) if exact else (lambda x, y: np.allclose(x, y, atol=ATOL, rtol=0))
    assert close(np.array([s for _, s in a.nbest]), np.array([s for _, s in b.nbest]))
    for kind in ("encoder", "decoder", "cross"):
        x, y = a.attention.get(kind).numpy(), b.attention.get(kind).numpy()
        assert x.shape == y.shape and close(x, y), kind
    assert a.next_pieces.pieces == b.next_pieces.pieces
    assert close(a.next_pieces.probs, b.next_pieces.probs) and close(a.next_pieces.chosen_prob, b.next_pieces.chosen_prob)


# -- explain_batch ---------------------------------------------------------------------------------------------------
def test_a_lone_sentence_is_computed_as_before_bit_for_bit(shipped, lone):
    """explain() now runs through explain_batch; a batch of one must give exactly what the unbatched path gave: the
    beam search of translate(), the probabilities of a plain teacher-forced softmax written out here (no padding,
    no slicing; aiayn.calls takes exp of a log-softmax, so equal up to float32 rounding), and the queue must hand a
    lone caller that same result."""
    import torch

    s = SENTENCES[3]
    [one] = explain_batch(shipped, [s])
    assert one.batch_size == 1
    t = shipped.translate(s, beam_size=4, length_penalty=0.6, n_best=4, return_attention=True)
    assert one.text == t.text and one.nbest == t.nbest
    for kind in ("encoder", "decoder", "cross"):
        assert torch.equal(one.attention.get(kind), t.attention.get(kind).cpu()), kind
    cfg = shipped.cfg
    with torch.inference_mode():
        logits = shipped.model(torch.tensor([t.src_ids]), torch.tensor([[cfg.decoder_start_id] + t.output_ids[:-1]]))
    probs = torch.softmax(logits[0].float(), dim=-1).numpy()
    chosen = probs[np.arange(len(t.output_ids)), t.output_ids]
    np.testing.assert_allclose(one.next_pieces.chosen_prob, chosen.astype(np.float32), rtol=1e-5, atol=1e-9)
    assert_same_up_to_rounding(DecodeQueue(shipped).explain(s), lone[s], exact=True)


def test_explain_batch_equals_lone_calls_up_to_float_rounding(shipped, lone):
    out = explain_batch(shipped, SENTENCES)
    assert [t.source for t in out] == SENTENCES
    assert {t.batch_size for t in out} == {len(SENTENCES)}
    for t in out:
        assert_same_up_to_rounding(t, lone[t.source])
    # the sources differ in length, so the batch really was padded (not a trivially identical computation)
    assert len({len(t.src_tokens) for t in out}) > 1


def test_explain_batch_names_the_bad_text(shipped):
    with pytest.raises(ValueError, match="text 1"):
        explain_batch(shipped, ["Good morning.", "   "])


# -- the queue's mechanics (a stand-in records the batches) ----------------------------------------------------------
class Recorder:
    """Stands in for explain_batch: records each batch's texts and options, can hold a batch until released, and
    fails a batch that holds the text "bad"."""

    def __init__(self):
        self.batches: list[tuple[list[str], dict]] = []
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()

    def __call__(self, tr, texts, **opts):
        self.batches.append((list(texts), opts))
        self.started.set()
        assert self.release.wait(10)
        if "bad" in texts:
            raise ValueError(f"text {texts.index('bad')}: bad sentence")
        return [f"{t}|{opts['beam_size']}|{len(texts)}" for t in texts]


@pytest.fixture()
def recorder(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(serving, "explain_batch", rec)
    return rec


def _in_threads(calls):
    """Run each zero-argument callable in its own thread (started in order, 20 ms apart); returns their outcomes
    (result or exception) in order."""
    out: list = [None] * len(calls)

    def go(i, f):
        try:
            out[i] = f()
        except Exception as exc:  # noqa: BLE001 - compared by the test
            out[i] = exc

    threads = [threading.Thread(target=go, args=(i, f)) for i, f in enumerate(calls)]
    for t in threads:
        t.start()
        time.sleep(0.02)
    for t in threads:
        t.join(20)
        assert not t.is_alive()
    return out


def _behind_a_held_turn(q, recorder, calls):
    """``q.explain("first")`` takes the turn and is held (the stand-in waits) while ``calls`` arrive in threads of
    their own; released after 0.3 s. Returns the outcomes of ``calls``."""
    recorder.release.clear()
    holder = threading.Thread(target=lambda: q.explain("first"))
    holder.start()
    assert recorder.started.wait(5)
    threading.Timer(0.3, recorder.release.set).start()
    out = _in_threads(calls)
    holder.join(5)
    assert not holder.is_alive()
    return out


def test_a_lone_caller_runs_alone_and_at_once(recorder):
    q = DecodeQueue(object())
    assert q.explain("alone") == "alone|4|1"
    assert recorder.batches == [(["alone"], dict(beam_size=4, length_penalty=0.6, max_len=None, n_best=4, k=10))]
    assert q.stats.turns == 1 and q.stats.batched == 0


def test_callers_waiting_behind_a_turn_are_decoded_together(recorder):
    q = DecodeQueue(object())
    texts = [f"s{i}" for i in range(6)]
    out = _behind_a_held_turn(q, recorder, [lambda t=t: q.explain(t) for t in texts[1:]])
    assert out == [f"{t}|4|5" for t in texts[1:]]
    assert [b for b, _ in recorder.batches] == [["first"], texts[1:]]
    assert q.stats.largest_batch == 5 and q.stats.batched == 5 and q.stats.sentences == 6


def test_different_options_are_not_batched_and_max_batch_holds(recorder):
    q = DecodeQueue(object(), max_batch=2)
    calls = [lambda: q.explain("a"), lambda: q.explain("g", beam_size=1), lambda: q.explain("b"),
             lambda: q.explain("c"), lambda: q.explain("h", beam_size=1)]
    out = _behind_a_held_turn(q, recorder, calls)
    batches = [b for b, _ in recorder.batches]
    # oldest first; a batch takes the waiting jobs with the oldest one's options, at most max_batch of them
    assert batches == [["first"], ["a", "b"], ["g", "h"], ["c"]]
    assert out == ["a|4|2", "g|1|2", "b|4|2", "c|4|1", "h|1|2"]


def test_a_failing_sentence_fails_only_its_caller(recorder):
    q = DecodeQueue(object())
    out = _behind_a_held_turn(q, recorder, [lambda: q.explain("x"), lambda: q.explain("bad"), lambda: q.explain("y")])
    assert out[0] == "x|4|1" and out[2] == "y|4|1"  # the failed batch of three was run again one at a time
    assert isinstance(out[1], ValueError) and "bad sentence" in str(out[1])
    assert q.explain("after") == "after|4|1"  # the queue is not left busy


def test_run_is_exclusive_and_passes_errors_to_its_caller(recorder):
    q = DecodeQueue(object())
    inside = []

    def job(n):
        inside.append(n)
        assert len(inside) == 1, "two jobs ran at once"
        time.sleep(0.4)
        inside.pop()
        if n == 2:
            raise KeyError("mine")
        return n

    out = _in_threads([lambda n=n: q.run(job, n) for n in range(4)])
    assert out[0] == 0 and out[1] == 1 and out[3] == 3 and isinstance(out[2], KeyError)
    assert q.stats.turns == 4


def test_a_job_may_use_its_own_queue(recorder):
    q = DecodeQueue(object())
    assert q.run(lambda: q.explain("inner") + "/" + q.run(lambda: "nested")) == "inner|4|1/nested"
    assert q.explain("after") == "after|4|1"


def test_teacher_forced_and_ablated_requests_run_alone(recorder, monkeypatch):
    seen = []
    monkeypatch.setattr(serving, "explain", lambda tr, text, **kw: seen.append((text, kw["reference"])) or text)
    q = DecodeQueue(object())
    assert q.explain("s", reference="r") == "s"
    assert q.explain("t", head_mask=np.ones((3, 1, 1))) == "t"
    assert seen == [("s", "r"), ("t", None)] and recorder.batches == []


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "4"])
def test_max_batch_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="max_batch"):
        DecodeQueue(object(), max_batch=bad)


# -- real threads on the shipped model -------------------------------------------------------------------------------
def test_concurrent_callers_get_their_lone_results(shipped, lone):
    q = DecodeQueue(shipped)
    gate = threading.Event()
    holder = threading.Thread(target=lambda: q.run(gate.wait, 10))  # holds the turn while the callers arrive
    holder.start()
    threading.Timer(0.4, gate.set).start()
    out = _in_threads([lambda s=s: q.explain(s) for s in SENTENCES])
    holder.join(10)
    assert q.stats.largest_batch == len(SENTENCES)
    for s, t in zip(SENTENCES, out):
        assert t.source == s and t.batch_size == len(SENTENCES)
        assert_same_up_to_rounding(t, lone[s])


# -- the pages say when a sentence shared a batch ------------------------------------------------------------------
@pytest.mark.parametrize("shared", [1, 3])
def test_pages_say_when_a_sentence_was_decoded_in_a_batch(checkpoints, monkeypatch, shared):
    from dataclasses import replace

    from app_pages import open_page

    real = serving.explain_batch
    monkeypatch.setattr(serving, "explain_batch",
                        lambda tr, texts, **kw: [replace(t, batch_size=shared) for t in real(tr, texts, **kw)])
    at = open_page("pages/1_Translate.py", {"text": "Good morning."})
    assert not at.exception
    [time_metric] = [m for m in at.metric if m.label == "Time"]
    assert (f"({shared} in all)" in time_metric.proto.help) == (shared > 1)
    at = open_page("pages/2_Attention_Explorer.py", {"text": "Good evening."})
    assert not at.exception
    said = [m.value for m in at.markdown if "decoder positions" in m.value]
    assert len(said) == 1 and (f"a batch of {shared} sentences" in said[0]) == (shared > 1)


# -- background pieces: long work queued behind the class's requests ------------------------------------------------
def _until(predicate, what: str) -> None:
    """Wait until ``predicate()`` holds (a state another thread reaches; the deadline only stops a broken test
    from hanging)."""
    deadline = time.monotonic() + 20
    while not predicate():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.005)


def test_a_request_arriving_during_a_background_piece_goes_before_the_next_piece(recorder):
    q = DecodeQueue(object())
    gate, started = threading.Event(), threading.Event()
    log = recorder.batches  # everything below is logged inside its turn: the order the queue ran it in

    def piece(i):
        log.append(([f"piece {i}"], {}))
        if i == 0:
            started.set()
            assert gate.wait(10)
        return i

    worker = threading.Thread(target=lambda: [q.run_background(piece, i) for i in range(3)])
    worker.start()
    assert started.wait(10)  # piece 0 holds the turn
    student = threading.Thread(target=lambda: q.explain("student"))
    student.start()
    _until(lambda: q.waiting == (1, 0), "the student's sentence waits")
    gate.set()
    for t in (worker, student):
        t.join(10)
        assert not t.is_alive()
    assert [b for b, _ in log] == [["piece 0"], ["student"], ["piece 1"], ["piece 2"]]
    assert q.stats.background == 3 and q.stats.turns == 4 and q.waiting == (0, 0)


def test_background_pieces_wait_behind_every_normal_job_even_younger_ones(recorder):
    """A piece that arrived first still waits for normal jobs that arrived after it; pieces keep their own order."""
    q = DecodeQueue(object())
    log = recorder.batches
    recorder.release.clear()
    holder = threading.Thread(target=lambda: q.explain("first"))
    holder.start()
    assert recorder.started.wait(5)
    threads = []
    for name, submit, now_waiting in (("piece A", q.run_background, (0, 1)), ("piece B", q.run_background, (0, 2)),
                                      ("teacher-forced", q.run, (1, 2))):
        threads.append(threading.Thread(target=submit, args=(lambda n=name: log.append(([n], {})),)))
        threads[-1].start()
        _until(lambda w=now_waiting: q.waiting == w, f"{name} waits")
    recorder.release.set()
    for t in [holder, *threads]:
        t.join(10)
        assert not t.is_alive()
    assert [b for b, _ in log] == [["first"], ["teacher-forced"], ["piece A"], ["piece B"]]


def test_a_failing_background_piece_raises_in_its_caller_and_frees_the_queue(recorder):
    q = DecodeQueue(object())
    with pytest.raises(ZeroDivisionError):
        q.run_background(lambda: 1 / 0)
    assert q.run_background(lambda: "next") == "next" and q.explain("after") == "after|4|1"
    assert q.stats.background == 2


# -- the gathering window: a class arriving together shares one beam search ----------------------------------------
HOUR_MS = 3_600_000.0  # a window no test waits out: what ends a wait below is a full batch or the other bound


def test_a_lone_sentence_gathers_then_gets_exactly_the_lone_result(shipped, lone):
    """With a gathering window, a caller alone is still decoded alone, bit for bit explain(); it waits only
    gather_ms for a second sentence (the hour-long class gap and cap never apply to it)."""
    s = SENTENCES[1]
    q = DecodeQueue(shipped, gather_ms=5.0, gather_gap_ms=HOUR_MS, gather_cap_ms=HOUR_MS)
    assert_same_up_to_rounding(q.explain(s), lone[s], exact=True)
    assert q.stats.largest_batch == 1 and q.stats.batched == 0


def test_sentences_arriving_within_the_window_share_one_batch(recorder):
    """The first caller finds the queue idle and gathers; the window never ends on its own here, so the batch runs
    when it is full: all three in one beam search, none decoded alone first. A request with other options does not
    fill the batch; it waits for the next turn."""
    q = DecodeQueue(object(), max_batch=3, gather_ms=HOUR_MS, gather_gap_ms=HOUR_MS, gather_cap_ms=HOUR_MS)
    out: dict = {}
    first = threading.Thread(target=lambda: out.setdefault("a", q.explain("a")))
    first.start()
    _until(lambda: q.waiting == (1, 0), "the first sentence gathers")
    other = threading.Thread(target=lambda: out.setdefault("g", q.explain("g", beam_size=1)))
    other.start()
    _until(lambda: q.waiting == (2, 0), "a sentence with other options waits")
    assert recorder.batches == []  # still gathering: a batch of one would have run by now without the window
    rest = [threading.Thread(target=lambda t=t: out.setdefault(t, q.explain(t))) for t in ("b", "c")]
    for t in rest:
        t.start()
    for t in [first, other, *rest]:
        t.join(20)
        assert not t.is_alive()
    assert [b for b, _ in recorder.batches] == [["a", "b", "c"], ["g"]]
    assert out == {"a": "a|4|3", "b": "b|4|3", "c": "c|4|3", "g": "g|1|1"}
    assert q.stats.largest_batch == 3 and q.stats.batched == 3


def test_the_cap_bounds_the_gathering_wait(recorder):
    """Windows that never end on their own (an hour): the cap ends the wait, the lone sentence is decoded."""
    q = DecodeQueue(object(), gather_ms=HOUR_MS, gather_gap_ms=HOUR_MS, gather_cap_ms=1.0)
    done = threading.Thread(target=lambda: q.explain("alone"))
    done.start()
    done.join(20)
    assert not done.is_alive() and [b for b, _ in recorder.batches] == [["alone"]]


def test_jobs_that_are_not_sentences_never_gather(recorder):
    """run() and background pieces (and teacher-forced / ablated sentences, which run through run()) take the turn
    at once: with an hour-long window and cap, they still return."""
    q = DecodeQueue(object(), gather_ms=HOUR_MS, gather_gap_ms=HOUR_MS, gather_cap_ms=HOUR_MS)
    worker = threading.Thread(target=lambda: (q.run(lambda: 1), q.run_background(lambda: 2)))
    worker.start()
    worker.join(20)
    assert not worker.is_alive() and q.stats.turns == 2 and q.stats.background == 1


# -- announced sentences: the app says which page runs will ask for one -------------------------------------------
def _announced_caller(q, text, go: threading.Event, out: dict) -> threading.Thread:
    """A thread that announces a sentence at once, then submits ``text`` once ``go`` is set (its page set-up)."""
    def run():
        q.announcements.announce()
        assert go.wait(20)
        out[text] = q.explain(text)

    return threading.Thread(target=run)


def test_a_gathering_sentence_waits_for_an_announced_one_past_every_window(recorder):
    """Windows of 1 ms would decode the first sentence alone at once; an announced second sentence still on its way
    holds it (up to the hour-long cap), and both share one batch, which runs as soon as nothing is on its way."""
    q = DecodeQueue(object(), gather_ms=1.0, gather_gap_ms=HOUR_MS, gather_cap_ms=HOUR_MS, gather_settle_ms=1.0)
    go, out = threading.Event(), {}
    second = _announced_caller(q, "b", go, out)
    second.start()
    _until(lambda: len(q.announcements) == 1, "the second sentence is announced")
    now = threading.Event()
    now.set()
    first = _announced_caller(q, "a", now, out)  # announced too: with an unannounced one the gap would apply
    first.start()
    _until(lambda: q.waiting == (1, 0), "the first sentence gathers")
    time.sleep(0.05)  # fifty 1 ms windows
    assert recorder.batches == []  # without the announcement a batch of one would have run
    go.set()
    for t in (first, second):
        t.join(20)
        assert not t.is_alive()
    assert [b for b, _ in recorder.batches] == [["a", "b"]] and out == {"a": "a|4|2", "b": "b|4|2"}
    assert len(q.announcements) == 0  # the job took its announcement back


def test_a_withdrawn_announcement_stops_the_wait(recorder):
    """A run that announced and then found its sentence elsewhere (a cache) withdraws: the gathering sentence is
    decoded without it."""
    q = DecodeQueue(object(), gather_ms=1.0, gather_gap_ms=HOUR_MS, gather_cap_ms=HOUR_MS)
    announced, withdraw = threading.Event(), threading.Event()

    def other_run():
        q.announcements.announce()
        announced.set()
        assert withdraw.wait(20)
        assert q.announcements.withdraw() and not q.announcements.withdraw()

    other = threading.Thread(target=other_run)
    other.start()
    assert announced.wait(20)
    first = threading.Thread(target=lambda: q.explain("a"))
    first.start()
    _until(lambda: q.waiting == (1, 0), "the first sentence gathers")
    time.sleep(0.05)
    assert recorder.batches == []
    withdraw.set()
    for t in (first, other):
        t.join(20)
        assert not t.is_alive()
    assert [b for b, _ in recorder.batches] == [["a"]]


def test_announced_sentences_settle_instead_of_waiting_the_gap(recorder):
    """Once every waiting sentence came announced and none is on its way, the batch waits gather_settle_ms, not the
    (hour-long) gap between arrivals; an unannounced sentence keeps the gap (here: the cap ends it)."""
    q = DecodeQueue(object(), gather_ms=HOUR_MS, gather_gap_ms=HOUR_MS, gather_cap_ms=HOUR_MS, gather_settle_ms=1.0)
    go, out = threading.Event(), {}
    callers = [_announced_caller(q, t, go, out) for t in ("a", "b")]
    for t in callers:
        t.start()
    _until(lambda: len(q.announcements) == 2, "both are announced")
    go.set()
    for t in callers:
        t.join(20)
        assert not t.is_alive()
    assert sorted(b for batch, _ in recorder.batches for b in batch) == ["a", "b"] and len(recorder.batches) == 1

    q2 = DecodeQueue(object(), gather_ms=1.0, gather_gap_ms=HOUR_MS, gather_cap_ms=300.0, gather_settle_ms=1.0)
    go2 = threading.Event()
    announced = _announced_caller(q2, "c", go2, out)
    announced.start()
    _until(lambda: len(q2.announcements) == 1, "c is announced")
    plain = threading.Thread(target=lambda: out.setdefault("d", q2.explain("d")))  # never announced
    plain.start()
    _until(lambda: q2.waiting == (1, 0), "d gathers")
    go2.set()
    _until(lambda: q2.waiting == (2, 0), "c joins")
    time.sleep(0.05)  # fifty settle windows: d was not announced, so the gap (an hour) applies until the cap
    assert len(recorder.batches) == 1
    for t in (announced, plain):
        t.join(20)
        assert not t.is_alive()
    assert [sorted(b) for b, _ in recorder.batches[1:]] == [["c", "d"]]


def test_an_old_announcement_no_longer_counts():
    ann = serving.Announcements(ttl_s=-1.0)  # every announcement is already too old
    ann.announce()
    assert len(ann) == 0 and not ann.withdraw()
    fresh = serving.Announcements()
    fresh.announce()
    fresh.announce()  # renewed, still one
    assert len(fresh) == 1 and fresh.withdraw() and len(fresh) == 0


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), True, "30"])
def test_the_gathering_window_must_be_a_finite_number(bad):
    for name in ("gather_ms", "gather_gap_ms", "gather_cap_ms", "gather_settle_ms"):
        with pytest.raises(ValueError, match=name):
            DecodeQueue(object(), **{name: bad})


def test_the_server_reads_its_gathering_window_from_the_environment(tiny_checkpoints, monkeypatch):
    """AIAYN_GATHER_MS sets the window of the server's queues (default DEFAULT_GATHER_MS, 0 = none); a bad value is
    a clear ModelUnavailable naming the variable."""
    import streamlit as st

    from aiayn.app import models

    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(tiny_checkpoints))
    try:
        monkeypatch.delenv(models.GATHER_ENV, raising=False)
        st.cache_resource.clear()
        assert models.decode_queue("en-de").gather_s == serving.DEFAULT_GATHER_MS / 1000.0
        for raw, seconds in (("0", 0.0), ("12.5", 0.0125)):
            monkeypatch.setenv(models.GATHER_ENV, raw)
            st.cache_resource.clear()
            assert models.decode_queue("en-de").gather_s == seconds
        for bad in ("-1", "soon", "nan", "inf"):
            monkeypatch.setenv(models.GATHER_ENV, bad)
            st.cache_resource.clear()
            with pytest.raises(models.ModelUnavailable, match=models.GATHER_ENV):
                models.decode_queue("en-de")
    finally:
        st.cache_resource.clear()


def test_an_announcement_for_another_model_does_not_hold_the_class():
    """Announcements name their queue (the app: the checkpoint's path): a gathering sentence of one queue waits for
    its own and for keyless ones, never for another queue's; a queue without a key waits for every one."""
    ann = serving.Announcements()
    q_opus = DecodeQueue(object(), announcements=ann, announce_key="opus")
    q_small = DecodeQueue(object(), announcements=ann, announce_key="small")
    q_any = DecodeQueue(object(), announcements=ann)
    other = threading.Event()
    done = threading.Event()

    def visitor(key):
        ann.announce(key)
        other.set()
        assert done.wait(20)
        ann.withdraw()

    t = threading.Thread(target=visitor, args=("small",))
    t.start()
    assert other.wait(20)
    counts = {name: ann.count(q.announce_key) for name, q in (("opus", q_opus), ("small", q_small), ("any", q_any))}
    assert counts == {"opus": 0, "small": 1, "any": 1}
    ann.announce(None)  # this thread cannot tell its model: every queue waits for it
    assert (ann.count("opus"), ann.count("small"), len(ann)) == (1, 2, 2)
    assert ann.withdraw()
    done.set()
    t.join(20)
    assert not t.is_alive() and len(ann) == 0


def test_a_gathering_sentence_is_not_held_by_another_queues_announcement(recorder):
    """With 1 ms windows and an hour-long cap, a sentence of queue "opus" is decoded at once although a visitor of
    queue "small" announced one and never comes."""
    ann = serving.Announcements()
    q = DecodeQueue(object(), gather_ms=1.0, gather_gap_ms=1.0, gather_cap_ms=HOUR_MS, announcements=ann,
                    announce_key="opus")
    hold, release = threading.Event(), threading.Event()

    def visitor():
        ann.announce("small")
        hold.set()
        assert release.wait(20)
        ann.withdraw()

    v = threading.Thread(target=visitor)
    v.start()
    assert hold.wait(20)
    first = threading.Thread(target=lambda: q.explain("a"))
    first.start()
    first.join(20)
    assert not first.is_alive() and [b for b, _ in recorder.batches] == [["a"]]
    release.set()
    v.join(20)


def test_a_batched_sentences_result_owns_only_its_own_maps(tiny_translator):
    """A class's sentences are decoded as one batch, then each session's result is pickled into the app's cache
    (st.cache_data): each result's maps must be its own copies, not views that keep (and pickle) the whole batch's
    maps, which made a class of 28 pickle about 28 times what it shows."""
    import pickle

    texts = ["I have no time.", "The house is small and the garden is very big today.", "Good morning!",
             "He reads the book that she gave him yesterday evening."]
    lone = explain_batch(tiny_translator, texts[2:3], beam_size=2, max_len=6)[0]
    batch = explain_batch(tiny_translator, texts, beam_size=2, max_len=6)
    for t in batch:
        for name, value in t.attention._tensors():
            own = value.numel() * value.element_size()
            assert value.untyped_storage().nbytes() == own, (name, value.shape, value.untyped_storage().nbytes(), own)
    # pickled, the batched result of one sentence is about as large as the same sentence decoded alone
    assert len(pickle.dumps(batch[2])) < 1.5 * len(pickle.dumps(lone)) + 4096


def test_sentences_are_encoded_while_the_class_gathers(shipped, lone, monkeypatch):
    """While the first caller gathers, the sentences that came are encoded (Translator.encode_ahead) before the batch
    runs, each exactly once (the one that fills the batch: in it); each caller gets its lone result (to rounding)."""
    encoded: list[str] = []
    real = type(shipped).encode_ahead
    monkeypatch.setattr(type(shipped), "encode_ahead", lambda self, texts: (encoded.extend(texts), real(self, texts))[1])
    q = DecodeQueue(shipped, max_batch=len(SENTENCES), gather_ms=HOUR_MS, gather_gap_ms=HOUR_MS,
                    gather_cap_ms=HOUR_MS)
    out = _in_threads([lambda s=s: q.explain(s) for s in SENTENCES])
    assert len(set(encoded)) == len(encoded) >= len(SENTENCES) - 1 and set(encoded) <= set(SENTENCES)
    assert q.stats.largest_batch == len(SENTENCES)
    for s, t in zip(SENTENCES, out):
        assert t.batch_size == len(SENTENCES)
        assert_same_up_to_rounding(t, lone[s])


def test_a_sentence_encoded_ahead_alone_reads_exactly_its_lone_encoding(shipped, lone):
    """encode_ahead of one text is bit for bit the lone call's encoder: decoded in a batch over it, the sentence's
    encoder maps equal the lone call's exactly (a padded batch's agree only to float32 rounding)."""
    texts = [SENTENCES[0], SENTENCES[3]]
    out = explain_batch(shipped, texts, encoded=[shipped.encode_ahead([t])[0] for t in texts])
    for s, t in zip(texts, out):
        assert_same_up_to_rounding(t, lone[s])
        assert np.array_equal(t.attention.get("encoder").numpy(), lone[s].attention.get("encoder").numpy())


def test_a_sentence_that_cannot_be_encoded_ahead_gets_its_own_error(shipped):
    """encode_ahead failing while gathering (an empty text) leaves the sentence to the batch, which gives its caller
    the clear error; the others get their translations."""
    q = DecodeQueue(shipped, max_batch=2, gather_ms=HOUR_MS, gather_gap_ms=HOUR_MS, gather_cap_ms=HOUR_MS)
    out = _in_threads([lambda: q.explain("Good morning."), lambda: _error_of(lambda: q.explain("   "))])
    assert out[0].text and isinstance(out[1], ValueError) and "empty" in str(out[1]).lower()


def _error_of(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the test looks at it
        return exc
    return None


def test_encoded_sentences_must_match_and_need_no_head_mask(shipped):
    """translate_batch's encoded: one per text, and never with a head mask (its encoder would differ)."""
    e = shipped.encode_ahead(["Good morning."])[0]
    with pytest.raises(ValueError, match="one encoder output"):
        shipped.translate_batch(["Good morning.", "Thank you."], encoded=[e])
    mask = np.ones((3, shipped.cfg.n_layers, shipped.cfg.n_heads), dtype=np.float32)
    mask[0, 0, 0] = 0.0
    with pytest.raises(ValueError, match="head_mask"):
        shipped.translate_batch(["Good morning."], encoded=[e], head_mask=mask)
    with pytest.raises(ValueError, match="not the encoder output of src"):
        from aiayn.decoding import beam_search
        from aiayn import calls
        src = calls.batch(shipped.cfg, [shipped.encode_source("Thank you very much.").ids], shipped.device)
        beam_search(shipped.model, src, encoded=e)


def test_the_time_of_a_gathered_batch_counts_its_encoding_ahead(shipped, monkeypatch):
    """A sentence encoded while the batch gathered: its Translation.elapsed_ms is the batch's beam search plus that
    encoder run (here made 400 ms slower than itself), not the beam search alone."""
    real = type(shipped).encode_ahead

    def slow(self, texts):
        time.sleep(0.4)
        return real(self, texts)

    monkeypatch.setattr(type(shipped), "encode_ahead", slow)
    q = DecodeQueue(shipped, gather_ms=5.0, gather_gap_ms=HOUR_MS, gather_cap_ms=HOUR_MS)
    t0 = time.perf_counter()
    t = q.explain(SENTENCES[2])
    wall_ms = (time.perf_counter() - t0) * 1000.0
    assert 400.0 <= t.elapsed_ms <= wall_ms


def test_a_loaded_model_is_frozen_out_of_the_garbage_collectors_full_collections(tiny_checkpoints, monkeypatch):
    """Once the app has loaded a model, what exists (torch, Streamlit, the model) is frozen (gc.freeze): a full
    collection no longer walks it, which held the GIL for ~140 ms in a class on the paper-size model. Objects made
    afterwards (a session's work) are still tracked and collected."""
    import gc

    import streamlit as st

    from aiayn.app import models

    monkeypatch.setenv("AIAYN_CHECKPOINTS", str(tiny_checkpoints))
    gc.unfreeze()
    st.cache_resource.clear()
    try:
        tr = models.load_translator("en-de")
        assert gc.get_freeze_count() > 0
        tracked = {id(o) for o in gc.get_objects()}
        assert id(tr.model) not in tracked and id(tr.model.decoder_layers[0]) not in tracked
        later = [object(), {}]  # a container made after the load
        assert gc.is_tracked(later) and id(later) in {id(o) for o in gc.get_objects()}
    finally:
        st.cache_resource.clear()
