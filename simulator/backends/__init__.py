"""Backends that run the simulator's rank programs somewhere other than the simulated engine.

The torch.distributed backend runs the same rank programs on real processes (gloo on CPU, NCCL on
GPUs) and records the same kind of trace, with measured times:

    launch.py      TorchWorld (N local rank processes, kept up for several runs) and launch (one run)
    torch.py       TorchDevice: the Device API over torch.distributed, inside one rank process
    native.py      torch.distributed's own collectives behind the simulator's collective signatures
    wire.py        what a message is on the wire (shape/dtype header, payload bytes); NumPy only
    recording.py   what each rank records, and the merge into one Trace; NumPy only
    worker.py      the body of a rank process (join the group, run jobs, report failures)
    torchrun.py    the same under torchrun (env:// initialisation), on one machine or several
    compare.py     a simulation and a real run compared, and scenarios run for real; no torch
    calibrate.py   ping-pong measurements fitted to a cost model; costfile.py reads and writes it
    crosscheck.py  PyTorch's own pipelining, DTensor and tensor-parallel layers, for comparison
    demos.py       small rank programs: point-to-point patterns, failures, collectives
    pool.py        large result buffers reused once unreferenced; errors.py: the backend's errors

Importing this package does not import torch: only the modules that need it do, so torch stays an
optional extra. Typical use:

    from simulator.backends.launch import TorchWorld
    with TorchWorld(2) as world:                        # 2 gloo processes on 127.0.0.1
        result = world.run(program, x)                  # like World(2).run(program, x)
        result.outputs, result.trace                    # the same Trace, measured times
"""
