"""One model serving many sessions at once: :class:`DecodeQueue` runs the model's work one job at a time and
decodes the free-running sentences that are waiting together, in one beam search (dynamic batching). Not a paper
section: the serving job (a class of 30 on one 2-core CPU server).

**Why.** A Streamlit server runs each session's script in a thread of its own. Thirty beam searches side by side
each give up and take back the GIL at every torch operation: on the 2-core CPU the server then spent a third of its
CPU time in the kernel switching threads, and a student cost more than twice the server CPU time of a lone one. Run
one at a time, the model stops fighting itself; a sentence decoded in a batch with the others waiting costs a
fraction of its CPU time alone (finished sentences leave the batch, :mod:`aiayn.decoding`). The measurements, before
and after: docs/benchmarks.md, "Classroom load test, third round".

**How (leader and followers; no thread of its own).** A caller appends its job to the queue. If no job is running,
the caller takes the turn and runs the oldest waiting job together with every other waiting job that can share its
batch (free-running, same decoding options, no head mask), up to ``max_batch``; otherwise it waits. When its batch
is done, the runner hands each job its result and passes the turn to the oldest job still waiting (a background
piece only when no normal job waits, below).

**Gathering window.** A class's requests arrive within a fraction of a second of each other. Were the first one
decoded at once, alone, the others would wait for it and run as a second batch: on the paper-size model (a
58,101-piece vocabulary) that lone decode took about 40 % as long as the batch after it (docs/benchmarks.md,
"Classroom on the paper-size model, second round"). So a free-running sentence
that finds the queue idle waits a moment before it runs: ``gather_ms`` for a second sentence (default
:data:`DEFAULT_GATHER_MS`: what a lone user pays); once others have come, until none has arrived for
``gather_gap_ms`` (:data:`DEFAULT_GATHER_GAP_MS`: a class's requests come in bursts); never longer than its batch
takes to fill or ``gather_cap_ms`` (:data:`DEFAULT_GATHER_CAP_MS`). The sentences that arrive meanwhile share its
beam search. Other jobs (:meth:`DecodeQueue.run`, background pieces, teacher-forced, ablated or prefix-forced
sentences) never gather; a caller handed the turn by the previous runner does not either (the others gathered
while that batch ran). The app's window is ``$AIAYN_GATHER_MS`` (:func:`aiayn.app.models.serving_gather_ms`).

**Encoding while gathering.** The runner that gathers does not only wait: each time it wakes, it encodes the
sentences that have come and are not encoded yet, together (:meth:`Translator.encode_ahead`), with the lock let go so
that others keep joining. While a class gathers, the sessions' scripts keep one core busy and the runner's would
idle; the encoder (about a sixth of a paper-size class's batch) is then mostly done when the batch starts, and the
batch decodes over the stacked encodings (:meth:`aiayn.model.transformer.EncoderOutput.stack`; the sentence that
fills the batch, or one whose encoding failed, is encoded in the batch). The batch's time counts those encoder runs.
Measured: docs/benchmarks.md, "Classroom on the paper-size model, sixth round".

**Announced sentences.** A window guesses; the app can say. A page run that will ask for a sentence announces it
(:meth:`Announcements.announce`, in its thread) when it starts, before its page set-up (a class's sessions share one
GIL for it); its job, when it comes, takes the announcement back
(:meth:`Announcements.withdraw` when the run ends without one, e.g. a cached sentence). A gathering sentence waits
while announced sentences are on their way (up to ``gather_cap_ms``), and once every sentence waiting came
announced and none is left on its way, only ``gather_settle_ms`` after the last arrival
(:data:`DEFAULT_GATHER_SETTLE_MS`, instead of ``gather_gap_ms``: a session whose run has not started yet) or, alone,
``gather_ms``. So a second sentence a few milliseconds past ``gather_ms`` under load no longer leaves the first to
be decoded alone, and the class's batch starts sooner after its last sentence. Sentences of callers that never
announce keep the windows above. An announcement older than :data:`ANNOUNCEMENT_TTL_S` no longer counts (a run
that ended without taking it back cannot hold the queue). The app shares one :class:`Announcements` among its
queues (:func:`aiayn.app.models.announcements`); each announcement names its checkpoint, so a class on one model
never waits for a visitor of another. Measured: docs/benchmarks.md, "Classroom on the paper-size model,
third round".

A caller that is decoded alone gets what a lone :func:`aiayn.analysis.explain` returns, bit for bit (a batch of
one). In a batch, sources are padded, so maps and scores differ from a lone call by float32 rounding (measured at most 2e-6 on the maps, 5e-7 on the scores; texts
and n-best lists were the same for all 30 sentences measured, since only a near-exact tie between two hypotheses
could flip; ``tests/test_serving.py`` holds a batch to 1e-5 and its texts to equality); ``Translation.batch_size``
says how many sentences shared the beam search and ``elapsed_ms`` is that batch's wall time.

A batch that fails (one bad sentence) is run again one job at a time, so each caller gets its own result or its own
error. Nothing is stored between calls except the counters of :attr:`DecodeQueue.stats`.

**Background pieces.** Long work that one visitor starts (the head sweep of a checkpoint without a stored one: some
hundred model runs) must not hold the class's turn. :meth:`DecodeQueue.run_background` runs one small piece of such
work (one model run) with a lower priority: it gets the turn only when no normal job (a sentence, a :meth:`run`)
waits, and a normal job that arrives while a piece runs is served before the next piece. A class's request thus
waits for at most one piece. The long job itself, its progress and its cancellation live in :mod:`aiayn.jobs`.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Hashable

from .analysis.explain import explain, explain_batch

if TYPE_CHECKING:  # annotations only: aiayn.translator imports torch
    from .translator import Translation, Translator

#: the default largest batch: a class of 30 fits in one. Without the browser probes, one batch of 28 answered 30
#: students sooner than batches of at most 16, where the last students waited for a second batch; with them the
#: two were within noise (docs/benchmarks.md)
DEFAULT_MAX_BATCH = 32
#: the default gathering window (ms): how long a sentence that finds the queue idle waits for a second one (what a
#: lone user pays); a class's second request came within 3-26 ms of its first (docs/benchmarks.md)
DEFAULT_GATHER_MS = 30.0
#: once two or more sentences wait, the window restarts at each arrival and lasts this long (ms): a class's requests
#: came in bursts up to ~230 ms apart, so a shorter wait split the class into two batches (docs/benchmarks.md)
DEFAULT_GATHER_GAP_MS = 300.0
#: the longest a sentence that found the queue idle gathers (ms), however steadily others keep arriving
DEFAULT_GATHER_CAP_MS = 1000.0
#: once every waiting sentence came announced and none is on its way, the wait after the last arrival (ms): room for
#: a session whose run has not started yet (see the module docstring)
DEFAULT_GATHER_SETTLE_MS = 100.0
#: seconds after which an announcement (:meth:`Announcements.announce`) no longer holds a gathering sentence
ANNOUNCEMENT_TTL_S = 10.0
#: how often (s) a gathering sentence looks again at the announcements (a withdrawal wakes no one)
_ANNOUNCEMENT_POLL_S = 0.01


class Announcements:
    """Threads that said they will soon submit a job to a :class:`DecodeQueue` (a page run that asks for a
    sentence), so that a gathering sentence waits for them (see the module docstring). Thread-safe; one object may
    serve several queues: each announcement names the queue it is for (its ``key``, e.g. a checkpoint path), so the
    class of one model never waits for a visitor of another.

    Args:
        ttl_s: seconds after which an announcement no longer counts.
    """

    def __init__(self, ttl_s: float = ANNOUNCEMENT_TTL_S) -> None:
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._by_thread: dict[int, tuple[float, Hashable]] = {}  # thread id -> (time.monotonic(), key)

    def announce(self, key: Hashable = None) -> None:
        """The calling thread will soon submit a job to the queue of ``key`` (None: to a queue it cannot name, which
        every queue then waits for). Its next job takes the announcement back; :meth:`withdraw` does when no job
        comes. A second call before either replaces it."""
        with self._lock:
            self._by_thread[threading.get_ident()] = (time.monotonic(), key)

    def withdraw(self) -> bool:
        """Take back the calling thread's announcement; True if it had one."""
        with self._lock:
            return self._by_thread.pop(threading.get_ident(), None) is not None

    def count(self, key: Hashable = None) -> int:
        """How many announced jobs are on their way to the queue of ``key``: those announced with ``key`` or with
        no key; ``key`` None counts every one. Announcements older than ``ttl_s`` are dropped."""
        with self._lock:
            old = time.monotonic() - self.ttl_s
            for ident in [i for i, (t, _) in self._by_thread.items() if t < old]:
                del self._by_thread[ident]
            return sum(key is None or k is None or k == key for _, k in self._by_thread.values())

    def __len__(self) -> int:
        """How many announced jobs are on their way, to any queue (:meth:`count` with no key)."""
        return self.count()


