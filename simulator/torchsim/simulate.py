"""``simulate_torch``: a torch.distributed program, unchanged, on simulated ranks; ``run_real``: the same program
on the real ranks of a ``TorchWorld`` (gloo), recorded the same way, so that ``check`` gives both one verdict.

    run = simulate_torch(program, 4, x)        # program(x) on 4 simulated ranks, like World(4).run
    run.outputs, run.trace                      # what each rank returned (as NumPy), every message and op
    check(run, Reference.of_torch(model, x))    # against the single-device model, module by module

Each rank runs ``program(*args)`` with its own deep copy of the arguments (as separate processes would have),
with ``torch.distributed`` initialised for it on the "simulator" backend: ``dist.get_rank()`` is its rank,
every collective and send runs as the simulator's messages on the rank's device, ``init_device_mesh("cpu",
...)`` and DTensor work as on real ranks. How the ranks take turns: ``ranks``. What a rank returns is
converted to NumPy (a DTensor: its local piece, with the block it is named for the checker).

Sends are rendezvous by default, as gloo's are (``dist.send`` returns once the receiver has taken the
message): two ranks that both send first deadlock, and the simulation says so instead of hanging.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import pickle
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist

from ..collectives import ALGORITHMS
from ..core.engine import RunResult
from ..core.errors import SimulationError
from ..core.world import World
from .context import RankContext
from .process_state import TorchState
from .ranks import RankThread, install
from .stops import DEFAULT_TIMEOUT, NoProgressError

_SIMULATIONS = itertools.count()  # numbers each simulation's process-group names apart


def simulate_torch(
    program: Callable[..., Any],
    world_size: int,
    *args: Any,
    world: World | None = None,
    algorithm: str | Mapping[str, str] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> RunResult:
    """Run ``program(*args)`` once per simulated rank, with torch.distributed initialised for that rank.

    Args:
        program: a function of the program's own arguments, written as for torch.distributed (it calls
            ``dist.get_rank()``, ``dist.all_reduce(t)``, DTensor, ...).
        world_size: how many ranks run it.
        *args: its arguments, the same on every rank (each rank gets its own copy).
        world: the simulated world (its cost model, send mode, ...); by default ``World(world_size,
            send_mode="rendezvous")``, whose sends wait for their receiver as gloo's do
        algorithm: the collectives' algorithm, as ``World`` programs choose it: one name for every collective
            that has it (``"tree"``), or one per collective (``{"all_reduce": "halving_doubling"}``)
        timeout: the seconds of wall-clock time a rank may compute between two torch.distributed calls (the
            others wait meanwhile); a rank that takes longer (it sleeps, or loops waiting for something no call
            brings) is stopped, and ``NoProgressError`` says where each rank was. None: no limit

    Returns a ``RunResult`` like ``World.run``: each rank's return value (tensors as NumPy arrays) and the trace.

    Examples:
        >>> import torch
        >>> import torch.distributed as dist
        >>> from simulator import simulate_torch
        >>> def program(x):
        ...     y = x * (dist.get_rank() + 1)
        ...     dist.all_reduce(y)
        ...     return y
        >>> simulate_torch(program, 2, torch.ones(2)).outputs
        [array([3., 3.], dtype=float32), array([3., 3.], dtype=float32)]
    """
    if not callable(program):
        raise TypeError(f"simulate_torch(program, ...): program is the function each rank runs; got {program!r:.60}")
    _not_a_device_program(program)
    if world is None:
        world = World(world_size, send_mode="rendezvous")
    elif world.size != world_size:
        raise ValueError(f"simulate_torch: world_size={world_size}, but the world given has {world.size} devices")
    if not world.keep_payloads:
        raise ValueError("simulate_torch needs World(keep_payloads=True): the values are what it checks")
    algorithms = _algorithms(algorithm)
    if timeout is not None and not timeout > 0:
        raise ValueError(f"simulate_torch(timeout={timeout!r}): the seconds a rank may compute, > 0, or None")
    install()
    number = next(_SIMULATIONS)
    store = dist.HashStore()
    threads: dict[int, RankThread] = {}
    caller_rng, caller = torch.get_rng_state(), TorchState.now()

    def torch_rank(dev: Any) -> Any:
        ctx = RankContext(dev.rank, world_size, None, algorithms=algorithms, group_tag=f"sim{number}.r{dev.rank}")
        thread = RankThread(ctx, program, copy.deepcopy(args), store, timeout, threads.values, caller)
        threads[dev.rank] = thread
        return thread.run(dev)

    torch_rank.__name__ = torch_rank.__qualname__ = getattr(program, "__name__", "program")
    try:
        return world.run(torch_rank)
    except NoProgressError:
        raise  # it says where each rank was already
    except SimulationError as exc:
        _name_torch_calls(exc, threads)
        raise
    finally:
        for thread in threads.values():
            thread.abort()
        torch.set_rng_state(caller_rng)
        caller.restore()


def _not_a_device_program(program: Callable[..., Any]) -> None:
    """A program written for the simulator's device (``program(dev, ...)``) belongs to ``World.run``: say so."""
    try:
        first = next(iter(inspect.signature(program).parameters), None)
    except (TypeError, ValueError):
        return
    if first in ("dev", "device"):
        raise TypeError(
            f"simulate_torch runs torch programs, program(*args) with torch.distributed initialised on each rank; "
            f"{getattr(program, '__name__', 'program')}({first}, ...) is a program of the simulator's device: run it "
            f"with World(n).run(program, ...)"
        )


