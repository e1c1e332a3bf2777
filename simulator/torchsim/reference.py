"""``Reference.of_torch``: a torch model run on one device, what its modules compute named by their paths.

    ref = Reference.of_torch(model, x)                  # model: an nn.Module, or a function of torch tensors
    ref = Reference.of_torch(model, x, microbatches=4)  # the model run on x's 4 microbatches, one after another

The values are named as ``names`` names them on simulated ranks, so ``check(simulate_torch(...), ref)``
compares them module by module: each module's output (and its inputs, as the op's inputs), parameters and,
where the model's function runs a backward pass, gradients (of the parameters, and of each module's output and
inputs: ``a.grad``, ``b:in0.grad``, which the messages of a pipeline's backward carry); the model's inputs by the names of its
arguments (``x``: "the model's input"); and the model's result. A module's input that is another module's
output (or one of the model's inputs) is an alias of that value, so a message that feeds the module is
checked against it ("device 1 should have received b:in0, that is, a (the output of module a)").

With ``microbatches=m`` every tensor argument is split into m microbatches along dim 0 (``torch.chunk``), as a
pipeline splits its batch, and the model runs on each in turn: call k of a module is microbatch k's. The
result is the microbatches' results joined along dim 0.

The model and its arguments are deep-copied first: the caller's model is never changed.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch
from torch import nn

from ..checker.reference import Reference
from .names import Call, Gradients, ModuleRecorder, grad_name, input_name, parameter_name, recording, result_name
from .values import to_numpy


class _ReferenceRecorder(ModuleRecorder):
    """Fills a ``Reference`` as the model runs on one device."""

    def __init__(self, ref: Reference) -> None:
        super().__init__((__file__,))
        self.ref = ref
        self.names: dict[int, tuple[torch.Tensor, str]] = {}  # id(tensor) -> (the tensor, its value's name)
        self.when = ""  # " for microbatch 1 of 4" while the model runs on one microbatch
        self.grads: dict[int, tuple[torch.Tensor, str]] = {}  # id(tensor) -> (the tensor, its gradient's name)

    def hold(self, name: str, t: torch.Tensor, doc: str) -> None:
        value = to_numpy(t, 0, name)
        earlier = self.ref.values.get(name)
        if earlier is not None and (earlier.shape != value.shape or not (earlier == value).all()):
            raise ValueError(
                f"Reference.of_torch: two values are named {name!r} (two modules at the path {name.rsplit('.', 1)[0]!r}, "
                "in two models?): a name stands for one value. Put the modules in one nn.Module, so that each has its "
                "own path"
            )
        self.ref.values[name] = value
        self.ref.docs[name] = doc
        self.names[id(t)] = (t, name)

    def name_of(self, t: torch.Tensor) -> str | None:
        entry = self.names.get(id(t))
        return entry[1] if entry is not None and entry[0] is t else None

    def on_grad(self, t: torch.Tensor, name: str, doc: str) -> None:
        """Hold the gradient of ``t`` as ``name``'s gradient when a backward pass reaches it; a tensor known by
        several names (a module's output, its last submodule's, the next module's input) has one gradient, under
        the first name, the others aliases of it."""
        if not t.requires_grad:
            return
        first = self.grads.get(id(t))
        if first is not None and first[0] is t:
            self.ref.aliases[grad_name(name)] = first[1]
            self.ref.docs[grad_name(name)] = doc
            return
        gname = grad_name(name)
        self.grads[id(t)] = (t, gname)
        t.register_hook(lambda g: self.hold(gname, g, doc) if gname not in self.ref.values else None)

    def started(self, call: Call, first: bool) -> None:
        for i, t in enumerate(call.inputs):
            self.on_grad(t, input_name(call.name, i), f"the gradient of input {i} of module {call.path}{self.when}")
            name, source = input_name(call.name, i), self.name_of(t)
            if source is not None:
                self.ref.aliases[name] = source
                self.ref.docs[name] = f"the input of module {call.path}, which the model computes as {source}"
            else:
                self.ref.values[name] = to_numpy(t, 0, name)
                self.ref.docs[name] = f"input {i} of module {call.path}{self.when}"
        if first:
            for pname, param in call.module.named_parameters(recurse=False):
                self.hold(parameter_name(call.path, pname), param, f"parameter {pname} of {call.path}")

    def gradient(self, name: str, grad: torch.Tensor, step: int) -> None:
        self.hold(name, grad, f"the gradient optimizer step {step} uses")

    def output(self, call: Call, name: str, value: torch.Tensor, raw: bool) -> None:
        ref = self.ref
        ref.values[name] = to_numpy(value, 0, name)
        ref.inputs[name] = tuple(to_numpy(t, 0, name) for t in call.inputs)
        kind = type(call.module).__name__
        ref.docs[name] = f"the output of module {call.path}{self.when}, a {kind}"
        ref.computed.append(name)
        self.names[id(value)] = (value, name)
        self.on_grad(value, name, f"the gradient of the output of module {call.path}{self.when}")


def reference_of_torch(model: Any, *args: Any, microbatches: int | None = None, **kwargs: Any) -> Reference:
    """The single-device run of ``model(*args, **kwargs)`` (see the module docstring)."""
    if not callable(model):
        raise TypeError(f"Reference.of_torch(model, ...): model is an nn.Module or a function; got {model!r:.60}")
    if microbatches is not None and (not isinstance(microbatches, int) or microbatches < 1):
        raise ValueError(f"Reference.of_torch(microbatches={microbatches!r}): give a number of microbatches >= 1")
    model, args, kwargs = copy.deepcopy((model, args, kwargs))
    ref = Reference(modules=True)
    recorder = _ReferenceRecorder(ref)
    for name, value in _named_inputs(model, args, kwargs):
        recorder.hold(name, value, "the model's input")
    with recording(recorder):
        if microbatches is None:
            out = model(*args, **kwargs)
        else:
            outs = []
            for k in range(microbatches):
                recorder.when = f" for microbatch {k} of {microbatches}"
                outs.append(model(*_microbatch(args, k, microbatches), **kwargs))
            recorder.when = ""
            out = _joined(outs)
        for name, grad in Gradients.of(recorder).items:
            recorder.hold(name, grad, "a gradient")
    ref.result = _result(recorder, out, result_name(recorder))
    return ref


def _named_inputs(model: Any, args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor]]:
    """The model's tensor arguments, by the names of its parameters (``forward``'s for a module)."""
    fn = model.forward if isinstance(model, nn.Module) else model
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        bound = {f"input[{i}]": a for i, a in enumerate(args)}
    return [(n, v) for n, v in bound.items() if isinstance(v, torch.Tensor)]


def _microbatch(args: tuple, k: int, m: int) -> tuple:
    return tuple(a.chunk(m, dim=0)[k] if isinstance(a, torch.Tensor) else a for a in args)


def _joined(outs: list) -> Any:
    first = outs[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(outs, dim=0)
    if isinstance(first, (list, tuple)):
        return type(first)(_joined([o[i] for o in outs]) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: _joined([o[k] for o in outs]) for k in first}
    return outs


def _result(recorder: _ReferenceRecorder, out: Any, name: str) -> Any:
    """The model's result as NumPy; each of its tensors is also the value ``output`` (``output[0]``, ...), which
    a simulated rank holds when it returns a tensor no module returned."""
    if isinstance(out, torch.Tensor):
        source = recorder.name_of(out)
        if source is not None:
            recorder.ref.aliases[name] = source
            return recorder.ref.values[source]
        recorder.hold(name, out, "the model's result")
        return recorder.ref.values[name]
    if isinstance(out, dict):
        return {k: _result(recorder, v, f"{name}[{k!r}]") for k, v in out.items()}
    if isinstance(out, (list, tuple)):
        return type(out)(_result(recorder, v, f"{name}[{i}]") for i, v in enumerate(out))
    return out
