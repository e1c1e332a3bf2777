"""MT-NLG's pipeline as DeepSpeed 0.5 ran it, on the engine: lock-step steps and blocking sends (ninth pass).

The what-if runs MT-NLG's 35 stages as Megatron-LM's 1F1B with eager sends of each tensor-parallel rank's share
(docs/whatif.md, Pipeline sends). DeepSpeed's pipeline engine, which MT-NLG ran, differs in two things its code
shows (microsoft/DeepSpeed, deepspeed/runtime/pipe/):

- its sends block: ``p2p.send`` and ``p2p.recv`` are ``dist.broadcast`` in a group of the two ranks with
  ``async_op`` forced to False (p2p.py, v0.3.13 to v0.5.3; from v0.5.4 ``dist.send`` / ``dist.recv`` under
  PyTorch 1.8 or later), so the stream after a send waits until the neighbour has reached its matching call:
  the engine's rendezvous sends. ``TrainSchedule`` (schedule.py) orders a step's calls so that neighbours
  meet: a forward step receives the activation and then sends the previous backward's gradient, a backward
  step sends the previous forward's output and then receives the gradient;
- what crosses: the activation goes as each tensor-parallel rank's share (``is_pipe_partitioned``), with,
  until September 2021, the attention mask beside it (a [1, 1, s, s] bool tensor, ``inputs[2]``); the
  gradient went whole from every tensor-parallel rank (``is_grad_partitioned = False``, engine.py, v0.3.13 to
  v0.5.3) until commit e2fdd254e (2021-09-29, "Big science related changes") partitioned it and dropped the
  mask. Which DeepSpeed MT-NLG ran is not published.

This runs each MT-NLG row's stages with the what-if's own seconds for a stage's forward and backward, in
``TrainSchedule``'s order on ``World(send_mode="rendezvous")``, for both versions, and prints the step the
what-if would predict with each in place of its own pipeline (the rest of its step kept). A diagnostic:
nothing is fed back into the model.

Run: python benchmarks/whatif_deepspeed_pipe.py  (about half a minute)
"""

from __future__ import annotations

import numpy as np


def step_microbatch(step: int, stage: int, stages: int) -> tuple[int, bool]:
    """DeepSpeed's ``TrainSchedule._step_to_micro_batch``: the microbatch a stage works on at a step, and whether
    it is a forward (even stages go forward on even steps, odd ones on odd steps)."""
    if step % 2 == stage % 2:
        base = step // 2 if step % 2 == 0 else (step - 1) // 2
        return base - stage // 2, True
    if step % 2 == 0:
        return step // 2 - stages + (stage + 1) // 2, False
    return (step - 1) // 2 - stages + 1 + stage // 2, False


def deepspeed_program(stages: int, microbatches: int, forward, backward, act_parts, grad_parts):
    """The rank program of ``TrainSchedule`` (stage = rank): each step's sends and receives, then its compute.
    ``act_parts`` / ``grad_parts``: the byte counts of the tensors one boundary's activation / gradient is sent as."""
    from simulator.cost.meta import MetaArray

    def parts(sizes):
        return [MetaArray((int(n),), np.uint8) for n in sizes]

    acts, grads = parts(act_parts), parts(grad_parts)

    def valid(j: int) -> bool:
        return 0 <= j < microbatches

    def program(dev) -> float:
        s = dev.rank
        prev = -1
        for k in range(2 * (microbatches + stages - 1)):
            j, fwd = step_microbatch(k, s, stages)
            if fwd:
                if valid(j) and s > 0:
                    for t in range(len(acts)):
                        dev.recv(s - 1, 100 + t)
                if valid(prev) and s > 0:
                    for t, m in enumerate(grads):
                        dev.send(m, s - 1, 200 + t)
            else:
                if valid(prev) and s < stages - 1:
                    for t, m in enumerate(acts):
                        dev.send(m, s + 1, 100 + t)
                if valid(j) and s < stages - 1:
                    for t in range(len(grads)):
                        dev.recv(s + 1, 200 + t)
            if valid(j):
                seconds = forward[s] if fwd else backward[s]
                dev.compute("F" if fwd else "B", lambda x: x, acts[0], seconds=seconds, keep=False)
            prev = j
        return dev.clock

    return program


def main() -> None:
    from simulator.core.world import World
    from simulator.cost.model import CostModel
    from simulator.cost.systems import System
    from simulator.cost.systems import system as named_system
    from simulator.parallel.whatif.layer import PerRank
    from simulator.parallel.whatif.outside import MT_NLG, outside_rows
    from simulator.parallel.whatif.step import simulate
    from simulator.parallel.whatif.validate import validate

    rows = [r for r in outside_rows() if r.table == MT_NLG]
    print(f"{'row':32} {'published':>9} {'what-if':>8} {'speed':>5}   {'DS, grads whole':>15} {'speed':>5}   "
          f"{'DS, grads split':>15} {'speed':>5}")  # fmt: skip
    for checked in validate(rows):
        row, report = checked.row, checked.report
        model, layout = row.model, row.layout
        system = row.system if isinstance(row.system, System) else named_system(row.system)
        result, program = simulate(model, layout, system)
        own_end = max(t.end for t in program.times.values())
        a = system.achieved
        z = PerRank.of(model, layout)
        whole = z.T * z.h * z.e  # one microbatch's activation (or its gradient) at a stage boundary, bytes
        share = whole / layout.tp
        mask = model.seq * model.seq  # Megatron-LM's [1, 1, s, s] bool attention mask
        regather = program.regather  # the share all-gathered inside the node before it is used
        forward = [program.seconds[s]["F"] + (regather if s > 0 else 0.0) for s in range(layout.pp)]
        backward = [program.seconds[s]["B"] + (regather if s < layout.pp - 1 else 0.0) for s in range(layout.pp)]
        link = CostModel(latency=a.nic_latency, bandwidth=a.nic_p2p_bandwidth, flops=system.peak_flops, name="p2p")
        ends = []
        for act_parts, grad_parts in (([share, mask], [whole]), ([share], [share])):
            prog = deepspeed_program(layout.pp, layout.microbatches, forward, backward, act_parts, grad_parts)
            run = World(layout.pp, cost=link, send_mode="rendezvous", keep_payloads=False, leftovers="error").run(prog)
            ends.append(max(run.outputs))
        steps = [report.step_seconds + end - own_end for end in ends]
        print(
            f"{row.label:32} {row.published:9.1f} {report.step_seconds:8.2f} {row.published / report.step_seconds:5.2f}   "
            f"{steps[0]:15.2f} {row.published / steps[0]:5.2f}   {steps[1]:15.2f} {row.published / steps[1]:5.2f}"
        )  # fmt: skip


if __name__ == "__main__":
    main()
