"""Errors a bad program gets, each naming what is wrong, where, and how to fix it."""

from __future__ import annotations

from typing import Any

INF = float("inf")


class SimulationError(Exception):
    """Base class for every error the simulator raises about a program.

    Examples:
        >>> from simulator import SimulationError, World
        >>> try:
        ...     World(2).run(lambda dev: dev.recv(1 - dev.rank))
        ... except SimulationError as exc:
        ...     print(type(exc).__name__)
        DeadlockError
    """


class ContractError(SimulationError):
    """A received message does not match the shape/dtype its receiver declared.

    Examples:
        >>> import numpy as np
        >>> from simulator import ContractError, World
        >>> def program(dev):
        ...     if dev.rank == 0:
        ...         dev.send(np.ones(3), 1)
        ...     else:
        ...         dev.recv(0, shape=(2,), dtype=np.float64)
        >>> try:
        ...     World(2).run(program)
        ... except ContractError as exc:
        ...     print(type(exc).__name__)
        ContractError
    """


class DeadlockError(SimulationError):
    """Every unfinished device is blocked: nothing can ever happen again.

    ``partial`` is the run up to there (a ``RunResult`` whose unfinished devices returned None): what each device
    did before it blocked, to look at in a timeline or a trace export.

    Examples:
        >>> from simulator import DeadlockError, World
        >>> try:
        ...     World(2).run(lambda dev: dev.recv(1 - dev.rank))
        ... except DeadlockError as exc:
        ...     print(str(exc).splitlines()[0])
        deadlock: ...
    """

    def __init__(self, message: str, blocked: dict[int, str], cycle: list[int] | None) -> None:
        super().__init__(message)
        self.blocked = blocked
        self.cycle = cycle
        self.partial: Any = None


class RankError(SimulationError):
    """A rank program raised; the original exception is chained as ``__cause__``.

    Examples:
        >>> from simulator import RankError, World
        >>> try:
        ...     World(2).run(lambda dev: 1 / 0 if dev.rank == 1 else None)
        ... except RankError as exc:
        ...     print(exc.rank, type(exc.__cause__).__name__)
        1 ZeroDivisionError
    """

    def __init__(self, rank: int, exc: BaseException) -> None:
        super().__init__(f"device {rank} raised {type(exc).__name__}: {exc}{read_only_hint(exc)}")
        self.rank = rank


def read_only_hint(exc: BaseException) -> str:
    """What to do when a program writes into a value it was given (numpy says only "read-only")."""
    numpy_says = ("assignment destination is read-only", "output array is read-only")
    if isinstance(exc, ValueError) and any(words in str(exc) for words in numpy_says):
        return (
            "\n  values a device holds, receives or computes are read-only (the trace keeps them as they were):"
            "\n  make a new array instead (y = x + 1, not x += 1), or change a copy (y = x.copy())"
        )
    return ""


class UnreceivedMessagesError(SimulationError):
    """The run ended with messages nobody received.

    Examples:
        >>> import numpy as np
        >>> from simulator import UnreceivedMessagesError, World
        >>> try:
        ...     World(2, leftovers="error").run(lambda dev: dev.send(np.ones(1), 1) if dev.rank == 0 else None)
        ... except UnreceivedMessagesError as exc:
        ...     print(type(exc).__name__)
        UnreceivedMessagesError
    """


class UnreceivedMessagesWarning(UserWarning):
    """The run ended with messages nobody received.

    Examples:
        >>> import warnings
        >>> import numpy as np
        >>> from simulator import UnreceivedMessagesWarning, World
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always", UnreceivedMessagesWarning)
        ...     _ = World(2).run(lambda dev: dev.send(np.ones(1), 1) if dev.rank == 0 else None)
        >>> [w.category.__name__ for w in caught]
        ['UnreceivedMessagesWarning']
    """


class CollectiveMismatchError(SimulationError):
    """Members of one group made different collective calls (kind, arguments, or group order)."""


class OpError(SimulationError):
    """An op's function raised; the message names the op, the device and its inputs, the cause is chained."""


class BufferLimitError(SimulationError):
    """The payloads the engine holds for a run's messages passed ``World.max_buffered_bytes``."""


class InfiniteTimeError(SimulationError):
    """A message or an op would take an infinite (or undefined) time: the cost model's numbers are too extreme."""


