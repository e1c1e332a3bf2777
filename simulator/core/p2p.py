"""The rules of point-to-point messaging, the same on every device, whatever carries the bytes.

Two devices send and receive with the torch.distributed names: the simulated one (``messaging.py``, on the
engine's clock) and a real rank's (``simulator.real.messages``, over torch.distributed). What a
program may ask of either, and what it is told when it asks wrongly, is here once: which peers and tags are
valid, what a receive's contract (shape, dtype) is and the error when a message breaks it, who may wait on a
request, and where a named receive is kept. Each device keeps only how its bytes travel.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import ContractError, SimulationError
from .tags import TAG_BASE, user_tag


def describe_request(kind: str, peer: int, tag: int) -> str:
    """A send or receive as the program wrote it: ``send(dst=1, tag=0)``, ``recv(src=0, tag=0)``."""
    return f"send(dst={peer}, tag={tag})" if kind == "send" else f"recv(src={peer}, tag={tag})"


def contract_text(shape: tuple[int, ...] | None, dtype: np.dtype | None) -> str:
    """A declared contract in words: ``(1,) float64``, ``any shape float64``."""
    return f"{shape if shape is not None else 'any shape'} {dtype.name if dtype is not None else 'any dtype'}"


def contract_violation(
    message: str, src: int, dst: int, tag: int, declared: tuple, sent: tuple, collective: str | None = None
) -> ContractError:
    """The error for a message that breaks its receive's contract, naming both ends, the tag and both
    signatures. message: how the message is known (``message #3``); declared, sent: (shape, dtype) pairs."""
    shape, dtype = sent
    if collective:
        fix = (
            f"The message belongs to {collective}: every member of a collective must pass an array of the same "
            "shape and dtype."
        )
    elif int(tag) >= TAG_BASE:  # a collective's own message, on a real rank (which knows its tag as a number)
        fix = (
            "The message is a step inside a collective: the two devices are in different collective calls, or in "
            "the same with arrays of other shapes. Every member of a group must make the same collective calls, in "
            "the same order, with the same shapes."
        )
    else:
        fix = "Make the sender send what the receiver declares, or fix the declaration."
    return ContractError(
        f"contract violated on {message} from device {src} to device {dst} (tag {tag}): device {dst} declared "
        f"{contract_text(*declared)}, device {src} sent {shape} {np.dtype(dtype).name}. {fix}"
    )


class WaitedByItsDevice:
    """A request (simulated or real): torch's ``work.wait()`` is ``dev.wait(req)`` here, and says so."""

    __slots__ = ()

    def wait(self) -> None:
        raise AttributeError(
            f"{self!r}: a request is waited on by its device: write dev.wait(req), not req.wait() (torch's work.wait())"
        )


class PointToPoint:
    """What every device's messaging shares (a mixin): the calls in their general form, their argument rules
    and their errors. A device brings ``rank``, ``world_size``, ``_memory`` and how its bytes travel:
    ``isend``, ``_post_recv`` and ``wait`` (the simulated device also has faster ``send`` and ``recv``, and
    sends a collective's parts with their structure in numbers: ``_call_label``, ``_post``)."""

    rank: int
    world_size: int
    _memory: dict[str, Any]
    _request_type: type  # what isend and irecv return, and wait and test take

    def send(self, value: Any, dst: int, tag: int = 0, *, label: str | None = None) -> None:
        """Send a copy of ``value`` to device ``dst``.

        Eager mode: returns at once (the message is buffered; the link carries it when free).
        Rendezvous mode: returns once the receiver has posted its recv and the last byte has left.
        """
        self.wait(self.isend(value, dst, tag, label=label))

    def irecv(
        self,
        src: int,
        tag: int = 0,
        *,
        shape: tuple[int, ...] | None = None,
        dtype: Any = None,
        name: str | None = None,
        index: Any = None,
    ) -> Any:
        """Post a receive from device ``src``; ``wait`` on the request it returns gives the payload.

        shape, dtype: the contract, what the receiver expects (checked when the message arrives)
        name:         what the message carries in the model (stored in memory under it; checked)
        index:        which part of the single-device value ``name`` it carries (a shard)
        """
        return self._post_recv(src, tag, shape, dtype, name, index)

    def recv(
        self,
        src: int,
        tag: int = 0,
        *,
        shape: tuple[int, ...] | None = None,
        dtype: Any = None,
        name: str | None = None,
        index: Any = None,
    ) -> np.ndarray:
        """Receive a message from device ``src`` (see ``irecv``); returns its read-only payload."""
        return self.wait(self.irecv(src, tag, shape=shape, dtype=dtype, name=name, index=index))

    # what each device defines: how its bytes travel
    def isend(self, value: Any, dst: int, tag: int = 0, *, label: str | None = None) -> Any:
        raise NotImplementedError

    def _post_recv(self, src: int, tag: int, shape: Any, dtype: Any, name: Any, index: Any) -> Any:
        raise NotImplementedError

    def wait(self, req: Any) -> Any:
        raise NotImplementedError

    # how the collectives send their parts (simulator/collectives/call.py): a call binds its tag and label once
    def _call_label(self, text: str) -> Any:
        """A collective call's label (``all_reduce#3 ring``) as ``_post`` takes it: the text itself here; the
        simulated device interns it, so that its parts carry numbers, not text."""
        return text

    def _post(self, tag: int, label: Any, value: Any, dst: int, step: Any, chunk: Any) -> Any:
        """Send one part of a collective call (``step``, ``chunk``) labelled ``label`` (from ``_call_label``);
        returns a request to wait on, or None when the send is complete already. Here: ``isend``, its label
        the text ``"<label> step <step> chunk <chunk>"``."""
        return self.isend(value, dst, tag, label=f"{label} step {step} chunk {chunk}")

    @property
    def needs_contract(self) -> bool:
        """Whether every receive must declare its shape and dtype (strict mode; a real rank without headers)."""
        return False

    def _peer(self, peer: Any, op: str, arg: str) -> int:
        """A valid peer rank as an int, or an error that names the value and the fix."""
        if isinstance(peer, (bool, np.bool_)) or not isinstance(peer, (int, np.integer)):
            raise TypeError(
                f"device {self.rank}: {op}({arg}={peer!r}) must name a device by its rank, an int in "
                f"0..{self.world_size - 1}; got {type(peer).__name__}"
            )
        peer = int(peer)
        if peer == self.rank:
            raise ValueError(f"device {self.rank}: {op}({arg}={peer}) names itself; a device cannot message itself")
        if not 0 <= peer < self.world_size:
            raise ValueError(
                f"device {self.rank}: {op}({arg}={peer!r}) names no device; ranks are 0..{self.world_size - 1}"
            )
        return peer

    def _tag(self, tag: Any, op: str) -> int:
        """A valid user tag (0 to 2**30 - 1: the collectives own the range above), or an error saying why."""
        return user_tag(tag, self.rank, op)

    def _contract(
        self, src: int, tag: int, shape: Any, dtype: Any, required: str | None = None
    ) -> tuple[tuple[int, ...] | None, np.dtype | None]:
        """A receive's declared contract, normalised. required: why this device needs one (strict mode, say);
        a receive that then declares none is refused, with the declaration to write."""
        try:
            if shape is not None and type(shape) is not tuple:  # (a tuple, e.g. an array's .shape, is kept as is)
                shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        except (TypeError, ValueError):
            raise ContractError(
                f"device {self.rank}: recv(src={src}, shape={shape!r}) takes a shape of whole numbers, e.g. shape=(2, 3)"
            ) from None
        if dtype is not None and not isinstance(dtype, np.dtype):
            try:
                dtype = np.dtype(dtype)
            except TypeError:
                raise ContractError(
                    f"device {self.rank}: recv(src={src}, dtype={dtype!r}): not a NumPy dtype; e.g. dtype=np.float64 "
                    "or dtype='float32'"
                ) from None
        if required and (shape is None or dtype is None):
            raise ContractError(
                f"{required}: device {self.rank} posts recv(src={src}, tag={tag}) without a contract; "
                f"declare what it expects, e.g. recv(src={src}, shape=(1,), dtype=np.float64)"
            )
        return shape, dtype

    def _own(self, req: Any) -> None:
        """Only a request, and only the device that posted it, may be waited on."""
        if not isinstance(req, self._request_type):
            self._a_request(req, "wait")
        if req.owner != self.rank:
            raise SimulationError(f"device {self.rank} waits on a request that belongs to device {req.owner}")

    def _a_request(self, req: Any, op: str) -> None:
        """``wait`` and ``test`` take what ``isend`` or ``irecv`` returned (``_request_type``), nothing else.
        (``wait`` checks through ``_own``, which calls this only for what is not one.)"""
        if not isinstance(req, self._request_type):
            raise TypeError(
                f"device {self.rank}: {op}({req!r:.60}) takes the Request that isend or irecv returned, got "
                f"{type(req).__name__}; e.g. req = dev.irecv(src=0) ... x = dev.{op}(req)"
            )

    def _keep_named(self, name: str | None, payload: Any) -> None:
        """A receive that says what it carries (``name=``) keeps it in memory under that name."""
        if name is not None:
            self._memory[name] = payload
