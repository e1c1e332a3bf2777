"""PyTorch's own code on the simulator: unchanged torch.distributed and DTensor programs on simulated ranks.

``simulate_torch`` runs each rank as a thread that runs only while its simulated device runs, so that the
same trace, views and checker serve torch programs (see docs/torch.md):

    simulate.py       simulate_torch, and run_real: the same program on a TorchWorld's real ranks, recorded alike
    reference.py      Reference.of_torch: the model on one device, named module by module
    ranks.py          a rank's thread and the baton it passes with its greenlet; what it records
    process_state.py  what torch keeps per process (default dtype, anomaly mode, attention backends), per rank
    stops.py          a rank that makes no progress stopped (its thread too), with where each rank was
    c10d.py           torch.distributed's state per simulated rank; the "simulator" backend
    names.py          modules named by their path, through torch's global module hooks
    pricing.py        the aten ops a rank runs, priced by the cost model
    process_group.py  SimProcessGroup: each c10d call as the simulator's collectives and messages
    bookkeeping.py    torch's own work told apart from the model's: a pipeline stage's shape inference, pickled objects
    works.py          the works it returns: completed, an async_op collective's (results at the wait), a message's
    context.py        which simulated rank a thread is; the user's line behind a torch call
    values.py         tensors as NumPy; which part of the model's value a DTensor or a plain tensor is
    schedules.py      torch.distributed.pipelining's schedule classes asked for their compute order (no ranks)
    dtensor_volumes.py  what DTensor's redistribute sends, asked of torch on a fake process group
    programs.py       example programs (the seed split, tensor-parallel MLPs, a pipeline) and their bugs
    stage_programs.py torch.distributed.pipelining's stages under each of torch's schedules, and a bug
    llama.py          a small Llama laid out as torchtitan's, trained with FSDP2 and tensor parallelism

This package imports nothing from ``simulator.real``: ``run_real`` is handed a TorchWorld. Importing it does
not import torch; the modules that need it do.
"""

__all__: list[str] = []  # each module is imported by name (they need torch, an optional extra)