class EventLimitError(SimulationError):
    """A run recorded more events than its limit: most likely a program that never stops."""


def infinite_message(cost: Any, src: int, dst: int, nbytes: int, t: float, arrive: float) -> InfiniteTimeError:
    """A message would arrive at an infinite (or NaN) time: name the cost field that makes it so."""
    alpha, bandwidth = cost.link(nbytes)
    field = "CostModel.latency" if alpha == cost.latency else "its LinkRegime's latency"
    bw_field = "CostModel.bandwidth" if bandwidth == cost.bandwidth else "its LinkRegime's bandwidth"
    topo = cost.topology
    if hasattr(topo, "same_node") and not topo.same_node(src, dst):
        alpha, bandwidth = topo.inter_latency, topo.inter_bandwidth
        field, bw_field = "TwoLevel.inter_latency", "TwoLevel.inter_bandwidth"
    wire = nbytes / bandwidth
    if not wire < INF:
        cause = f"{nbytes:,} bytes at {bw_field} = {bandwidth!r} bytes/s take {wire} s on the wire"
    elif not alpha < INF:
        cause = f"{field} = {alpha!r} s"
    else:
        cause = f"t = {t!r} s plus {wire!r} s on the wire and {field} = {alpha!r} s passes the largest float"
    return InfiniteTimeError(
        f"device {src}'s message of {nbytes:,} bytes to device {dst} would arrive at t = {arrive} s: {cause}. "
        "Simulated times must be finite: give the cost model a realistic bandwidth and latency "
        "(e.g. CostModel(bandwidth=1e9), 1 GB/s)"
    )


def copy_too_big(budget: int, rank: int, dst: int, value: Any, nbytes: int) -> BufferLimitError:
    """A send whose copy alone would pass ``World.max_buffered_bytes`` (``budget``): refused before the copy."""
    import numpy as np

    from ..cost.units import binary_size

    why = ""
    if isinstance(value, np.ndarray) and value.size and 0 in value.strides:
        base = binary_size(value.base.nbytes) if value.base is not None else "a few bytes"
        why = (
            f" It is a view of {base} that repeats its elements (np.broadcast_to, a stride of 0): a message "
            "carries every element, so its copy is that large."
        )
    return BufferLimitError(
        f"device {rank}: send(dst={dst}) of an array of shape {np.shape(value)} ({np.asarray(value).dtype}) would "
        f"copy {nbytes:,} bytes ({binary_size(nbytes)}), over the budget of {budget:,} bytes ({binary_size(budget)}) "
        f"for the payloads the engine holds, World(max_buffered_bytes=...); nothing was copied.{why} Send less (a "
        "chunk at a time, or the small array the view is made from, for the receiver to expand), or raise "
        "max_buffered_bytes if this machine has the memory."
    )


def infinite_op(cost: Any, rank: int, name: str, flops: float | None, seconds: float, t: float) -> InfiniteTimeError:
    """An op would end at an infinite (or NaN) time: name the cost field that makes it so."""
    if flops is not None and not flops / cost.flops < INF:
        cause = f"{flops:g} FLOPs at CostModel.flops = {cost.flops!r} FLOP/s take {flops / cost.flops} s"
    elif not seconds < INF:
        fields = "CostModel.flops, memory_bandwidth and op_latency" if cost.memory_bandwidth else "CostModel.flops"
        cause = f"it takes {seconds} s at {fields} = {cost.flops!r}, {cost.memory_bandwidth!r}, {cost.op_latency!r}"
    else:
        cause = f"t = {t!r} s plus its {seconds!r} s passes the largest float"
    return InfiniteTimeError(
        f"op {name!r} on device {rank} would end at t = {t + seconds} s: {cause}. Simulated times must be finite: "
        "give the cost model a realistic speed (e.g. CostModel(flops=1e12), 1 TFLOP/s)"
    )


def describe_inputs(inputs: tuple) -> str:
    """``(2, 4) float64, (3, 6) float64``: the shapes and dtypes of an op's inputs, for error messages."""
    import numpy as np

    parts = []
    for x in inputs:
        if isinstance(x, np.ndarray) or np.isscalar(x):
            a = np.asarray(x)
            parts.append(f"{a.shape} {a.dtype.name}")
        else:
            parts.append(type(x).__name__)
    return ", ".join(parts) if parts else "no inputs"
