"""Real processes: the same rank programs on torch.distributed, calibration, and predictions of real runs.

The torch.distributed backend runs the same rank programs on real processes (gloo on CPU, NCCL on
GPUs) and records the same kind of trace, with measured times:

    launch.py      TorchWorld (N local rank processes, kept up for several runs) and launch (one run)
    rankproc.py    one rank process as the launcher holds it (its pipes), started and stopped
    replies.py     gathering the ranks' replies to a run; a failure turned into one error naming its cause
    loopback.py    the launcher's store, listening on 127.0.0.1 only; gloo kept on the loopback interface
    lifeline.py    a rank exits when its launcher does, however the launcher ends
    stderr_tail.py each rank's stderr passed on to the launcher's, its last lines kept for errors
    torch.py       TorchDevice: the Device API over torch.distributed, inside one rank process
    native.py      torch.distributed's own collectives behind the simulator's collective signatures
    groups.py      subgroups' process groups, created by their members alone without any deadlock
    wire.py        what a message is on the wire (shape/dtype header, payload bytes); NumPy only
    recording.py   what each rank records, and the merge into one Trace; NumPy only
    worker.py      the body of a rank process (join the group, run jobs, report failures)
    torchrun.py    one rank of a run torchrun started (env://); its command line is simulator.cli.torchrun
    compare.py     a simulation and a real run compared, message by message; no torch
    calibrate.py   ping-pong measurements fitted to a cost model; costfile.py reads and writes it;
                   probes.py and fit.py measure and fit; prediction.py sets predictions beside real runs
    crosscheck.py  PyTorch's own pipelining, DTensor and tensor-parallel layers, for comparison
    torch_schedules.py  torch.distributed.pipelining's schedule classes asked for their compute order (no ranks)
    demos.py       small rank programs: point-to-point patterns, failures, collectives
    scripted.py    rank programs made of data (steps), for property tests of real runs against simulations
    pool.py        large result buffers reused once unreferenced; errors.py: the backend's errors
    heap.py        rank processes keep the memory they free (no fresh pages for each large buffer)

Torch programs on simulated ranks (``simulate_torch``: unchanged torch.distributed and DTensor code, each rank
a thread that runs only while its simulated device runs; see docs/torch.md):

    torch_sim.py        simulate_torch, and run_real: the same program on a TorchWorld's real ranks
    torch_reference.py  Reference.of_torch: the model on one device, named module by module
    torch_programs.py   example programs (the seed split, tensor-parallel MLPs, a pipeline) and their bugs
    torch_ranks.py      a rank's thread and the baton it passes with its greenlet; what it records
    torch_c10d.py       torch.distributed's state per simulated rank; the "simulator" backend
    torch_names.py      modules named by their path, through torch's global module hooks
    torch_pricing.py    the aten ops a rank runs, priced by the cost model
    torch_pg.py         SimProcessGroup: each c10d call as the simulator's collectives and messages
    torch_works.py      the works it returns: completed, an async_op collective's (results at the wait), a message's
    torch_context.py    which simulated rank a thread is; the user's line behind a torch call
    torch_values.py     tensors as NumPy; which part of the model's value a DTensor or a plain tensor is

Importing this package does not import torch: only the modules that need it do, so torch stays an
optional extra. Typical use:

    from simulator.backends.launch import TorchWorld
    with TorchWorld(2) as world:                        # 2 gloo processes on 127.0.0.1
        result = world.run(program, x)                  # like World(2).run(program, x)
        result.outputs, result.trace                    # the same Trace, measured times
"""

__all__: list[str] = []  # each module is imported by name (most need torch, an optional extra)
