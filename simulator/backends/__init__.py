"""Backends that run the simulator's rank programs somewhere other than the simulated engine.

``simulator.backends.torch`` runs the same rank programs on real processes over torch.distributed
(gloo on CPU, nccl on GPUs). Importing this package does not import torch: only the modules that need
it do (``torch``, ``worker``, ``launch``, ``torchrun``, ``calibrate``, ``crosscheck``), so torch
stays an optional extra.

The usual entry points:

    from simulator.backends.launch import TorchWorld, launch
    result = launch(program, x, size=2)                 # one run on 2 gloo processes
    with TorchWorld(2) as world:                        # several runs, one start-up
        a = world.run(program, x)
        b = world.run(other_program)
"""