@dataclass
class _Job:
    """One caller's work: a batchable sentence (``key`` not None: the decoding options) or a callable ``fn``
    (``background``: a piece of long work, run only when no other job waits)."""

    key: tuple | None
    text: str | None = None
    fn: Callable[[], Any] | None = None
    background: bool = False
    announced: bool = False  # its caller had announced it (Announcements.announce)
    encoded: Any = None  # its encoder output, made while the batch gathered (Translator.encode_ahead), or None
    encoding: bool = False  # the gathering runner has taken it to encode (done, or failed: then encoded stays None)
    encode_run: tuple[float, float] | None = None  # (start, wall ms) of the encoder run that encoded it ahead
    event: threading.Event = field(default_factory=threading.Event)
    done: bool = False
    result: Any = None
    error: BaseException | None = None

    def finish(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error, self.done = result, error, True
        self.event.set()

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


@dataclass
class QueueStats:
    """Counters of a :class:`DecodeQueue` since it was made: ``turns`` (batches and single jobs run),
    ``sentences`` (batchable sentences decoded), ``largest_batch``, ``batched`` (sentences that shared a beam
    search with at least one other) and ``background`` (pieces of background work run, also counted in ``turns``)."""

    turns: int = 0
    sentences: int = 0
    largest_batch: int = 0
    batched: int = 0
    background: int = 0


class DecodeQueue:
    """The model's work for many callers (threads), one job at a time, free-running sentences batched.

    Args:
        translator: the :class:`~aiayn.translator.Translator` every job uses.
        max_batch: most sentences in one beam search (``>= 1``; 1 = never batch, still one job at a time).
        gather_ms: the gathering window (milliseconds, ``>= 0``; 0 = none): a free-running sentence that finds the
            queue idle waits up to ``gather_ms`` for a second one; once two or more wait, until none has arrived
            for ``gather_gap_ms``; at most ``gather_cap_ms`` in all, and no longer than its batch takes to fill.
            Then it is decoded with those that came meanwhile.
        gather_gap_ms: the window between arrivals once two or more sentences wait (milliseconds, ``>= 0``).
        gather_cap_ms: the longest such a wait (milliseconds, ``>= 0``).
        gather_settle_ms: the window between arrivals instead of ``gather_gap_ms`` once every waiting sentence came
            announced and none is on its way (milliseconds, ``>= 0``).
        announcements: the :class:`Announcements` a gathering sentence waits for (shared by the app's queues);
            None: a new one (nothing is announced unless a caller uses :attr:`announcements`).
        announce_key: the key announcements for this queue carry (:meth:`Announcements.announce`; the app: the
            checkpoint's path); a gathering sentence waits only for those and for keyless ones. None: for every one.

    Raises:
        ValueError: ``max_batch`` is not a positive integer; ``gather_ms``, ``gather_gap_ms``, ``gather_cap_ms`` or
            ``gather_settle_ms`` is not a finite number >= 0.
    """

    def __init__(self, translator: "Translator", *, max_batch: int = DEFAULT_MAX_BATCH,
                 gather_ms: float = DEFAULT_GATHER_MS, gather_gap_ms: float = DEFAULT_GATHER_GAP_MS,
                 gather_cap_ms: float = DEFAULT_GATHER_CAP_MS, gather_settle_ms: float = DEFAULT_GATHER_SETTLE_MS,
                 announcements: Announcements | None = None, announce_key: Hashable = None) -> None:
        if not isinstance(max_batch, int) or isinstance(max_batch, bool) or max_batch < 1:
            raise ValueError(f"max_batch must be a positive integer, got {max_batch!r}")
        for name, value in (("gather_ms", gather_ms), ("gather_gap_ms", gather_gap_ms),
                            ("gather_cap_ms", gather_cap_ms), ("gather_settle_ms", gather_settle_ms)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                raise ValueError(f"{name} must be a finite number of milliseconds >= 0, got {value!r}")
        self.translator = translator
        self.max_batch = max_batch
        self.gather_s, self.gather_gap_s, self.gather_cap_s = gather_ms / 1e3, gather_gap_ms / 1e3, gather_cap_ms / 1e3
        self.gather_settle_s = gather_settle_ms / 1e3
        self.announcements = Announcements() if announcements is None else announcements
        self.announce_key = announce_key
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)  # notified when a batchable sentence joins the queue
        self._last_arrival = 0.0  # time.monotonic() of the latest batchable sentence
        self._waiting: deque[_Job] = deque()
        self._background: deque[_Job] = deque()  # pieces of long work: taken only when _waiting is empty
        self._busy = False
        self._runner: int | None = None  # thread id of the caller holding the turn
        self._stats = QueueStats()

    @property
    def stats(self) -> QueueStats:
        """A copy of the counters (:class:`QueueStats`)."""
        with self._lock:
            return QueueStats(**vars(self._stats))

    @property
    def waiting(self) -> tuple[int, int]:
        """``(normal jobs, background pieces)`` waiting for the turn now (the job running is not counted)."""
        with self._lock:
            return len(self._waiting), len(self._background)

    def explain(self, text: str, *, reference: str | None = None, beam_size: int = 4, length_penalty: float = 0.6,
                max_len: int | None = None, n_best: int = 4, k: int = 10, head_mask: Any = None,
                prefix: str | None = None) -> "Translation":
        """:func:`aiayn.analysis.explain` of ``text`` (same arguments, same result up to float32 rounding when
        batched: see the module's docstring), in its turn. Free-running sentences without a head mask are decoded
        together with the other such sentences waiting with the same options; teacher-forced, ablated or
        prefix-forced (``prefix``) ones run alone.

        Raises:
            ValueError: as :func:`aiayn.analysis.explain` (empty text or reference, bad beam settings, bad mask).
        """
        if reference is None and head_mask is None and prefix is None:
            key = (int(beam_size), float(length_penalty), None if max_len is None else int(max_len), int(n_best),
                   int(k))
            return self._submit(_Job(key=key, text=text))
        return self.run(explain, self.translator, text, reference=reference, beam_size=beam_size,
                        length_penalty=length_penalty, max_len=max_len, n_best=n_best, k=k, head_mask=head_mask,
                        prefix=prefix)

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` in its turn (no other job of this queue runs meanwhile); returns its result or
        raises its exception. ``fn`` may itself use this queue (its jobs then run at once, in the same turn)."""
        return self._submit(_Job(key=None, fn=lambda: fn(*args, **kwargs)))

    def run_background(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` as a piece of background work: like :meth:`run` (exclusive, its result or its
        exception), but its turn comes only when no normal job waits; background pieces among themselves take turns
        oldest first. Keep a piece small (one model run): a normal job that arrives while it runs waits for it."""
        return self._submit(_Job(key=None, fn=lambda: fn(*args, **kwargs), background=True))

    # -- the turn -------------------------------------------------------------------------------------------------
    def _submit(self, job: _Job) -> Any:
        if self._runner == threading.get_ident():  # a job of this queue asking for more: it already has the turn
            self._execute([job])
            return job.outcome()
        with self._lock:
            job.announced = self.announcements.withdraw()
            (self._background if job.background else self._waiting).append(job)
            lead = not self._busy
            self._busy = True
            if job.key is not None:
                self._last_arrival = time.monotonic()
                self._arrived.notify_all()
        if not lead:
            job.event.wait()
            if job.done:
                return job.outcome()
            # not done: the previous runner handed this job the turn (it is the oldest waiting one)
        elif job.key is not None:
            self._gather(job.key)
        self._runner = threading.get_ident()
        try:
            while not job.done:
                with self._lock:
                    batch = self._take()
                self._execute(batch)
        finally:
            self._runner = None
            self._pass_turn()
        return job.outcome()

    def _gather(self, key: tuple) -> None:
        """The gathering window of a sentence that found the queue idle: while announced sentences are on their way,
        wait for them; otherwise wait ``gather_s`` for a second sentence, then while others keep arriving (each
        within ``gather_gap_s`` of the last, ``gather_settle_s`` when all came announced). Never past a full batch or
        ``gather_cap_s``."""
        if self.gather_s <= 0 or self.gather_cap_s <= 0 or self.max_batch == 1:
            return
        with self._lock:
            cap = time.monotonic() + self.gather_cap_s
            while (n := sum(j.key == key for j in self._waiting)) < self.max_batch:
                if self._encode_arrivals(key):  # meanwhile, the encoder of the sentences that came (lock let go)
                    continue
                now = time.monotonic()
                if self.announcements.count(self.announce_key):  # announced sentences on their way: wait (look again)
                    until = min(now + _ANNOUNCEMENT_POLL_S, cap)
                    if now >= cap:
                        return
                else:
                    settled = all(j.announced for j in self._waiting if j.key == key)
                    gap = self.gather_s if n < 2 else (self.gather_settle_s if settled else self.gather_gap_s)
                    until = min(self._last_arrival + gap, cap)
                    if now >= until:
                        return
                self._arrived.wait(until - now)

    def _encode_arrivals(self, key: tuple) -> bool:
        """Encode the waiting sentences with ``key`` not encoded yet, together (:meth:`Translator.encode_ahead`), the
        lock let go meanwhile so that others can join; False when there are none. Called with the lock held, by the
        runner. Why: while a class gathers, the sessions' scripts keep one core busy and the other would idle; the
        encoder (about a sixth of a paper-size class's batch) is then mostly done before the batch starts. Sentences
        whose encoding fails are left to the batch, which gives each caller its own error."""
        jobs = [j for j in self._waiting if j.key == key and not j.encoding]
        if not jobs:
            return False
        for j in jobs:
            j.encoding = True
        self._lock.release()
        try:
            t0 = time.perf_counter()
            encoded = self.translator.encode_ahead([j.text for j in jobs])
            run = (t0, (time.perf_counter() - t0) * 1000.0)  # its start tells runs apart
            for j, e in zip(jobs, encoded):
                j.encoded, j.encode_run = e, run
        except Exception:  # noqa: BLE001 - the batch encodes them again and hands each caller its error
            pass
        finally:
            self._lock.acquire()
        return True

    def _take(self) -> list[_Job]:
        """The oldest waiting normal job and, if it is batchable, every waiting job with its key (up to
        ``max_batch``), removed from the queue; with no normal job waiting, the oldest background piece. Called with
        the lock held."""
        if not self._waiting:
            return [self._background.popleft()]
        first = self._waiting.popleft()
        batch = [first]
        if first.key is not None and self.max_batch > 1:
            rest = deque()
            while self._waiting:
                j = self._waiting.popleft()
                (batch if j.key == first.key and len(batch) < self.max_batch else rest).append(j)
            self._waiting = rest
        return batch

    def _pass_turn(self) -> None:
        with self._lock:
            if self._waiting or self._background:  # a normal job first: background pieces wait behind them
                (self._waiting or self._background)[0].event.set()  # its caller wakes up holding the turn
            else:
                self._busy = False

    def _execute(self, batch: list[_Job]) -> None:
        """Run ``batch`` and finish every job in it (never raises: errors go to their jobs)."""
        first = batch[0]
        if first.key is None:
            self._count(0, background=first.background)
            try:
                first.finish(result=first.fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised in its thread
                first.finish(error=exc)
            return
        beam_size, length_penalty, max_len, n_best, k = first.key
        try:
            ahead = {"encoded": [j.encoded for j in batch]} if any(j.encoded is not None for j in batch) else {}
            results = explain_batch(self.translator, [j.text for j in batch], beam_size=beam_size,
                                    length_penalty=length_penalty, max_len=max_len, n_best=n_best, k=k, **ahead)
        except BaseException as exc:  # noqa: BLE001 - one bad sentence: each job alone, with its own outcome
            if len(batch) == 1:
                self._count(1)
                first.finish(error=exc)
                return
            for j in batch:
                self._execute([j])
            return
        self._count(len(batch))
        # the batch's time includes its encoder runs made while it gathered (a Translation's elapsed_ms is the whole
        # work for its batch, Translation.elapsed_ms)
        ahead_ms = sum(dict(j.encode_run for j in batch if j.encode_run is not None).values())
        for j, r in zip(batch, results):
            j.finish(result=replace(r, elapsed_ms=r.elapsed_ms + ahead_ms) if ahead_ms else r)

    def _count(self, sentences: int, *, background: bool = False) -> None:
        with self._lock:
            s = self._stats
            s.turns += 1
            s.background += int(background)
            s.sentences += sentences
            s.largest_batch = max(s.largest_batch, sentences)
            s.batched += sentences if sentences > 1 else 0
