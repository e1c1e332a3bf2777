"""Our rank programs on real processes: the same programs on torch.distributed ranks (gloo on CPU, NCCL on GPUs).

A rank program written for the simulator's ``Device`` runs unchanged on real processes and records the
same kind of trace, with measured times:

    launch.py      TorchWorld (N local rank processes, kept up for several runs) and launch (one run)
    rankproc.py    one rank process as the launcher holds it (its pipes), started and stopped
    replies.py     gathering the ranks' replies to a run; a failure turned into one error naming its cause
    loopback.py    the launcher's store, listening on 127.0.0.1 only; gloo kept on the loopback interface
    lifeline.py    a rank exits when its launcher does, however the launcher ends
    stderr_tail.py each rank's stderr passed on to the launcher's, its last lines kept for errors
    device.py      TorchDevice: the Device API over torch.distributed, inside one rank process
    messages.py    its point-to-point messages (headers, contracts, waits) over torch.distributed
    native.py      torch.distributed's own collectives behind the simulator's collective signatures
    groups.py      subgroups' process groups, created by their members alone without any deadlock
    wire.py        what a message is on the wire (shape/dtype header, payload bytes); NumPy only
    recording.py   what each rank records, and the merge into one Trace; NumPy only
    worker.py      the body of a rank process (join the group, run jobs, report failures)
    torchrun.py    one rank of a run torchrun started (env://); its command line is simulator.cli.torchrun
    compare_runs.py
                   a simulation and a real run compared, message by message; no torch
    crosscheck.py  PyTorch's own pipelining, DTensor and tensor-parallel layers on real ranks, for comparison
    pool.py        large result buffers reused once unreferenced; errors.py: this package's errors
    heap.py        rank processes keep the memory they free (no fresh pages for each large buffer)

Calibration (``simulator.calibration``) sits above this package; torch programs on simulated ranks
(``simulator.torchsim``) run the other way and import nothing from here.

Importing this package does not import torch: only the modules that need it do, so torch stays an
optional extra. Typical use:

    from simulator.real.launch import TorchWorld
    with TorchWorld(2) as world:                        # 2 gloo processes on 127.0.0.1
        result = world.run(program, x)                  # like World(2).run(program, x)
        result.outputs, result.trace                    # the same Trace, measured times
"""

__all__: list[str] = []  # each module is imported by name (most need torch, an optional extra)
