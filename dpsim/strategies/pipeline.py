"""Pipeline parallelism: the schedules (GPipe, 1F1B, interleaved 1F1B, ZB-H1, DualPipe) and a layout's step program.

**Schedules** (the order in which each stage runs the forwards ``F`` and backwards ``B`` of
its micro-batches and model chunks):

- ``gpipe`` (Huang et al. 2019): all ``m`` forwards, then all ``m`` backwards; every
  micro-batch's activations are held at once.
- ``1f1b`` (PipeDream-Flush, Narayanan et al. 2021, Sec. 2.2.1; Megatron's
  ``forward_backward_pipelining_without_interleaving``): stage ``s`` of ``p`` runs
  ``min(p - s - 1, m)`` warm-up forwards, then alternates one forward and one backward,
  then drains the remaining backwards: at most ``p - s`` micro-batches in flight.
- ``1f1b-interleaved`` (Narayanan et al. 2021, Sec. 2.2.2; Megatron's
  ``forward_backward_pipelining_with_interleaving``): each stage holds ``v`` model chunks;
  virtual micro-batch ``k`` runs chunk ``(k mod p·v) // p`` in forward (``v - 1 -`` that in
  backward) of micro-batch ``(k // p·v)·p + k mod p``; ``(p - s - 1)·2 + (v - 1)·p``
  warm-up forwards (all ``m·v`` when ``m = p``). ``m`` must be a multiple of ``p``.
- ``zb-h1`` (zero bubble, Qi et al. 2024, arXiv:2401.10241, Sec. 3.1, Fig. 3): each backward
  is split into ``B``, the input gradient the previous stage waits for, and ``W``, the weight
  gradient nothing waits for (:attr:`~dpsim.strategies.layout.LayerWork.weight_grad_s`);
  1F1B's order of ``F`` and ``B``, and stage ``s`` runs each ``W`` ``s`` backwards late, so
  that stage ``s`` holds 1F1B's ``p - s`` forwarded micro-batches and ``s`` whose ``B`` ran,
  each of those keeping only what its ``W`` reads (:func:`deferred_weight_grads`; stage 0's
  peak is 1F1B's) and the deferred ``W`` fill the drain: the bubble
  is ``(p - 1)(F + B - W)`` instead of ``(p - 1)(F + B + W)``. The exchange after a ``B`` is
  in flight while a ``W`` runs (the next ``F`` or ``B`` waits for it). The last micro-batch's
  ``W`` launches the data-parallel buckets layer by layer.
- ``dualpipe`` (DeepSeek-V3 report, arXiv:2412.19437, Sec. 3.2.1, Fig. 5 and Table 2; the
  order of ``deepseek-ai/DualPipe``'s ``DualPipe.step``@bb214e82, its eight phases): half
  the ``m`` micro-batches enter at stage 0 and half at stage ``p - 1``; the model is split
  over ``p`` stages and stage ``r`` holds stage ``r`` of the first direction (chunk 0) and
  stage ``p - 1 - r`` of the second (chunk 1), so **twice the parameters** of a 1F1B stage,
  whose gradients the two holders all-reduce before the optimizer. In the steady state each
  forward chunk runs paired with a backward chunk of the other direction (``F&B``: here one
  after the other, starting once both inputs are in, the pair's compute being their sum on
  a dense model; with ``moe_a2a_overlap`` each hides the other's expert-parallel all-to-alls,
  :func:`a2a_pairs`, :func:`a2a_overlap_cut`); the warm-up's and drain's backwards split off their ``W`` to fill the
  bubbles. It holds **p + 1** chunks' activations at its peak (Table 2; counted from the
  slots, tested). Its exchanges block as its runtime's do: the sends and receives a stage
  appends are posted together and all waited on before its next chunk
  (``_commit_and_wait_comm``; :func:`dualpipe_steps`), so with uniform chunks and free
  transfers the played bubble is the paper's ``(p/2 - 1)(F&B + B - 3W)`` when ``F = B - W =
  W`` (tested). ``p`` even, ``m`` even and at least ``2p``.
- ``deepspeed`` (DeepSpeed's ``PipelineEngine`` running ``TrainSchedule``,
  ``deepspeed/runtime/pipe/schedule.py``@077e6740, as Megatron-Turing NLG trained, Smith et
  al. 2022): the same order as 1F1B (stage ``s`` runs ``F(j)`` at pipe step ``2j + s`` and
  ``B(j)`` at step ``2j + 2p - 1 - s`` of ``2(m + p - 1)``), but each step first exchanges
  with one neighbour through *blocking* sends and receives (``p2p.send``/``p2p.recv``
  assert ``async_op == False``, ``deepspeed/runtime/pipe/p2p.py``@077e6740): a forward
  step receives its activation from ``s - 1`` then sends the previous backward's gradient
  to it; a backward step sends the previous forward's activation to ``s + 1`` then receives
  its gradient. A send completes only once the peer has reached the matching receive. A
  stage meets each neighbour every other pipe step, with one forward and one backward in
  between on both sides, so in the steady state neighbours run one forward apart and do
  not wait for each other: free transfers give 1F1B's step exactly, and what DeepSpeed adds
  is its messages one at a time on the critical path. Gradients are reduced across
  replicas after the pipeline (``ReduceTiedGrads``, ``ReduceGrads`` at the last step),
  never overlapped, and all-reduced even under ZeRO-1 (the engine of the time reduced stage 1
  with ``dist.all_reduce``, ``deepspeed/runtime/zero/stage2.py``@0457bb1cb6
  ``buffered_reduce_fallback``; the partition-aware ``dist.reduce`` of ``average_tensor`` ran only
  with contiguous gradients, which that engine turned off for stage 1). With tensor
  parallelism a stage keeps only its slice of each output it sent and all-gathers it again
  before that micro-batch's backward (one more tensor-group all-gather per micro-batch than
  Megatron).

The bubble of every schedule is ``(p - 1)`` forward+backward slots of a stage out of
``m + p - 1`` (interleaved: of a chunk, ``(p - 1)/v`` of a stage): Narayanan et al. 2021,
Sec. 2.2.

**The step program** (:func:`build_pipeline_program`, played by
:mod:`dpsim.engine.pipeline`): each ``F``/``B`` op of a chunk waits for the activation
(gradient) sent by the previous (next) virtual stage, a point-to-point transfer of the
``b x s x h`` hidden state on the ``pp`` communicator, one ``1/t`` slice per
tensor-parallel rank (Megatron's scatter-gather optimisation, Narayanan et al. 2021,
Sec. 4.1; with sequence parallelism the hidden state is already split), all-gathered
over the ``tp`` group at the receiver without sequence parallelism. Exchanges block
(``blocking_p2p``, the default): Megatron's ``p2p_communication._communicate`` posts an op's
sends with the next op's receives as one ``batch_isend_irecv`` and waits on it before
computing on (``megatron/p2p_communication.py`` ``_communicate``@50a4b5fa02, the code of
Narayanan et al. 2021: ``req.wait()`` on every request, then ``torch.cuda.synchronize()``
"to protect against race condition"; Megatron-Core waits on the requests unless
``--overlap-p2p-communication``), and a large NCCL send completes only once its receive is
posted, so both sides hold until the data has landed: each steady-state exchange sits on
the critical path. With free transfers the step is the asynchronous one exactly. The last
micro-batch's backward of each chunk runs layer by layer so that data-parallel gradient
buckets launch as their gradients become ready (``overlap``), as Megatron's
``--overlap-grad-reduce`` does; without overlap every bucket waits for the stage's last
backward (Megatron's original ``allreduce_gradients`` after the whole pipeline
schedule). With tied embeddings the first and last stage all-reduce the word
embedding's gradient (``_allreduce_word_embedding_grads``) before the optimizer.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from dpsim.engine.pipeline import PipelineProgram, StageOp, StageProgram, Transfer, gc_paused
from dpsim.engine.program import CommOp
from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.strategies.layout import ChunkWork, LayerWork, Layout, reshards_after_forward
from dpsim.strategies.zero import InternlmZero1
from dpsim.workload.fp8 import Fp8Recipe, gathered_weight_bytes
from dpsim.wording import count

Slot = tuple[str, int, int]
"""``("F" | "B" | "W", chunk, micro_batch)`` (``W``: a zero-bubble schedule's weight gradient)."""


A2A_OVERLAP_SCHEDULES = ("1f1b-interleaved", "dualpipe")
"""Schedules that pair a forward with a backward, whose expert-parallel all-to-alls ``moe_a2a_overlap``
hides under each other's compute with pipeline stages (:func:`a2a_pairs`)."""


def check_schedule(layout: Layout) -> None:
    """The rules between the pipeline flags (one line each)."""
    p, v, m = layout.pp, layout.virtual_stages, layout.micro_batches
    if layout.moe_a2a_overlap and p == 1 and m < 2:
        # a2a_pairs: without stages a backward pairs with the next micro-batch's forward; with one a step there is
        # none, and the flag changed nothing (the same step to the last digit) without a word.
        raise ConfigError(f"--moe-a2a-overlap: without --pp it pairs each micro-batch's backward with the next one's "
                          f"forward, and this step runs {count(m, 'micro-batch', 'micro-batches')} per replica, so "
                          f"nothing overlaps; give --grad-accum 2 or more (or a --global-batch that makes them), or "
                          f"leave it out")
    if layout.moe_a2a_overlap and p > 1 and layout.schedule not in A2A_OVERLAP_SCHEDULES:
        raise ConfigError(f"--moe-a2a-overlap: with --pp {p} a forward and a backward run paired only in the "
                          f"interleaved schedule (Megatron-Core) or DualPipe's F&B; give --schedule "
                          f"1f1b-interleaved or dualpipe (not {layout.schedule}) or leave the flag off")
    if layout.schedule == "1f1b-interleaved":
        if p == 1:
            raise ConfigError("--schedule: 1f1b-interleaved needs pipeline stages; give --pp 2 or more, or use 1f1b")
        if v < 2:
            raise ConfigError(f"--virtual-stages: {v} with --schedule 1f1b-interleaved; give 2 or more model "
                              f"chunks per stage, or use --schedule 1f1b")
        if m % p:
            raise ConfigError(f"--global-batch: {layout.global_batch} gives {count(m, 'micro-batch', 'micro-batches')} "
                              f"per replica, not a multiple of --pp {p} as the interleaved schedule needs; change "
                              f"--global-batch or --micro-batch")
    elif layout.schedule == "dualpipe":
        if p < 2 or p % 2:
            raise ConfigError(f"--pp: {p} stages with --schedule dualpipe; it needs an even number of stages "
                              f"(2 or more), half of them feeding each direction")
        if m % 2 or m < 2 * p:
            raise ConfigError(f"--global-batch: {layout.global_batch} gives {count(m, 'micro-batch', 'micro-batches')} "
                              f"per replica; --schedule dualpipe needs an even number, at least 2 x --pp = {2 * p} "
                              f"(half enter from each end); change --global-batch or --micro-batch")
    elif v != 1:
        raise ConfigError(f"--virtual-stages: {v} applies only to --schedule 1f1b-interleaved; leave it at 1")


def warmup_forwards(p: int, v: int, m: int, stage: int, extra: int = 0) -> int:
    """Warm-up forwards of the interleaved schedule on ``stage``: ``(p - stage - 1)·2 + (v - 1)·p``,
    ``extra`` more (capped at all ``m·v``; all of them when ``m = p``). Megatron-Core runs one more
    with ``--overlap-moe-expert-parallel-comm``, so that the forward and backward it pairs are of
    different micro-batches (``get_pp_rank_microbatches(..., overlap_moe_expert_parallel_comm=...)``,
    megatron/core/pipeline_parallel/schedules.py@00611e6eeb0b)."""
    total = m * v
    return total if m == p else min((p - stage - 1) * 2 + (v - 1) * p + extra, total)


def schedule_slots(schedule: str, p: int, v: int, m: int, stage: int, extra_warmup: int = 0) -> list[Slot]:
    """The order stage ``stage`` runs its forwards and backwards (see the module docstring);
    ``extra_warmup``: more warm-up forwards of the interleaved schedule (:func:`warmup_forwards`)."""
    if schedule == "gpipe":
        return [("F", 0, j) for j in range(m)] + [("B", 0, j) for j in range(m)]
    if schedule in ("1f1b", "deepspeed"):
        w = min(p - stage - 1, m)
        out: list[Slot] = [("F", 0, j) for j in range(w)]
        for i in range(m - w):
            out += [("F", 0, w + i), ("B", 0, i)]
        return out + [("B", 0, j) for j in range(m - w, m)]
    if schedule == "dualpipe":
        return dualpipe_slots(p, m, stage)
    if schedule == "zb-h1":
        # 1F1B's order of F and B; each W runs ``stage`` backwards late, so that at most
        # ``p`` micro-batches are held on every stage (stage 0's 1F1B peak) and the
        # deferred W fill the drain (Qi et al. 2024, Sec. 3.1, Fig. 3).
        w = min(p - stage - 1, m)
        out = [("F", 0, j) for j in range(w)]
        done_w = 0
        for kind, _, j in schedule_slots("1f1b", p, 1, m, stage)[w:]:
            out.append((kind, 0, j))
            if kind == "B" and j - done_w >= stage:
                out.append(("W", 0, done_w))
                done_w += 1
        return out + [("W", 0, j) for j in range(done_w, m)]
    total = m * v

    def slot(kind: str, k: int) -> Slot:
        in_group = k % (p * v)
        chunk = in_group // p
        if kind == "B":
            chunk = v - 1 - chunk
        return kind, chunk, (k // (p * v)) * p + k % p

    w = warmup_forwards(p, v, m, stage, extra_warmup)
    out = [slot("F", k) for k in range(w)]
    for k in range(total - w):
        out += [slot("F", k + w), slot("B", k)]
    return out + [slot("B", k) for k in range(total - w, total)]


def dualpipe_pairs(p: int, m: int, stage: int) -> dict[tuple[int, int], tuple[int, int]]:
    """DualPipe's overlapped chunks on ``stage``: forward ``(chunk, micro-batch)`` -> the backward
    ``(chunk, micro-batch)`` run with it."""
    pairs: list[int] = []
    slots = dualpipe_slots(p, m, stage, pairs)
    return {slots[k][1:]: slots[k + 1][1:] for k in pairs}


def dualpipe_slots(p: int, m: int, stage: int, pairs: list[int] | None = None) -> list[Slot]:
    """DualPipe's order on ``stage`` (see the module docstring): chunk ``c`` is direction ``c``;
    micro-batch ``j`` counts that direction's ``m/2``. ``pairs`` collects the positions of the
    forwards run overlapped with the backward after them."""
    out: list[Slot] = []
    for step in _dualpipe_steps(p, m, stage):
        if step[0] == "pair" and pairs is not None:
            pairs.append(len(out))
        elif step[0] in ("F", "B", "W"):
            out.append(step)
    return out


Message = tuple[str, int, int]
"""``("act" | "grad", direction, micro_batch)``: a DualPipe point-to-point message."""


def dualpipe_steps(p: int, m: int, stage: int) -> list[tuple]:
    """DualPipe's calls on ``stage`` as its runtime issues them (``DualPipe.step``'s eight phases,
    deepseek-ai/DualPipe@bb214e82): compute ``("F" | "B" | "W", direction, micro_batch)``,
    ``("pair",)`` before an overlapped forward-backward pair, and ``("commit", sends, receives)``
    (tuples of :data:`Message`): the sends and receives appended since the last commit, posted
    together and all waited on (``_commit_and_wait_comm``) before the next compute."""
    half_p, half_m = p // 2, m // 2
    h = min(stage, p - 1 - stage)
    second = stage >= half_p
    middle = h == half_p - 1
    out: list[tuple] = []
    n_f, n_b = [0, 0], [0, 0]
    sends: list[Message] = []
    recvs: list[Message] = []
    deferred: list[tuple[int, int]] = []

    def direction(phase: int) -> int:
        return phase ^ second

    def first_of(d: int) -> bool:  # where direction d enters
        return stage == (0 if d == 0 else p - 1)

    def last_of(d: int) -> bool:
        return stage == (p - 1 if d == 0 else 0)

    def commit() -> None:
        if sends or recvs:
            out.append(("commit", tuple(sends), tuple(recvs)))
            sends.clear()
            recvs.clear()

    counters: dict[tuple[bool, str, int], int] = {}

    def message(send: bool, what: str, phase: int) -> None:
        """Append a send or a receive of ``what`` in the direction of ``phase``, unless the stage
        is where that message starts or ends (activations enter at the direction's first stage,
        gradients at its last)."""
        d = direction(phase)
        edge = first_of(d) if (what == "act") != send else last_of(d)
        if not edge:
            j = counters.get((send, what, d), 0)
            counters[send, what, d] = j + 1
            (sends if send else recvs).append((what, d, j))

    def recv_forward(phase: int) -> None:
        message(False, "act", phase)

    def send_forward(phase: int) -> None:
        message(True, "act", phase)

    def recv_backward(phase: int) -> None:
        message(False, "grad", phase)

    def send_backward(phase: int) -> None:
        message(True, "grad", phase)

    def f_compute(phase: int) -> None:
        d = direction(phase)
        out.append(("F", d, n_f[d]))
        n_f[d] += 1

    def b_compute(phase: int, defer: bool) -> None:
        d = direction(phase)
        out.append(("B", d, n_b[d]))
        if defer:
            deferred.append((d, n_b[d]))
        else:
            out.append(("W", d, n_b[d]))
        n_b[d] += 1

    def forward(phase: int, recv: bool = True, send: bool = True) -> None:
        if recv:
            recv_forward(phase)
        commit()
        f_compute(phase)
        if send:
            send_forward(phase)

    def backward(phase: int, defer: bool = False, send: bool = True) -> None:
        recv_backward(phase)
        commit()
        b_compute(phase, defer)
        if send:
            send_backward(phase)

    def forward_backward(phase0: int, phase1: int, recv0: bool = True) -> None:
        if recv0:
            recv_forward(phase0)
        recv_backward(phase1)
        commit()
        out.append(("pair",))
        f_compute(phase0)
        b_compute(phase1, False)
        send_forward(phase0)
        send_backward(phase1)

    def weight() -> None:
        commit()
        d, j = deferred.pop(0)
        out.append(("W", d, j))

    for _ in range(2 * (half_p - h - 1)):
        forward(0)
    recv_forward(0)
    for i in range(h + 1):
        forward(0, recv=False, send=middle)
        recv_forward(0)
        forward(1, send=not middle or i < h)
        if not middle:
            send_forward(0)
    for _ in range(half_p - h - 1):
        backward(1, defer=True)
        recv_forward(1)
        weight()
        forward(1, recv=False)
    for i in range(half_m - p + h + 1):
        if i == 0 and middle:  # the middle stages run their first pair apart
            forward(0, recv=False, send=False)
            send_forward(1)
            backward(1, send=False)
            send_forward(0)
            send_backward(1)
        else:
            forward_backward(0, 1, recv0=i > 0)
        forward_backward(1, 0)
    for _ in range(half_p - h - 1):
        backward(1)
        forward_backward(1, 0)
    defer = False
    for i in range(h + 1):
        if i == (h + 1) // 2 and h % 2 == 1:
            defer = True
        backward(1, defer)
        if i == (h + 1) // 2 and h % 2 == 0:
            defer = True
        backward(0, defer)
    for _ in range(half_p - h - 1):
        weight()
        backward(0, defer=True)
    for _ in range(h + 1):
        weight()
    commit()
    assert not deferred and n_f == n_b == [half_m, half_m]
    return out


@functools.lru_cache(maxsize=4096)
def _dualpipe_steps(p: int, m: int, stage: int) -> tuple[tuple, ...]:
    """:func:`dualpipe_steps`, kept: a search replays the same orders for many chunk times."""
    return tuple(dualpipe_steps(p, m, stage))


def dualpipe_compute_s(p: int, m: int, forward_s, backward_s, weight_s, pair_cut=None) -> float:
    """The last stage's end of :func:`dualpipe_stage_times`."""
    return max(dualpipe_stage_times(p, m, forward_s, backward_s, weight_s, pair_cut)[0])


def dualpipe_stage_times(p: int, m: int, forward_s, backward_s, weight_s,
                         pair_cut=None, ready_s=None, gathers_s=None,
                         slowdown: float = 0.0) -> tuple[list[float], list[list[float]]]:
    """Per stage, when its last op ends and when each direction's last ``W`` does (its gradients
    complete: their data-parallel reductions launch), from the first forward, in DualPipe's order
    (:func:`dualpipe_steps`) with free transfers: the closed form ``plan`` estimates it with. ``forward_s[s][d]``,
    ``backward_s[s][d]`` (with its ``W``) and ``weight_s[s][d]``: stage ``s``'s chunk of direction
    ``d``; ``pair_cut(s, df, db)``: the seconds an overlapped pair (the forward of direction ``df``,
    the backward of ``db``) runs shorter each (:func:`a2a_overlap_cut`), none without it; ``ready_s[s][d]``:
    the earliest stage ``s``'s forwards of direction ``d`` start (its parameters gathered), none without it;
    ``gathers_s[s]``: until when stage ``s``'s stream gathers them from the step's start, its compute running
    ``1 + slowdown`` times slower meanwhile (the engine's ``overlap_slowdown``).

    Why replay rather than the paper's ``(p/2 - 1)(F&B + B - 3W)``: that bubble assumes every chunk
    alike; the stages holding the embedding and the output layer (0 and ``p - 1``, which hold both
    ends) are heavier than the middle ones, whose chunks fill their bubble, so the heaviest chunk's
    bubble overcounts where the stages are many and the chunks small, and a light chunk's misses the
    heavy stages' wait with two stages. As the runtime (and the pipeline program), each commit posts
    the sends appended since the last one and its receives together, and waits for the receives
    before the next compute; the sends' own completion is not waited on (transfers free)."""
    # The order in which the replay below meets its steps, and which receive waits for which send, depend on
    # (p, m) alone, not on the times: played once per shape (_dualpipe_program), then each call only adds
    # and takes maxima in that order, the same operations on the same values as the replay (bit for bit).
    program, n_posts = _dualpipe_program(p, m)
    clock = [0.0] * p
    grads = [[0.0, 0.0] for _ in range(p)]
    posted = [0.0] * n_posts
    cuts = [(0.0, 0.0)] * p
    slow = 1.0 + slowdown

    def run(s: int, d: float) -> None:
        # Compute beside the stage's gathers (until they end) runs ``slow`` times slower.
        t, end = clock[s], gathers_s[s]
        clock[s] = t + d * slow if t + d * slow <= end else end + d - (end - t) / slow

    until = gathers_s if gathers_s is not None else [0.0] * p
    for code, s, a, b in program:
        if code == _F:
            if ready_s is not None and ready_s[s][a] > clock[s]:
                clock[s] = ready_s[s][a]
            if clock[s] < until[s]:
                run(s, forward_s[s][a] - (cuts[s][0] if b else 0.0))
            else:
                clock[s] += forward_s[s][a] - (cuts[s][0] if b else 0.0)
        elif code == _B:
            if clock[s] < until[s]:
                run(s, backward_s[s][a] - weight_s[s][a] - (cuts[s][1] if b else 0.0))
            else:
                clock[s] += backward_s[s][a] - weight_s[s][a] - (cuts[s][1] if b else 0.0)
        elif code == _W:
            if clock[s] < until[s]:
                run(s, weight_s[s][a])
            else:
                clock[s] += weight_s[s][a]
            grads[s][a] = clock[s]
        elif code == _POST:
            posted[a] = clock[s]
        elif code == _WAIT:
            clock[s] = max([clock[s], *[posted[k] for k in a]])
        else:  # _PAIR
            cuts[s] = pair_cut(s, a, b) if pair_cut is not None else (0.0, 0.0)
    return clock, grads


_F, _B, _W, _POST, _WAIT, _PAIR = range(6)
"""The instructions of :func:`_dualpipe_program`."""


@functools.lru_cache(maxsize=256)
def _dualpipe_program(p: int, m: int) -> tuple[tuple[tuple, ...], int]:
    """DualPipe's steps (:func:`_dualpipe_steps`) walked as a step-by-step replay walks them, with the times left
    out (tests/test_plan_caches.py keeps that replay, times and all, as this program's reference): ``(code, stage,
    a, b)`` in the order the replay runs them (``_F``/``_B`` chunk ``a``, paired when ``b``; ``_W`` chunk ``a``;
    ``_POST`` the stage's clock into send slot ``a``; ``_WAIT`` the receives' slots ``a``; ``_PAIR`` the cut
    of the pair of directions ``a``, ``b``), and the number of send slots. Which sends a receive waits
    for, and so the order, never depend on the times."""
    steps = [_dualpipe_steps(p, m, s) for s in range(p)]
    at = [0] * p
    slots: dict[tuple[int, str, int, int], int] = {}
    program: list[tuple] = []
    while True:
        progressed = False
        for s in range(p):
            paired = False
            while at[s] < len(steps[s]):
                step = steps[s][at[s]]
                kind = step[0]
                if kind == "commit":
                    _, sends, recvs = step
                    for what, d, j in sends:
                        to = s + (1 if (what == "act") == (d == 0) else -1)
                        if (to, what, d, j) not in slots:  # the first post is the one kept (setdefault)
                            slots[to, what, d, j] = len(slots)
                            program.append((_POST, s, slots[to, what, d, j], None))
                    waits = [slots.get((s, what, d, j)) for what, d, j in recvs]
                    if any(k is None for k in waits):
                        break
                    program.append((_WAIT, s, tuple(waits), None))
                elif kind == "pair":
                    paired = True
                    nxt = steps[s][at[s] + 1: at[s] + 3]
                    program.append((_PAIR, s, nxt[0][1], nxt[1][1]))
                elif kind == "F":
                    program.append((_F, s, step[1], paired))
                elif kind == "B":
                    program.append((_B, s, step[1], paired))
                    paired = False
                else:  # "W"
                    program.append((_W, s, step[1], None))
                at[s] += 1
                progressed = True
        if all(at[s] == len(steps[s]) for s in range(p)):
            return tuple(program), len(slots)
        assert progressed, "DualPipe's order deadlocked"


def compute_beside(spans, first: int, t: float, d: float, slow: float) -> tuple[float, int]:
    """When ``d`` seconds of compute started at ``t`` end beside a stream busy over ``spans`` (its ``(start,
    end)`` intervals in time order), running ``slow`` times slower inside them, as the engine plays compute
    while a collective is in flight; and the index of the first span not behind ``t``, from which a caller whose
    ``t`` only grows may start the next call (``first``: where this one starts)."""
    i, n = first, len(spans)
    while i < n and spans[i][1] <= t:
        i += 1
    behind = i
    while i < n:
        a, b = spans[i]
        i += 1
        if b <= t:
            continue
        if a > t:
            if t + d <= a:
                return t + d, behind
            d -= a - t
            t = a
        room = (b - t) / slow
        if d <= room:
            return t + d * slow, behind
        d -= room
        t = b
    return t + d, behind


def blocking_stage_times(p: int, v: int, m: int, forward_s, backward_s, first_forward_s, transfer_s: float,
                         token_s: float, gather_s: float, streams=None,
                         slow: float = 1.0) -> tuple[list[float], list[float], list[float]]:
    """1F1B's step (``v`` 1) or the interleaved schedule's (``v`` chunks per stage), replayed exactly as the
    pipeline program plays it with Megatron's blocking exchanges (:func:`build_pipeline_program`,
    ``blocking_p2p``): per stage, when its last backward ends and when its last exchange has landed.
    ``forward_s[s][c]``, ``backward_s[s][c]``: stage ``s``'s chunk ``c`` of one micro-batch; ``first_forward_s[s][c]``:
    its first forward's once-a-step FP8 casts; ``transfer_s``: one activation or gradient between stages,
    ``token_s``: the receiver's zero-byte "ready" message before it (each on the FIFO channel of its ordered
    pair of stages); ``gather_s``: the receiver's tensor-parallel all-gather of a received slice, on the op
    that reads it. ``streams[s]``: stage ``s``'s data-parallel stream, ``(ready, gathers, reductions)`` as
    :meth:`~dpsim.plan.planner.Planner.stage_streams` gives it (per chunk the earliest its first forward starts,
    the gathers' seconds from the step's start, per chunk its buckets' ``(seconds into its last backward they
    launch, seconds)``), compute beside the busy stream running ``slow`` times slower, as the engine plays it.
    Returns per stage its last backward's end, its last exchange's and its stream's.

    Why replay rather than 1F1B's ``m·X_max + ΣX - X_max`` (+ ``2(p - 1) + m`` transfers): that charges every
    stage its fill and drain and the heaviest stage ``m`` times, a path only when the heaviest stage is the
    last one. With uneven stages and few micro-batches (Llama-3-70B's 80 blocks on 64 stages, ``m <= p``:
    1.07x its simulation) no path crosses them all, and the blocking exchanges put a transfer on the
    critical path only where a stage waits for its neighbour. The interleaved steady state's pacing
    (:meth:`~dpsim.plan.planner.Planner.interleaved_steady_s`) leaves out the exchanges' waits between
    the waves (Llama-3-8B two stages of 16 chunks, ``m = 32p``: 0.95x)."""
    program, n = _blocking_program(p, v, m)
    clock = [0.0] * p
    last_b = [0.0] * p
    land = [0.0] * n
    token = [0.0] * n
    free = [0.0] * (2 * p + 2)
    last_g = p * v - 1
    busy: list[list[tuple[float, float]]] = [[] for _ in range(p)]
    stream_end = [0.0] * p
    if streams is not None:
        for s in range(p):
            if streams[s][1] > 0:
                busy[s].append((0.0, streams[s][1]))
                stream_end[s] = streams[s][1]

    def run(s: int, t: float, d: float) -> float:
        """When ``d`` seconds of compute started at ``t`` on stage ``s`` end, ``slow`` times slower beside its stream."""
        return compute_beside(busy[s], 0, t, d, slow)[0]

    for code, s, a, b in program:
        if code == _OP_F or code == _OP_B:
            c, j, needs = a[0], a[1], b
            t = clock[s]
            for x in needs:
                if land[x] > t:
                    t = land[x]
            g = c * p + s
            if code == _OP_F:
                if streams is not None and streams[s][0][c] > t:
                    t = streams[s][0][c]
                d = forward_s[s][c] + (gather_s if g else 0.0) + (first_forward_s[s][c] if j == 0 else 0.0)
            else:
                d = backward_s[s][c] + (gather_s if g < last_g else 0.0)
                if streams is not None and j == m - 1:
                    # The chunk's last backward: its buckets launch as it passes their layers.
                    end = stream_end[s]
                    for launch, seconds in streams[s][2][c]:
                        start = end if end > t + launch else t + launch
                        end = start + seconds
                        if seconds > 0:
                            busy[s].append((start, end))
                    stream_end[s] = end
            clock[s] = t + d if t >= stream_end[s] else run(s, t, d)
            if code == _OP_B:
                last_b[s] = clock[s]
        elif code == _TOKEN:  # a receive posted: the ready message of transfer ``a`` on channel ``b``
            start = clock[s] if clock[s] > free[b] else free[b]
            token[a] = free[b] = start + token_s
        elif code == _SEND:  # transfer ``a`` once its ready message is in and the earlier exchanges landed
            x, ch, needs = a, b[0], b[1]
            t = clock[s] if clock[s] > token[x] else token[x]
            for y in needs:
                if land[y] > t:
                    t = land[y]
            clock[s] = t
            start = t if t > free[ch] else free[ch]
            land[x] = free[ch] = start + transfer_s
        else:  # _LAND: the exchanges in flight landed
            t = clock[s]
            for x in b:
                if land[x] > t:
                    t = land[x]
            clock[s] = t
    return last_b, clock, stream_end


_OP_F, _OP_B, _TOKEN, _SEND, _LAND = range(5)
"""The instructions of :func:`_blocking_program`."""


@functools.lru_cache(maxsize=256)
def _blocking_program(p: int, v: int, m: int) -> tuple[tuple[tuple, ...], int]:
    """The blocking exchanges of 1F1B (``v`` 1) or the interleaved schedule (:func:`_stage_sequence`) as
    :func:`build_pipeline_program` turns them into ops (a receive posted by the op before it, or by an op of its
    own waiting for the exchanges in flight; each send an op waiting for its ready message; each compute op
    waiting for every exchange in flight), walked in an order in which every value is known before it is read:
    ``(code, stage, a, b)`` (:func:`blocking_stage_times`) and the number of transfers. Activation ``(g, j)``
    (virtual stage ``g`` to ``g + 1``) is ``g·m + j``, gradient ``(g, j)`` (to ``g - 1``) ``(p·v - 2 + g)·m + j``.
    The order depends on ``(p, v, m)`` alone."""
    last_g = p * v - 1
    act = {(g, j): g * m + j for g in range(last_g) for j in range(m)}
    grad = {(g, j): (last_g - 1 + g) * m + j for g in range(1, last_g + 1) for j in range(m)}
    n = 2 * last_g * m
    src = [0] * n
    dst = [0] * n
    for (g, _), x in act.items():
        src[x], dst[x] = g % p, (g + 1) % p
    for (g, _), x in grad.items():
        src[x], dst[x] = g % p, (g - 1) % p
    channels: dict[tuple[int, int], int] = {}

    def channel(a: int, b: int) -> int:
        return channels.setdefault((a, b), len(channels))

    schedule = "1f1b" if v == 1 else "1f1b-interleaved"
    stages = []
    for s in range(p):
        seq = _stage_sequence(schedule_slots(schedule, p, v, m, s), s, p, m, deepspeed=False, blocking=True,
                              act_send=act, grad_send=grad,
                              interleaved_warmup=warmup_forwards(p, v, m, s) if v > 1 else None)
        ins: list[tuple] = []
        pending: list[int] = []
        any_op = False
        for kind, c, j, xsend, xrecv in seq:
            if kind == "exchange":
                if xrecv:
                    if pending or not any_op:
                        ins.append((_LAND, s, None, tuple(pending)))
                        pending = []
                    any_op = True
                    for x in xrecv:
                        ins.append((_TOKEN, s, x, channel(s, src[x])))
                for x in xsend:
                    ins.append((_SEND, s, x, (channel(s, dst[x]), tuple(pending))))
                    any_op = True
                pending += list(xsend) + list(xrecv)
                continue
            ins.append((_OP_F if kind == "F" else _OP_B, s, (c, j), tuple(pending)))
            pending = []
            any_op = True
        if pending:
            ins.append((_LAND, s, None, tuple(pending)))
        stages.append(ins)
    assert len(channels) <= 2 * p + 2
    landed = [False] * n
    tokened = [False] * n
    at = [0] * p
    program: list[tuple] = []
    while True:
        progressed = False
        for s in range(p):
            ins = stages[s]
            k = at[s]
            while k < len(ins):
                step = ins[k]
                code, a, b = step[0], step[2], step[3]
                if code == _SEND:
                    if not tokened[a] or not all(landed[y] for y in b[1]):
                        break
                    landed[a] = True
                elif code == _TOKEN:
                    tokened[a] = True
                elif not all(landed[y] for y in b):
                    break
                program.append(step)
                k += 1
            if k > at[s]:
                at[s] = k
                progressed = True
        if all(at[s] == len(stages[s]) for s in range(p)):
            return tuple(program), n
        assert progressed, "the blocking exchanges deadlocked"


def _interleaved_warmup(layout: Layout, stage: int) -> int | None:
    """Warm-up forwards of the interleaved schedule on ``stage`` (``None`` for the others)."""
    if layout.schedule != "1f1b-interleaved":
        return None
    return warmup_forwards(layout.pp, layout.chunks, layout.micro_batches, stage, extra_warmup(layout))


def extra_warmup(layout: Layout) -> int:
    """Warm-up forwards the layout's interleaved schedule runs beyond Megatron's count: one with
    ``moe_a2a_overlap`` (:func:`warmup_forwards`)."""
    return 1 if layout.moe_a2a_overlap and layout.schedule == "1f1b-interleaved" else 0


def a2a_pairs(layout: Layout, slots: Sequence[Slot], stage: int) -> list[tuple[int, int]]:
    """Indices into ``slots`` of the forward and backward whose expert-parallel all-to-alls hide under
    each other's compute with ``layout.moe_a2a_overlap`` (Megatron-Core's
    ``--overlap-moe-expert-parallel-comm``, the computation-communication overlap of the DeepSeek-V3
    report, arXiv:2412.19437, Sec. 3.2.1): the interleaved schedule's steady state, whose every
    iteration runs one forward and one backward of different micro-batches (its warm-up and
    cool-down run alone, their all-to-alls exposed), or without pipeline stages each backward with
    the next micro-batch's forward (all but the first forward and the last backward). Megatron-Core
    requires virtual pipeline stages when ``pp > 1`` (Megatron-Bridge's expert-parallel overlap
    constraints, docs.nvidia.com/nemo/megatron-bridge/latest/skills/perf-techniques/
    expert-parallel-overlap/SKILL.html: "if PP > 1, set virtual_pipeline_model_parallel_size");
    :func:`check_schedule` refuses the rest. Memory: the pair runs layer by layer, the forward's
    layer ``i`` beside the backward's layer ``L - 1 - i``, so what the forward keeps the backward has
    freed and the peak stays one micro-batch's; the interleaved schedule's one more warm-up forward
    (:func:`warmup_forwards`) holds one more chunk's."""
    if not layout.moe_a2a_overlap:
        return []
    if layout.pp == 1:
        return [(k + 1, k) for k in range(len(slots) - 1) if slots[k][0] == "B" and slots[k + 1][0] == "F"]
    if layout.schedule == "dualpipe":
        # DualPipe's overlapped F&B pairs (:func:`dualpipe_slots`): the forward at ``k``, the backward of
        # the other direction right after it, the overlap its runtime exists for (DeepSeek-V3 report,
        # Sec. 3.2.1: "for a pair of forward and backward chunks, we rearrange these components ... both
        # all-to-all and PP communication can be fully hidden"); the warm-up's and drain's chunks run alone.
        pairs: list[int] = []
        dualpipe_slots(layout.pp, layout.micro_batches, stage, pairs)
        return [(k, k + 1) for k in pairs]
    w = _interleaved_warmup(layout, stage)
    assert w is not None, "all-to-all overlap with pipeline stages needs the interleaved schedule"
    n_f = sum(1 for kind, _, _ in slots if kind == "F")
    return [(w + 2 * i, w + 2 * i + 1) for i in range(n_f - w)]


def a2a_overlap_cut(forward: ChunkWork, backward: ChunkWork, contention: float) -> tuple[float, float]:
    """Seconds taken off a paired forward and backward (:func:`a2a_pairs`). Megatron-Core's combined
    1F1B runs the pair block by block: the forward's decoder block ``i`` beside the backward's block
    ``n_b - 1 - i`` for ``i`` below ``min(n_f, n_b)``, and the blocks of the longer chunk left over run
    alone, their all-to-alls exposed; the embedding and the output head (pre- and post-process) run
    outside the paired blocks (NVIDIA/Megatron-LM@d7bf5aaaa8 ``megatron/core/models/common/
    model_chunk_schedule_plan.py``, ``TransformerModelChunkSchedulePlan.run`` lines 422-497). Within a
    pair of blocks each all-to-all hides under one compute phase of the other op, in the order of
    ``TransformerLayerSchedulePlan.run`` (same file, lines 173-236; DeepSeek-V3 report,
    arXiv:2412.19437, Sec. 3.2.1, Fig. 4): the backward's combine under the forward's attention, the
    forward's dispatch under the backward's MLP, the backward's dispatch under the forward's MLP, the
    forward's combine under the backward's attention; one CUDA event per micro-batch orders its nodes
    across the compute and communication streams (``megatron/core/pipeline_parallel/utils.py`` lines
    83-91, 172-237), so a pair of blocks lasts the sum of the four phases' longer sides. A block's
    "attention" is its layers before its first MoE layer (a dense block's all but its last), its "MLP"
    the rest without the blocking expert-parallel communication; dispatch and combine are half of
    each op's. An all-to-all hides as much of itself as its phase's compute lasts, and its hidden part
    still slows that compute by ``contention`` of its length (``overlap_slowdown / (1 +
    overlap_slowdown)``, as a hidden tensor-parallel collective does,
    :func:`~dpsim.strategies.layout.layer_work`). The pair so never runs shorter than its compute,
    nor than its communication."""
    def blocks(work: ChunkWork, backward_pass: bool) -> list[tuple[float, float, float]]:
        layers: dict[str, list] = {}
        for lw in work.layers:
            if lw.unit is not None:  # the embedding and the head run outside the paired blocks
                layers.setdefault(lw.unit, []).append(lw)
        out = []
        for block in layers.values():
            first_moe = next((k for k, lw in enumerate(block) if lw.ep_comm_s > 0), max(len(block) - 1, 0))
            attn = mlp = comm = 0.0
            for k, lw in enumerate(block):
                a2a = lw.ep_comm_s + lw.etp_comm_s - lw.ep_forward_s if backward_pass else lw.ep_forward_s
                total = lw.backward_s if backward_pass else lw.forward_s
                if k < first_moe:
                    attn += total
                else:
                    mlp, comm = mlp + total - a2a, comm + a2a
            out.append((attn, mlp, comm))
        return out

    hide_f = hide_b = 0.0
    for (attn_f, mlp_f, a2a_f), (attn_b, mlp_b, a2a_b) in zip(blocks(forward, False),
                                                              reversed(blocks(backward, True))):
        hide_f += min(a2a_f / 2.0, mlp_b) + min(a2a_f / 2.0, attn_b)
        hide_b += min(a2a_b / 2.0, attn_f) + min(a2a_b / 2.0, mlp_f)
    keep = max(0.0, 1.0 - contention)
    return hide_f * keep, hide_b * keep


def peak_in_flight(slots: Sequence[Slot], chunks: int) -> list[int]:
    """Per chunk, the micro-batches whose activations are held at the stage's peak (when
    the sum over chunks of forwards run but not yet backwarded is largest, counted just
    before a backward starts)."""
    held = [0] * chunks
    best, best_held = -1, [0] * chunks
    # A split backward frees a micro-batch's activations after its weight gradient W (which
    # reads the layers' inputs), not after B.
    release = "W" if any(kind == "W" for kind, _, _ in slots) else "B"
    for kind, c, _ in slots:
        if kind == "F":
            held[c] += 1
        else:
            if sum(held) > best:
                best, best_held = sum(held), list(held)
            if kind == release:
                held[c] -= 1
    return best_held


def peak_split(slots: Sequence[Slot]) -> tuple[int, int]:
    """``(forwarded, deferred)`` at a split-backward stage's peak (one chunk): the micro-batches
    whose B has not run (all their activations held) and those whose B ran but whose W has not
    (only what W reads held), counted just before each B, the peak being the most of the first
    and then of the second (a deferred W holds less than a whole micro-batch, Qi et al. 2024,
    Table 1)."""
    fwd = deferred = 0
    best = (0, 0)
    for kind, _, _ in slots:
        if kind == "F":
            fwd += 1
        elif kind == "B":
            best = max(best, (fwd, deferred))
            fwd, deferred = fwd - 1, deferred + 1
        else:
            deferred -= 1
    return best


def deferred_weight_grads(schedule: str, p: int, m: int, stage: int) -> int:
    """Micro-batches whose weight-gradient pass ``W`` stage ``stage`` still owes at its peak (equal
    to :func:`peak_split`'s second of :func:`schedule_slots`): ZB-H1 runs each ``W`` ``stage``
    backwards late, so beside 1F1B's ``min(p - stage, m)`` forwarded micro-batches it holds
    ``min(stage, m - min(p - stage, m))`` whose ``B`` ran. Such a micro-batch keeps only each
    linear layer's input and output gradient: the B pass frees the rest (sail-sg/
    zero-bubble-pipeline-parallelism@39f2c186 megatron/core/tensor_parallel/layers.py, the
    backward of ``LinearWithGradAccumulationAndAsyncCommunication`` hands ``WeightGradStore.put``
    the layer's ``input`` and ``grad_output``, megatron/core/zbpp_utils.py); the paper's
    ``M_W < M_B`` (Qi et al. 2024, arXiv:2401.10241, Table 1), whence its statement that ZB-H1's
    peak is 1F1B's, stage 0's. 0 for the other schedules (DualPipe's deferred ``W`` are counted
    whole, :func:`in_flight`)."""
    if schedule != "zb-h1":
        return 0
    return min(stage, m - min(p - stage, m))


@functools.lru_cache(maxsize=4096)
def stage_deferred_weight_grads(schedule: str, p: int, m: int) -> tuple[int, ...]:
    """:func:`deferred_weight_grads` of every stage."""
    return tuple(deferred_weight_grads(schedule, p, m, s) for s in range(p))


def in_flight(schedule: str, p: int, v: int, m: int, stage: int, extra_warmup: int = 0) -> list[int]:
    """Per chunk, the micro-batches stage ``stage`` holds at its peak, in closed form (equal to
    :func:`peak_in_flight` of :func:`schedule_slots`): ``m`` for GPipe, ``min(p - stage, m)``
    for 1F1B and ZB-H1 (whose micro-batches between B and W hold less:
    :func:`deferred_weight_grads`), the warm-up
    forwards plus one for the interleaved schedule."""
    if schedule == "gpipe":
        return [m]
    if schedule in ("1f1b", "deepspeed"):
        return [min(p - stage, m)]
    if schedule == "zb-h1":
        # Forwards whose B has not run: 1F1B's count. The micro-batches whose B ran and whose W
        # waits hold only what W reads (:func:`deferred_weight_grads`).
        return [min(p - stage, m)]
    if schedule == "dualpipe":
        return dualpipe_peak_in_flight(p, m, stage)
    total = m * v
    warmup = warmup_forwards(p, v, m, stage, extra_warmup)
    counts = [0] * v
    for k in range(min(warmup + 1, total)):
        counts[(k % (p * v)) // p] += 1
    return counts


DUALPIPE_PEAK_SETTLED = 4
"""DualPipe's peak of micro-batches in flight on a stage is reached in its fill (phases 1-3 of
``DualPipe.step``, whose lengths depend on the stages alone), and its steady middle runs F&B pairs,
one micro-batch in and one out: with ``m`` past this many times ``p`` the peak of ``m`` is the one
of ``DUALPIPE_PEAK_SETTLED·p`` (checked at three counts there; equal from ``2p`` for every stage of
2-32 stages and ``m`` up to ``64p``, tests/test_plan_extrapolate.py)."""


def dualpipe_peak_in_flight(p: int, m: int, stage: int) -> list[int]:
    """:func:`peak_in_flight` of DualPipe's slots on ``stage``, without listing every micro-batch's:
    a search of Mixtral-8x7B on 256 GPUs spent 50 of its 598 s listing the slots of thousands of
    micro-batches for their peak (2026-12-07). The settled count (:data:`DUALPIPE_PEAK_SETTLED`) is
    used where its peak and the next two even counts' agree, else ``m``'s slots are counted."""
    m0 = DUALPIPE_PEAK_SETTLED * p
    if m > m0 + 4 and m % 2 == 0:
        peaks = [peak_in_flight(dualpipe_slots(p, n, stage), 2) for n in (m0, m0 + 2, m0 + 4)]
        if peaks[0] == peaks[1] == peaks[2]:
            return peaks[0]
    return peak_in_flight(dualpipe_slots(p, m, stage), 2)


@functools.lru_cache(maxsize=4096)
def stage_in_flight(schedule: str, p: int, v: int, m: int, extra_warmup: int = 0) -> tuple[tuple[int, ...], ...]:
    """:func:`in_flight` of every stage (cached: a search asks for the same shapes many times)."""
    return tuple(tuple(in_flight(schedule, p, v, m, s, extra_warmup)) for s in range(p))


def bubble_fraction(layout: Layout, *, weight_share: float = 1.0 / 3.0, backward_share: float = 2.0 / 3.0) -> float:
    """Idle share of a uniform pipeline's step without transfers: ``(p - 1) / (v·m + p - 1)`` of
    chunk slots (Narayanan et al. 2021, Sec. 2.2; ``v = 1`` except interleaved). ZB-H1 idles
    ``(p - 1)(F + B - W)`` beside ``m(F + B + W)`` of work (Qi et al. 2024, Sec. 3.1, with
    ``W <= F``): with ``weight_share`` ``W / (F + B + W)``, ``(p - 1)(1 - 2w) / (m + (p - 1)(1 - 2w))``,
    a third of 1F1B's bubble when ``F = B = W``. DualPipe: its paper's ``(p/2 - 1)(F&B + B - 3W)``
    (DeepSeek-V3 report, Sec. 3.2.1, Table 2; ``B`` the whole backward, ``F&B`` an overlapped
    pair, here ``F + B``) beside ``m(F + B)``, with ``backward_share`` ``B / (F + B)``."""
    p, v, m = layout.pp, layout.chunks, layout.micro_batches
    if layout.schedule == "dualpipe":
        idle = (p / 2 - 1) * (1.0 + backward_share - 3.0 * weight_share)
        return idle / (m + idle) if m + idle > 0 else 0.0
    if layout.schedule == "zb-h1":
        idle = (p - 1) * (1.0 - 2.0 * weight_share)
        return idle / (m + idle) if m + idle > 0 else 0.0
    return (p - 1) / (v * m + p - 1)


Command = tuple[str, str, int]
"""A DeepSpeed pipe step's command: ``("recv" | "send", "act" | "grad", micro_batch)`` or
``("F" | "B", "", micro_batch)``."""


def deepspeed_commands(p: int, m: int, stage: int) -> list[Command]:
    """Stage ``stage``'s commands, pipe step by pipe step, as DeepSpeed's ``TrainSchedule``
    issues them (see the module docstring): forward steps are those of the stage's parity,
    ``F(j)`` at step ``2j + s``; backward steps the others, ``B(j)`` at ``2j + 2p - 1 - s``;
    each step's exchange concerns the micro-batch of the step before (its result to pass on)
    and of this step (its input to receive)."""
    out: list[Command] = []

    def valid(j: int) -> bool:
        return 0 <= j < m

    for t in range(2 * (m + p - 1)):
        if (t - stage) % 2 == 0:
            j, prev = (t - stage) // 2, (t - 2 * p + stage) // 2
            if stage > 0 and valid(j):
                out.append(("recv", "act", j))
            if stage > 0 and t > 0 and valid(prev):
                out.append(("send", "grad", prev))
            if valid(j):
                out.append(("F", "", j))
        else:
            j, prev = (t - 2 * p + 1 + stage) // 2, (t - 1 - stage) // 2
            if stage < p - 1 and valid(prev):
                out.append(("send", "act", prev))
            if stage < p - 1 and valid(j):
                out.append(("recv", "grad", j))
            if valid(j):
                out.append(("B", "", j))
    return out


Step = tuple[str, int, int, tuple[int, ...], tuple[int, ...]]
"""``(kind, chunk, micro-batch, transfers sent, transfers received)`` of a stage's sequence."""


def _stage_sequence(slots: Sequence[Slot], s: int, p: int, m: int, *, deepspeed: bool, blocking: bool,
                    act_send: dict, grad_send: dict, interleaved_warmup: int | None = None,
                    dual_virtual=None) -> list[Step]:
    """A stage's compute ops and blocking exchanges in order: ``(kind, chunk, micro-batch, sent,
    received)``, kind ``F``, ``B`` or ``exchange`` (its transfers sent and received).

    DeepSpeed exchanges one message per command (:func:`deepspeed_commands`). Megatron
    (``p2p_communication.py``: ``send_forward_recv_backward``, ``send_backward_recv_forward``,
    ``send_forward_recv_forward``... each one batched ``batch_isend_irecv`` waited on before
    the next op) sends an op's output together with receiving the next op's input, after the
    op; the first op's input is received before it. DualPipe posts and waits on what each commit
    of :func:`dualpipe_steps` holds (``dual_virtual(s, c)``: the virtual stage of its chunk ``c``).
    Without ``blocking`` the ops alone."""
    if dual_virtual is not None and blocking:
        def transfer(msg: Message, sending: bool) -> int:
            what, d, j = msg
            g = dual_virtual(s, d)
            if what == "act":
                return act_send[g, j] if sending else act_send[g - 1, j]
            return grad_send[g, j] if sending else grad_send[g + 1, j]

        out = []
        for step in _dualpipe_steps(p, m, s):
            if step[0] == "commit":
                out.append(("exchange", 0, 0, tuple(transfer(x, True) for x in step[1]),
                            tuple(transfer(x, False) for x in step[2])))
            elif step[0] != "pair":
                out.append((*step, (), ()))
        return out
    if deepspeed and blocking:
        out = []
        for kind, what, j in deepspeed_commands(p, m, s):
            if kind in ("F", "B"):
                out.append((kind, 0, j, (), ()))
                continue
            t = (act_send[s - 1, j] if kind == "recv" else act_send[s, j]) if what == "act" else \
                (grad_send[s + 1, j] if kind == "recv" else grad_send[s, j])
            out.append(("exchange", 0, j, (t,) if kind == "send" else (), (t,) if kind == "recv" else ()))
        return out
    if not blocking:
        return [(kind, c, j, (), ()) for kind, c, j in slots]

    def io(kind: str, c: int, j: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        g = c * p + s
        if kind == "W":
            return (), ()
        if kind == "F":
            return (((act_send[g - 1, j],) if (g - 1, j) in act_send else ()),
                    ((act_send[g, j],) if (g, j) in act_send else ()))
        return (((grad_send[g + 1, j],) if (g + 1, j) in grad_send else ()),
                ((grad_send[g, j],) if (g, j) in grad_send else ()))

    # The ops between two exchanges: one each, except the interleaved schedule's steady state,
    # which runs a forward and a backward, then one exchange for both (receiving the next
    # backward's input an iteration early: forward_backward_pipelining_with_interleaving).
    # Groups are index lists into ``slots`` (a range slices as the list would); each slot's
    # transfers are looked up once.
    index = range(len(slots))
    groups: list[Sequence[int]]
    if interleaved_warmup is None:
        groups = [(i,) for i in index]
    else:
        w = interleaved_warmup
        n_f = sum(1 for kind, _, _ in slots if kind == "F")
        groups = [(i,) for i in index[:w]]
        groups += [index[w + 2 * i: w + 2 * i + 2] for i in range(n_f - w)]
        groups += [(i,) for i in index[w + 2 * (n_f - w):]]
    ios = [io(*slot) for slot in slots]
    recv = [tuple(t for i in group for t in ios[i][0]) for group in groups]
    out = []
    for k, group in enumerate(groups):
        if k == 0 and recv[0]:
            first = slots[group[0]]
            out.append(("exchange", first[1], first[2], (), recv[0]))
        out += [(*slots[i], (), ()) for i in group]
        sends = tuple(t for i in group for t in ios[i][1])
        nxt = recv[k + 1] if k + 1 < len(groups) else ()
        if sends or nxt:
            last = slots[group[-1]]
            out.append(("exchange", last[1], last[2], sends, nxt))
    return out


@frozen_dataclass
class DataParallelPlan:
    """What a stage's data-parallel collectives look like (all sizes per GPU)."""

    strategy: str
    """``ddp``, ``zero1``, ``fsdp``, ``zero3`` or ``fsdp-hybrid``."""
    dp: int
    """Replicas (no collective when 1)."""
    overlap: bool
    """Buckets launch during the last micro-batch's backward."""
    bucket_elements: int
    """Parameters per bucket."""
    grad_bytes: int
    """Bytes per gradient element reduced."""
    weight_bytes: int
    """Bytes per parameter element gathered."""
    edp: int = 1
    """Expert-data-parallel replicas a mixture of experts reduces its routed experts' gradients
    over, on the :attr:`expert_comm` communicator (their own buckets, as Megatron-Core keeps the expert
    parameters in buffers of their own); the rest reduce over ``dp``."""
    internlm: tuple[InternlmZero1, ...] = ()
    """Per stage, InternLM's ZeRO-1 (``zero1`` only; empty: Megatron's distributed optimizer): buckets
    all-reduced over ``dp``, each owner's updated parameters broadcast over :attr:`zero_comm` after
    the optimizer, the step waiting for them (:mod:`dpsim.strategies.zero`)."""
    zero_comm: str = "dp"
    """The communicator of InternLM's ZERO1 group (``zero`` when smaller than ``dp``)."""
    shard_comm: str = "dp"
    """The communicator the parameters are gathered and the gradients reduce-scattered on: ``dp``, or HSDP's
    shard group (``fsdp-hybrid``: ``zero``)."""
    replicas: int = 1
    """HSDP's replica groups: above 1, each reduce-scatter's gradient shard (its bytes over
    ``dp / replicas`` ranks) is then all-reduced on ``zrep``, one rank of each shard group, on the same
    stream (FSDP2's HSDP reduces its reduce-scatter output over the replicate dimension)."""
    expert_comm: str = "edp"
    """The communicator the routed experts' gradients reduce (and, sharded, their parameters gather) on: ``edp``,
    or with HSDP under expert parallelism their shard group (``ezero``, :attr:`edp` ranks then)."""
    expert_replicas: int = 1
    """The routed experts' replica groups (HSDP under expert parallelism): above 1, each expert reduce-scatter's
    shard (its bytes over :attr:`edp` ranks) is then all-reduced on ``ezrep``, on the same stream."""
    experts_apart: bool = True
    """The routed experts in buckets of their own on :attr:`expert_comm`
    (:attr:`~dpsim.strategies.layout.Layout.experts_apart`: Megatron-Core's buffers, or FSDP's expert units under
    expert parallelism); ``False``: in their blocks' buckets with the dense parameters (FSDP with ep 1). On an
    expert group of one rank (:attr:`edp` 1: ep x etp = tp x dp x cp) they are whole on every rank: nothing is
    gathered or reduce-scattered, only HSDP's replica all-reduce runs."""
    fp8: Fp8Recipe | None = None
    """The job's FP8 recipe as it runs under this strategy (its precision's
    :attr:`~dpsim.workload.precision.Precision.fp8`): where it gathers FP8 weights
    (:func:`~dpsim.workload.fp8.gathers_fp8_weights`: FSDP2's float8 all-gather, torchao
    ``enable_fsdp_float8_all_gather``, which torchtitan turns on whenever the data-parallel dimension is sharded,
    tensor parallel or not: pytorch/torchtitan@0f892e8fbae2 torchtitan/float8.py
    ``parallel_dims.dp_shard_enabled and float8_config.enable_fsdp_float8_all_gather``; or FP8 primary weights,
    ``--fp8-params``: the distributed optimizer's gather of the updated parameters too, Megatron-Core's
    ``fp8_param_gather``), parameter all-gathers move the FP8 linears' weights (:attr:`LayerWork.fp8_numel`) in
    one byte. ``None``: no FP8."""

    backward_gather_numel: tuple[float, ...] = ()
    """Per model layer (by index), the elements its backward all-gathers where parameters are
    resharded after forward: DeepSpeed ZeRO-3's reuse-distance rule
    (:func:`~dpsim.strategies.deepspeed_fetch.backward_gather_numel`, 0 for a layer kept from its
    forward, above its size where recomputation freed it again). Empty: every layer once (FSDP)."""

    def gather_bytes(self, numel: float, fp8_numel: float) -> float:
        """Bytes of an all-gather of ``numel`` parameters, ``fp8_numel`` of them FP8 linear weights."""
        return gathered_weight_bytes(numel, fp8_numel, self.weight_bytes, self.fp8)


@frozen_dataclass
class PipelinePlan:
    """A layout's step program and what it communicates."""

    program: PipelineProgram
    """What every stage runs."""
    slots: tuple[tuple[Slot, ...], ...]
    """Each stage's schedule."""
    gradient_ops: tuple[int, ...]
    """Data-parallel gradient collectives (indices into ``program.comms``)."""
    p2p_bytes: float
    """Bytes one GPU sends per transfer."""


@gc_paused
def build_pipeline_program(chunks: tuple[tuple[ChunkWork, ...], ...], layout: Layout, *, p2p_bytes: float,
                           gather_s: float, optimizer_s: Sequence[float], dp: DataParallelPlan,
                           embedding_grad_bytes: float = 0.0, blocking_p2p: bool = True,
                           a2a_contention: float = 0.0, mirror_groups: Sequence[str] = ()) -> PipelinePlan:
    """One step of ``layout`` as a :class:`~dpsim.engine.pipeline.PipelineProgram`.

    ``chunks[stage][chunk]``: work per micro-batch (:func:`~dpsim.strategies.layout.chunk_work`);
    ``p2p_bytes``: what one GPU sends per transfer; ``gather_s``: the receiver's
    tensor-parallel all-gather of a received slice (0 with sequence parallelism or
    ``tp = 1``); ``optimizer_s``: each stage's optimizer step; ``embedding_grad_bytes``:
    the tied word embedding's gradient the first and last stage all-reduce (0: none);
    ``a2a_contention``: what a hidden all-to-all costs the compute beside it, per second, with
    ``layout.moe_a2a_overlap`` (:func:`a2a_overlap_cut`); ``mirror_groups[r]``: with DualPipe, the
    communicator of stages ``r`` and ``p - 1 - r``
    (:func:`~dpsim.collectives.groups.mirror_pair_group`; ``emb``, the outermost pair's, if not given).
    """
    check_schedule(layout)
    p, v, m = layout.pp, layout.chunks, layout.micro_batches
    slots = [schedule_slots(layout.schedule, p, v, m, s, extra_warmup(layout)) for s in range(p)]
    # Forward (chunk, micro-batch) -> the backward it runs overlapped with (DualPipe's F&B).
    pairs: list[dict[tuple[int, int], tuple[int, int]]] = [
        dualpipe_pairs(p, m, s) if layout.schedule == "dualpipe" else {} for s in range(p)]
    split = any(kind == "W" for stage in slots for kind, _, _ in stage)
    if split and layout.schedule != "dualpipe":
        # ZB-H1's exchanges are played non-blocking: an op waits only for the data it needs. A
        # blocking exchange after ``B`` would hold the deferred ``W`` behind the neighbour's
        # progress, the coupling the schedule is built to remove. DualPipe's runtime waits on
        # its exchanges at each commit (:func:`dualpipe_steps`), played as such.
        blocking_p2p = False
    transfers: list[Transfer] = []
    comms: list[CommOp] = []
    comm_stages: list[tuple[int, ...]] = []

    dual = layout.schedule == "dualpipe"

    def virtual(s: int, c: int) -> int:
        # DualPipe: two chains of p virtual stages, direction c entering at stage 0 (c = 0) or
        # at stage p - 1 (c = 1); otherwise one chain, chunk c of stage s at c·p + s.
        if dual:
            return c * p + (s if c == 0 else p - 1 - s)
        return c * p + s

    def position(g: int) -> tuple[int, int]:
        if dual:
            c, k = divmod(g, p)
            return (k if c == 0 else p - 1 - k), c
        return g % p, g // p

    last_g = p * v - 1
    chain = p if dual else p * v  # virtual stages one micro-batch runs through
    # Transfers: activation of (g, j) to g+1; gradient of (g, j) to g-1 (across stages only).
    act_send: dict[tuple[int, int], int] = {}
    grad_send: dict[tuple[int, int], int] = {}
    for g in range(last_g + 1):
        s, c = position(g)
        has_next, has_prev = g % chain < chain - 1, g % chain > 0
        nxt = position(g + 1)[0] if has_next else s
        prev = position(g - 1)[0] if has_prev else s
        for j in range(m // 2 if dual else m):
            if g < last_g and nxt != s:
                act_send[g, j] = len(transfers)
                transfers.append(Transfer(name=f"activation chunk {c} micro-batch {j + 1} -> stage {nxt}", src=s,
                                          dst=nxt, size_bytes=p2p_bytes, kind="p2p"))
            if g > 0 and prev != s:
                grad_send[g, j] = len(transfers)
                transfers.append(Transfer(name=f"gradient chunk {c} micro-batch {j + 1} -> stage {prev}", src=s,
                                          dst=prev, size_bytes=p2p_bytes, kind="p2p"))
    # Blocking exchanges (Megatron's and DeepSpeed's point-to-point calls): a receiver, on
    # reaching its receive, hands the sender a zero-byte "ready" token; the sender's data
    # leaves once it holds it; both wait until the data has landed.
    ready: dict[int, int] = {}
    if blocking_p2p:
        for t in range(len(transfers)):
            tr = transfers[t]
            ready[t] = len(transfers)
            transfers.append(Transfer(name=f"ready to receive: {tr.name}", src=tr.dst, dst=tr.src, size_bytes=0.0,
                                      kind="p2p"))
    deepspeed = layout.schedule == "deepspeed"
    overlap = dp.overlap and not deepspeed
    fwd = [[w.forward_s for w in stage] for stage in chunks]
    bwd = [[w.backward_s for w in stage] for stage in chunks]
    wgrad = [[w.weight_grad_s for w in stage] for stage in chunks]

    def new_comm(name: str, op: str, size: float, kind: str, group: str, stages: tuple[int, ...]) -> int:
        comms.append(CommOp(name=name, op=op, size_bytes=float(size), kind=kind, group=group))
        comm_stages.append(stages)
        return len(comms) - 1

    def replicate(label: str, numel: float, expert: bool = False) -> list[int]:
        # HSDP: the reduce-scatter's gradient shard (numel over the shard group's ranks) all-reduced across
        # the replica groups, queued right behind it on the same stream, so it starts when that one ends;
        # the routed experts' shard (over their own shard group) across their replicas, on a group of its own.
        replicas, shard, group = ((dp.expert_replicas, dp.edp, "ezrep") if expert
                                  else (dp.replicas, dp.dp // max(1, dp.replicas), "zrep"))
        if replicas <= 1:
            return []
        return [new_comm(f"all-reduce gradient shard {label} across replicas", "all_reduce",
                         -(-numel // shard) * dp.grad_bytes, "allreduce", group, (s,))]

    gradient_ops: list[int] = []
    stage_programs: list[StageProgram] = []
    # Collectives between two stages before the optimizer: the tied embedding's gradient
    # (first and last stage); DualPipe's two copies of each stage's parameters (stage r holds
    # stages r and p - 1 - r) summed between the two stages that hold them, costed on the
    # two-stage pair model, placed where that pair sits.
    pair_op: dict[int, int] = {}
    if dual:
        for r in range(p // 2):
            numel = sum(w.grad_numel for w in chunks[r])
            pair_op[r] = pair_op[p - 1 - r] = new_comm(
                f"all-reduce gradients of the two parameter copies (stages {r} and {p - 1 - r})", "all_reduce",
                numel * dp.grad_bytes, "allreduce", mirror_groups[r] if mirror_groups else "emb", (r, p - 1 - r))
    elif embedding_grad_bytes > 0 and p > 1:
        pair_op[0] = pair_op[p - 1] = new_comm("all-reduce tied embedding gradient (first and last stage)",
                                               "all_reduce", embedding_grad_bytes, "allreduce", "emb", (0, p - 1))
    for s in range(p):
        ops: list[StageOp] = []
        at_start: list[int] = []
        dp_ops: list[int] = []
        gather_before: dict[tuple[int, int], int] = {}  # (chunk, layer) -> the all-gather it waits for
        launches_after_layer: dict[tuple[int, int], list[int]] = {}  # (chunk, layer) -> buckets
        end_ops: list[int] = []  # launched after the stage's last backward
        # FSDP without pipeline stages reshards after every forward (torchtitan's apply_fsdp:
        # ``reshard_after_forward = not pp_enabled``): each micro-batch gathers every bucket for its
        # forward and again for its backward, and reduce-scatters its gradients (FSDP2's default).
        # A micro-batch's backward gathers, then the next micro-batch's forward gathers, are
        # launched when its forward starts, so that the stream holds them in the order they are used.
        reshard = dp.dp > 1 and reshards_after_forward(layout)
        gather_fwd: dict[tuple[int, int, int], tuple[int, ...]] = {}  # (chunk, micro-batch, layer) -> all-gathers
        gather_bwd: dict[tuple[int, int, int], tuple[int, ...]] = {}
        launch_at_forward: dict[tuple[int, int], list[int]] = {}  # (chunk, micro-batch) -> gathers
        rs_after: dict[tuple[int, int, int], list[int]] = {}  # (chunk, micro-batch, layer) -> reduce-scatters
        if reshard:
            for c in range(v):
                # Under expert parallelism FSDP wraps the routed experts apart (torchtitan's apply_fsdp:
                # ``fully_shard(transformer_block.moe.experts, mesh=edp_mesh)`` when ep > 1), their buckets on
                # the experts' shard group (fsdp's edp, HSDP's ezero), queued on the one stream in the order the
                # layers use them, the block's first; with ep 1 every parameter is in one set of buckets.
                if dp.experts_apart and dp.edp * dp.expert_replicas > 1:
                    sets = [(dp.shard_comm, False, "", _dense_numel), (dp.expert_comm, True, "experts ", _expert_numel)]
                elif dp.experts_apart:  # one expert shard per rank, no replicas: the experts need no collective
                    sets = [(dp.shard_comm, False, "", _dense_numel)]
                else:
                    sets = [(dp.shard_comm, False, "", _all_numel)]
                tagged = [(group, expert, label0, x, bucket, numel_of) for group, expert, label0, numel_of in sets
                          for x, bucket in enumerate(gradient_buckets(chunks[s][c], dp.bucket_elements, numel_of))]
                # The experts whole on each rank (edp 1): no gather and no reduce-scatter, HSDP's all-reduce only.
                local = dp.edp == 1
                forward_order = sorted(tagged, key=lambda t: (min(t[4][2]), t[1]))
                backward_order = sorted(tagged, key=lambda t: (-max(t[4][2]), t[1]))
                last_layer = min((min(t[4][2]) for t in tagged), default=0)
                by_index = {lw.index: lw for lw in chunks[s][c].layers}
                fp8_of = lambda members, numel_of: sum(_FP8_OF[numel_of](by_index[i]) for i in members)  # noqa: E731
                for j in range(m):
                    forward_gathers, backward_gathers = [], []
                    for group, expert, label0, x, (_, numel, members), numel_of in forward_order:
                        if expert and local:
                            continue
                        op = new_comm(f"all-gather parameters {label0}chunk {c} micro-batch {j + 1} bucket {x} "
                                      f"(forward)", "all_gather",
                                      dp.gather_bytes(numel, fp8_of(members, numel_of)), "allgather",
                                      group, (s,))
                        forward_gathers.append(op)
                        for i in members:
                            gather_fwd[c, j, i] = gather_fwd.get((c, j, i), ()) + (op,)
                    for group, expert, label0, x, (first_layer, numel, members), numel_of in backward_order:
                        again = sum(dp.backward_gather_numel[i] for i in members) if dp.backward_gather_numel \
                            else numel
                        if again > 0 and not (expert and local):  # DeepSpeed keeps a bucket reused soon: none
                            fp8 = fp8_of(members, numel_of) * min(1.0, again / numel) if numel else 0.0
                            op = new_comm(f"all-gather parameters {label0}chunk {c} micro-batch {j + 1} bucket {x} "
                                          f"(backward)", "all_gather", dp.gather_bytes(again, fp8), "allgather",
                                          group, (s,))
                            backward_gathers.append(op)
                            for i in members:
                                gather_bwd[c, j, i] = gather_bwd.get((c, j, i), ()) + (op,)
                        rs = [] if expert and local else [new_comm(
                            f"reduce-scatter {label0}chunk {c} micro-batch {j + 1} bucket {x}", "reduce_scatter",
                            numel * dp.grad_bytes, "reducescatter", group, (s,))]
                        # Without overlap every bucket waits for the micro-batch's whole backward.
                        launched = [*rs, *replicate(f"{label0}chunk {c} micro-batch {j + 1} bucket {x}", numel,
                                                   expert)]
                        rs_after.setdefault((c, j, first_layer if overlap else last_layer), []).extend(launched)
                        dp_ops.extend(launched)
                    if j == 0:
                        at_start.extend(forward_gathers)
                    else:
                        launch_at_forward.setdefault((c, j - 1), []).extend(forward_gathers)
                    launch_at_forward[c, j] = backward_gathers + launch_at_forward.get((c, j), [])
        # Dense parameters over dp, a mixture of experts' routed experts over edp (with the dense ones when
        # not apart: FSDP with ep 1). HSDP's experts on a shard group of one rank (ep = the shard group) still
        # all-reduce across the replicas, with nothing to gather or reduce-scatter.
        sets = ((dp.shard_comm, dp.dp, _dense_numel, ""), (dp.expert_comm, dp.edp, _expert_numel, "experts ")) \
            if dp.experts_apart else ((dp.shard_comm, dp.dp, _all_numel, ""),)
        groups = [] if reshard else [(group, size, numel, label) for group, size, numel, label in sets
                                     if (size > 1 or (numel is _expert_numel and dp.expert_replicas > 1))
                                     and any(numel(w) for stage in chunks for c in stage for w in c.layers)]
        # Parameter gathers (zero1, fsdp), queued on the stage's one stream in the order its schedule first
        # uses them, as a framework prefetches them: the chunk whose first forward comes first in ``slots``
        # (DualPipe's stages past p/2 start with chunk 1), then by layer, a block's dense bucket before its
        # experts' (as the reshard path above orders them).
        first_use = {}
        for k, (kind, cc, _) in enumerate(slots[s]):
            if kind == "F":
                first_use.setdefault(cc, k)
        gathers: list[tuple[int, int, int, int]] = []  # (chunk's first forward, first layer, set, op)
        for n_set, (group, size_, numel_of, label0) in enumerate(groups):
            alone = size_ == 1  # an expert group of one rank: only the replica all-reduce
            for c in range(v):
                work = chunks[s][c]
                buckets = gradient_buckets(work, dp.bucket_elements, numel_of)
                fsdp = dp.strategy in ("fsdp", "fsdp-hybrid")
                if not alone and (fsdp or (dp.strategy == "zero1" and overlap and not dp.internlm)):
                    # Gathered bucket by bucket in forward order; each layer's first forward
                    # waits only for the bucket holding its parameters.
                    label = "all-gather parameters" if fsdp else "all-gather updated parameters"
                    for x in range(len(buckets) - 1, -1, -1):
                        _, numel, members = buckets[x]
                        fp8 = sum(_FP8_OF[numel_of](lw) for lw in work.layers if lw.index in members)
                        size = dp.gather_bytes(numel, fp8)
                        op = new_comm(f"{label} {label0}chunk {c} bucket {x}", "all_gather", size,
                                      "allgather", group, (s,))
                        gathers.append((first_use[c], min(members), n_set, op))
                        for i in members:
                            gather_before[c, i] = op
                # DeepSpeed's engine of 2021 all-reduces ZeRO-1's gradients: stage 1 runs on
                # stage2.py with contiguous_gradients forced off ("meaningless in stage 1",
                # runtime/engine.py@0457bb1cb6), so reduce_ipg_grads takes buffered_reduce_fallback
                # with rank None -> allreduce_bucket -> dist.all_reduce of each bucket of
                # reduce_bucket_size elements (runtime/zero/stage2.py@0457bb1cb6): twice a
                # reduce-scatter's volume, before the all-gather after the step.
                # InternLM's ZeRO-1 all-reduces every bucket over the data-parallel group too.
                reduce = "all_reduce" if dp.strategy == "ddp" or deepspeed or dp.internlm else "reduce_scatter"
                if overlap:
                    for x, (first_layer, numel, _) in enumerate(buckets):
                        op = () if alone else (new_comm(
                            f"{'all-reduce' if reduce == 'all_reduce' else 'reduce-scatter'} {label0}chunk {c} "
                            f"bucket {x}", reduce, numel * dp.grad_bytes,
                            "allreduce" if reduce == "all_reduce" else "reducescatter", group, (s,)),)
                        launched = [*op,
                                    *replicate(f"{label0}chunk {c} bucket {x}", numel, numel_of is _expert_numel)]
                        launches_after_layer.setdefault((c, first_layer), []).extend(launched)
                        dp_ops.extend(launched)
                else:
                    numel = sum(numel_of(w) for w in work.layers)
                    op = () if alone else (new_comm(
                        f"{'all-reduce' if reduce == 'all_reduce' else 'reduce-scatter'} {label0}chunk {c} "
                        f"gradients", reduce, numel * dp.grad_bytes,
                        "allreduce" if reduce == "all_reduce" else "reducescatter", group, (s,)),)
                    launched = [*op,
                                *replicate(f"{label0}chunk {c} gradients", numel, numel_of is _expert_numel)]
                    end_ops.extend(launched)
                    dp_ops.extend(launched)
        at_start.extend(op for *_, op in sorted(gathers))
        gradient_ops += dp_ops
        # The op that completes a micro-batch's gradients: the backward, or with a zero-bubble
        # schedule its weight-gradient pass W (the input-gradient pass B runs before).
        grad_kind = "W" if split else "B"
        final_b = {c: max(j for kind, cc, j in slots[s] if kind == grad_kind and cc == c) for c in range(v)}
        first_f = {c: min(j for kind, cc, j in slots[s] if kind == "F" and cc == c) for c in range(v)}
        n_b = sum(1 for kind, _, _ in slots[s] if kind == grad_kind)
        b_seen = 0
        tail_ops = end_ops + ([pair_op[s]] if s in pair_op else [])
        # Seconds each paired op runs shorter with the all-to-all overlap, spread over its layers
        # where it runs layer by layer.
        cut: dict[tuple[str, int, int], float] = {}
        for fi, bi in a2a_pairs(layout, slots[s], s):
            (_, cf, jf), (_, cb, jb) = slots[s][fi], slots[s][bi]
            cut["F", cf, jf], cut["B", cb, jb] = a2a_overlap_cut(chunks[s][cf], chunks[s][cb], a2a_contention)

        def share(kind: str, c: int, j: int, total: float) -> float:
            return 1.0 - cut.get((kind, c, j), 0.0) / total if total > 0 else 1.0
        pending: list[int] = []  # transfers of blocking exchanges the next op waits for
        # A TransformerEngine module casts its weights to FP8 at the step's first micro-batch and reads
        # the cached cast at the others (LayerWork.first_forward_s): each chunk's first forward run.
        uncast = set(range(v))
        for kind, c, j, xsend, xrecv in _stage_sequence(slots[s], s, p, m, deepspeed=deepspeed,
                                                        blocking=blocking_p2p, act_send=act_send,
                                                        grad_send=grad_send,
                                                        interleaved_warmup=_interleaved_warmup(layout, s),
                                                        dual_virtual=virtual if dual else None):
            g = virtual(s, c)
            work = chunks[s][c]
            if kind == "exchange":
                # Few ops (the engine's cost is per op): receives are posted by the op that
                # just ended, unless an earlier exchange is still in flight (DeepSpeed's
                # sequential commands); each send is one op; the next op waits for the data.
                tokens = tuple(ready[t] for t in xrecv)
                if tokens:
                    if pending or not ops:
                        ops.append(StageOp(kind="p2p", name="post receive", duration_s=0.0,
                                           needs=tuple(pending), sends=tokens))
                        pending.clear()
                    else:
                        ops[-1] = _with_sends(ops[-1], ops[-1].sends + tokens)
                for t in xsend:
                    ops.append(StageOp(kind="p2p", name=f"send {transfers[t].name}", duration_s=0.0,
                                       needs=(ready[t], *pending), sends=(t,)))
                pending.extend(xsend + xrecv)
                continue
            if kind == "F":
                cast = c in uncast
                uncast.discard(c)
                needs = (act_send[g - 1, j],) if (g - 1, j) in act_send else ()
                sends = (act_send[g, j],) if (g, j) in act_send else ()
                extra = gather_s if needs else 0.0
                paired = pairs[s].get((c, j))
                if paired is not None:
                    # DualPipe's overlapped pair starts once both chunks' inputs are in.
                    gb = virtual(s, paired[0]) + 1
                    needs += (grad_send[gb, paired[1]],) if (gb, paired[1]) in grad_send else ()
                if blocking_p2p:
                    needs, sends = tuple(pending), ()
                    pending.clear()
                if reshard:
                    for k, lw in enumerate(work.layers):
                        first, last = k == 0, k == len(work.layers) - 1
                        gate = gather_fwd.get((c, j, lw.index), ())
                        ops.append(StageOp(kind="forward", name=f"forward chunk {c} micro-batch {j + 1} layer "
                                                                f"{lw.index}",
                                           duration_s=lw.forward_s * share("F", c, j, fwd[s][c])
                                           + (extra if first else 0.0) + (lw.first_forward_s if cast else 0.0),
                                           needs=needs if first else (), sends=sends if last else (),
                                           waits=gate,
                                           launches=tuple(launch_at_forward.get((c, j), ())) if first else (),
                                           micro_batch=j, chunk=c))
                    continue
                if j == first_f[c] and any(key[0] == c for key in gather_before):
                    for k, lw in enumerate(work.layers):
                        first, last = k == 0, k == len(work.layers) - 1
                        gate = gather_before.get((c, lw.index))
                        ops.append(StageOp(kind="forward", name=f"forward chunk {c} micro-batch {j + 1} layer "
                                                                f"{lw.index}",
                                           duration_s=lw.forward_s * share("F", c, j, fwd[s][c])
                                           + (extra if first else 0.0) + (lw.first_forward_s if cast else 0.0),
                                           needs=needs if first else (), sends=sends if last else (),
                                           waits=(gate,) if gate is not None else (), micro_batch=j, chunk=c))
                    continue
                ops.append(StageOp(kind="forward", name=f"forward chunk {c} micro-batch {j + 1}",
                                   duration_s=fwd[s][c] - cut.get(("F", c, j), 0.0) + extra
                                   + (sum(lw.first_forward_s for lw in work.layers) if cast else 0.0), needs=needs,
                                   sends=sends, micro_batch=j,
                                   chunk=c))
                continue
            if kind == "B" and split:
                needs = (grad_send[g + 1, j],) if (g + 1, j) in grad_send else ()
                sends = (grad_send[g, j],) if (g, j) in grad_send else ()
                extra = gather_s if needs else 0.0
                if blocking_p2p:
                    needs, sends = tuple(pending), ()
                    pending.clear()
                gates = tuple(sorted({op for (cc, jj, _), ops_ in gather_bwd.items() if (cc, jj) == (c, j)
                                      for op in ops_}))
                # A paired backward's all-to-alls are in its input-gradient pass (DualPipe's F&B).
                ops.append(StageOp(kind="backward", name=f"input gradient chunk {c} micro-batch {j + 1}",
                                   duration_s=bwd[s][c] - wgrad[s][c] - cut.get(("B", c, j), 0.0) + extra,
                                   needs=needs, sends=sends,
                                   waits=gates, micro_batch=j, chunk=c))
                continue
            b_seen += 1
            if kind == "W":
                # Needs nothing from another stage: non-blocking, it runs while the input
                # gradient's exchange is in flight (the next F or B waits for it); DualPipe
                # completes the pending exchanges first (``_weight_chunk``).
                needs = sends = ()
                if blocking_p2p and pending:  # DualPipe's _weight_chunk commits first
                    needs = tuple(pending)
                    pending.clear()
            else:
                needs = (grad_send[g + 1, j],) if (g + 1, j) in grad_send else ()
                sends = (grad_send[g, j],) if (g, j) in grad_send else ()
            # DeepSpeed also all-gathers the stage's own output before backward: it kept only its
            # slice after sending it (``_exec_forward_pass`` empties ``outputs.data``;
            # ``_exec_backward_pass`` restores it with ``PartitionedTensor.full()``,
            # deepspeed/runtime/pipe/engine.py@0457bb1cb6), then the received gradient's slices.
            extra = (2 if deepspeed else 1) * gather_s if needs and kind == "B" else 0.0
            if blocking_p2p and kind == "B":
                needs, sends = tuple(pending), ()
                pending.clear()
            label = "weight gradient" if kind == "W" else "backward"
            last_of_stage = b_seen == n_b and not deepspeed
            tail: list[int] = list(tail_ops) if last_of_stage else []
            if reshard:
                layers = list(reversed(work.layers))
                for k, lw in enumerate(layers):
                    first, last = k == 0, k == len(layers) - 1
                    launch = list(rs_after.get((c, j, lw.index), ())) + (tail if last else [])
                    gate = gather_bwd.get((c, j, lw.index), ()) if kind == "B" else ()
                    ops.append(StageOp(kind="backward", name=f"{label} chunk {c} micro-batch {j + 1} layer {lw.index}",
                                       duration_s=(lw.weight_grad_s if split else
                                                   lw.backward_s * share("B", c, j, bwd[s][c]))
                                       + (extra if first else 0.0),
                                       needs=needs if first else (), sends=sends if last else (),
                                       waits=gate,
                                       launches=tuple(launch), micro_batch=j, chunk=c))
            elif j == final_b[c] and any(key[0] == c for key in launches_after_layer):
                # Layer by layer, so that buckets launch as their gradients become ready.
                layers = list(reversed(work.layers))
                for k, lw in enumerate(layers):
                    first, last = k == 0, k == len(layers) - 1
                    launch = list(launches_after_layer.get((c, lw.index), ()))
                    if last:
                        launch += tail
                    ops.append(StageOp(kind="backward", name=f"{label} chunk {c} micro-batch {j + 1} layer {lw.index}",
                                       duration_s=(lw.weight_grad_s if split else
                                                   lw.backward_s * share("B", c, j, bwd[s][c]))
                                       + (extra if first else 0.0),
                                       needs=needs if first else (), sends=sends if last else (),
                                       launches=tuple(launch), micro_batch=j, chunk=c))
            else:
                ops.append(StageOp(kind="backward", name=f"{label} chunk {c} micro-batch {j + 1}",
                                   duration_s=(wgrad[s][c] if split else bwd[s][c] - cut.get(("B", c, j), 0.0)) + extra,
                                   needs=needs, sends=sends,
                                   launches=tuple(tail), micro_batch=j, chunk=c))
        if pending or deepspeed:
            # The last exchange completes before the step goes on (DeepSpeed's ReduceTiedGrads
            # and ReduceGrads follow the stage's last pipe step).
            ops.append(StageOp(kind="p2p", name="reduce gradients after the pipeline" if deepspeed else
                               "wait for transfers", duration_s=0.0, needs=tuple(pending),
                               launches=tuple(tail_ops) if deepspeed else ()))
            pending.clear()
        waits = tuple(dp_ops) + ((pair_op[s],) if s in pair_op else ())
        ops.append(StageOp(kind="optimizer", name="optimizer", duration_s=optimizer_s[s], waits=waits))
        casts = [new_comm(name, "broadcast", size, "broadcast", dp.zero_comm, (s,))
                 for name, size in dp.internlm[s].broadcasts(dp.weight_bytes)] if dp.internlm and groups else []
        if casts:
            ops[-1] = StageOp(kind="optimizer", name="optimizer", duration_s=optimizer_s[s], waits=waits,
                              launches=tuple(casts))
            ops.append(StageOp(kind="optimizer", name="wait for parameter broadcasts", duration_s=0.0,
                               waits=tuple(casts)))
        elif groups and dp.strategy == "zero1" and not overlap and not dp.internlm:
            ags = [new_comm(f"all-gather updated parameters {label0}chunk {c}", "all_gather",
                            dp.gather_bytes(sum(numel_of(w) for w in chunks[s][c].layers),
                                            sum(_FP8_OF[numel_of](w) for w in chunks[s][c].layers)), "allgather",
                            group, (s,))
                   for group, _, numel_of, label0 in groups for c in range(v)]
            ops[-1] = StageOp(kind="optimizer", name="optimizer", duration_s=optimizer_s[s], waits=waits,
                              launches=tuple(ags))
            ops.append(StageOp(kind="optimizer", name="wait for parameter all-gather", duration_s=0.0,
                               waits=tuple(ags)))
        stage_programs.append(StageProgram(ops=tuple(ops), comms_at_start=tuple(at_start)))
    program = PipelineProgram(stages=tuple(stage_programs), comms=tuple(comms), comm_stages=tuple(comm_stages),
                              transfers=tuple(transfers))
    return PipelinePlan(program=program, slots=tuple(tuple(x) for x in slots), gradient_ops=tuple(gradient_ops),
                        p2p_bytes=p2p_bytes)


_new = object.__new__


def _with_sends(op: StageOp, sends: tuple[int, ...]) -> StageOp:
    """``dataclasses.replace(op, sends=sends)``, several times faster (one op in two of a blocking
    schedule is rebuilt so): filling a new op's ``__dict__`` builds exactly the object the frozen
    dataclass's ``__init__`` would (``StageOp`` has no ``__post_init__``)."""
    new = _new(StageOp)
    new.__dict__.update(op.__dict__, sends=sends)
    return new


def _dense_numel(lw) -> int:
    return lw.grad_numel - lw.expert_grad_numel


def _expert_numel(lw) -> int:
    return lw.expert_grad_numel


def _all_numel(lw) -> int:
    return lw.grad_numel


# Of each set's parameters (above), the FP8 weights its all-gathers move in one byte under the job's recipe
# (LayerWork.fp8_numel, the count the memory holds): a mixture of experts' routed experts' with the experts.
_FP8_OF = {_dense_numel: lambda lw: lw.fp8_numel - lw.expert_fp8_numel,
           _expert_numel: lambda lw: lw.expert_fp8_numel, _all_numel: lambda lw: lw.fp8_numel}


def gradient_buckets(work: ChunkWork, bucket_elements: int, numel_of=_dense_numel) -> list[tuple[int, int, tuple[int, ...]]]:
    """Gradient buckets of a chunk in backward order: ``(layer whose backward completes it,
    parameters, its layers)``; a layer larger than the bucket forms one of its own.
    ``numel_of``: the parameters of a layer the buckets hold (its dense ones, or its experts')."""
    return layer_buckets(work.layers, bucket_elements, numel_of)


def layer_buckets(layers: Sequence[LayerWork], bucket_elements: int,
                  numel_of=_dense_numel) -> list[tuple[int, int, tuple[int, ...]]]:
    """:func:`gradient_buckets` of a chunk's ``layers`` (its :attr:`ChunkWork.layers`, without building one)."""
    out: list[tuple[int, int, tuple[int, ...]]] = []
    current, members = 0, []
    for lw in reversed(layers):
        numel = numel_of(lw)
        if numel == 0:
            continue
        if current and current + numel > bucket_elements:
            out.append((members[-1], current, tuple(members)))
            current, members = 0, []
        current += numel
        members.append(lw.index)
    if current:
        out.append((members[-1], current, tuple(members)))
    return out