def _algorithms(algorithm: str | Mapping[str, str] | None) -> dict[str, str]:
    """The algorithm of each collective: a name applies to every collective that has an algorithm of that name."""
    if algorithm is None:
        return {}
    if isinstance(algorithm, str):
        chosen = {kind: algorithm for kind, table in ALGORITHMS.items() if algorithm in table}
        if not chosen:
            names = sorted({a for table in ALGORITHMS.values() for a in table})
            raise ValueError(f"simulate_torch(algorithm={algorithm!r}): no collective has it; choose from {names}")
        return chosen
    chosen = dict(algorithm)
    for kind, name in chosen.items():
        if kind not in ALGORITHMS or name not in ALGORITHMS[kind]:
            options = sorted(ALGORITHMS.get(kind, ALGORITHMS))
            raise ValueError(f"simulate_torch(algorithm={{{kind!r}: {name!r}}}): choose from {options}")
    return chosen


def _name_torch_calls(exc: SimulationError, threads: dict[int, RankThread]) -> None:
    """Add each rank's torch call in progress to a simulator error (a deadlock, two ranks' different calls)."""
    lines = [f"  rank {r}: {t.doing}" for r, t in sorted(threads.items()) if t.doing]
    if lines and exc.args and isinstance(exc.args[0], str) and "torch calls in progress" not in exc.args[0]:
        exc.args = (exc.args[0] + "\n  the torch calls in progress:\n" + "\n".join(lines), *exc.args[1:])


def run_real(torch_world: Any, program: Callable[..., Any], *args: Any) -> Any:
    """Run ``program(*args)`` on the real ranks of a ``TorchWorld``, recorded as ``simulate_torch`` records it, so
    that ``check`` gives the verdict a simulation gets; returns the ``TorchRunResult`` (each rank's result as
    NumPy, and the merged trace). The program must be a module-level function of an importable module (it
    travels to the rank processes by name).

    On each rank the program runs as on a simulated rank (``ranks.RankThread``: its modules, priced ops
    and torch.distributed calls recorded, ``init_process_group`` done for it on the "simulator" backend), but
    the device that carries out its calls is the rank's ``TorchDevice``: every collective and message goes
    over the real process group (gloo, or NCCL), with measured times. Sends wait for their receiver, as gloo's
    ``dist.send`` does (and as ``simulate_torch``'s do by default): two ranks that both send first time out."""
    rules = World(torch_world.size, send_mode="rendezvous")  # as simulate_torch's: dist.send waits for its receiver
    return torch_world.run_like(rules, real_rank, program, pickle.dumps(args), uuid.uuid4().hex)


def real_rank(dev: Any, program: Callable[..., Any], packed: bytes, run: str) -> Any:
    """The rank program ``run_real`` sends: ``program(*args)`` on this rank's thread, its requests done on ``dev``.

    packed: the arguments, pickled (tensors travel as plain pickles: the launcher's pickler would hand them over
    as shared memory, which reaches one process only); run: a name common to the run's ranks, under which
    their "simulator" process groups meet in the real group's store."""
    install()
    store = dist.PrefixStore(f"recorded-{run}", dist.distributed_c10d._get_default_store())
    ctx = RankContext(dev.rank, dev.world_size, None, group_tag=f"real-{run}.r{dev.rank}")
    # a rank that computes past the world's communication timeout is stopped where it is, as its peers are
    thread = RankThread(ctx, program, pickle.loads(packed), store, timeout=getattr(dev, "timeout", None))
    try:
        return thread.run(dev)
    except NoProgressError:
        raise  # it says where the rank was already
    except SimulationError as exc:
        _name_torch_calls(exc, {dev.rank: thread})
        raise
