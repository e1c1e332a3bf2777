"""What torch modules compute, named by their path in the model: the same names on simulated ranks and on
the single-device reference, so the checker can compare them.

A module's output is named by the module's path in the model (``mlp.fc2``); its k-th call (k >= 2) by
``mlp.fc2 (call k)``, so a module called once per microbatch or per step gives each value its own name.
Its positional tensor inputs are ``mlp.fc2:in0``, ``mlp.fc2:in1``, ... (the reference says which value
feeds them). Parameters are ``mlp.fc2.weight`` and their gradients ``mlp.fc2.weight.grad``.

Wrappers are looked through, as ``torch.distributed.checkpoint``'s ``get_model_state_dict`` names parameters:
``DistributedDataParallel``'s (and ``DataParallel``'s) ``module.``, ``torch.compile``'s ``_orig_mod.``, FSDP's
``_fsdp_wrapped_module.`` and activation checkpointing's ``_checkpoint_wrapped_module.`` are left out of a
path, so ``DDP(model)``'s ``module.fc1`` is ``fc1``, the name the single-device model gives it. The module a
wrapper calls has the wrapper's path and its call is the wrapper's (one value, not a second call), and a
forward run again inside a backward pass (activation checkpointing's recomputation) is no new call.

The path of a module: from the module whose forward called it (its parent on the stack of modules in
forward), else from the modules the user's code holds in its local variables (``model.a(x)`` in a pipeline
stage: ``model`` holds ``a``); a module found in neither is the root (its output, the model's result, is
compared as the result, not by name).

A module's output is what the module returns to its caller, after its own forward hooks (a parallel style's
``to_local``, its all-reduce); on a simulated rank the module's raw output is also named when it is a DTensor
(a ``RowwiseParallel`` layer's partial sums, before they are added up).

Gradients at each optimizer step: ``fc1.weight.grad (step k)``, the gradient an optimizer's k-th ``step()`` uses
(torch's global optimizer step hook), so a replica that steps with its own gradient, not averaged, is caught at
the step; ``fc1.weight.grad`` is the gradient at the end of the run.

Hooks are torch's global module hooks, present only while some recorder is in use (``recording``); each
thread has its own recorder, so ranks (threads) and simulations never see each other's.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as nn_module
from torch.optim.optimizer import register_optimizer_step_pre_hook

_local = threading.local()
_lock = threading.Lock()
_global_hooks: list[Any] = []  # the two global hook handles while any recorder is in use
_users = 0


@dataclass
class Call:
    """One call of one module."""

    module: nn.Module
    path: str
    name: str  # the value's name: the path, with " (call k)" from the second call on
    inputs: tuple[torch.Tensor, ...]  # the positional tensor arguments
    raw: Any = None  # the module's output before its own forward hooks
    quiet: bool = False  # a wrapped module (its wrapper's call), or a recomputation in backward: not named


def input_name(call_name: str, i: int) -> str:
    return f"{call_name}:in{i}"


def result_name(recorder: ModuleRecorder) -> str:
    """The name of what the program returns when no module returned it: ``output``, or ``result`` where a module
    has the path ``output`` (torchtitan's projection to the vocabulary), which names that module's output."""
    paths = {path for path, _ in recorder.modules()}
    return next(n for n in ("output", "result", "the result") if n not in paths)


def grad_name(value_name: str) -> str:
    """The name of the gradient of a named value: ``a.grad``, ``b (call 2):in0.grad``."""
    return f"{value_name}.grad"


class ModuleRecorder:
    """Names modules' calls on one thread and hands each named value on (``started``, ``output``, ``ended``)."""

    def __init__(self, stop_files: tuple[str, ...]) -> None:
        self.stop_files = stop_files  # frames of these files end the search for modules in local variables
        self.paths: dict[int, tuple[nn.Module, str]] = {}  # id(module) -> (module, path); keeps modules alive
        self.calls: dict[str, int] = {}
        self.stack: list[Call] = []
        self._handles: list[Any] = []  # per-module hooks, removed by close()
        self.steps = 0  # optimizer steps taken

    # ---- what subclasses do with the names ----------------------------------------------------
    def started(self, call: Call, first: bool) -> None:
        """A module's forward begins (``first``: the module's first call)."""

    def output(self, call: Call, name: str, value: torch.Tensor, raw: bool) -> None:
        """A module's output (``raw``: before its own forward hooks), one tensor of it, named ``name``."""

    def gradient(self, name: str, grad: torch.Tensor, step: int) -> None:
        """The gradient of a parameter that optimizer step ``step`` uses, named ``name``."""

    # ---- optimizer steps ------------------------------------------------------------------------
    def _step(self, optimizer: Any) -> None:
        self.steps += 1
        params = {id(p) for group in optimizer.param_groups for p in group["params"]}
        for name, grad in Gradients.of(self, params).items:
            self.gradient(f"{name} (step {self.steps})", grad, self.steps)

    # ---- the hooks ------------------------------------------------------------------------------
    def _pre(self, module: nn.Module, args: tuple) -> None:
        known = id(module) in self.paths
        path = self.path_of(module)
        if not known:
            self._handles.append(module.register_forward_hook(_final_hook))
        outer = self.stack[-1] if self.stack else None
        if (outer is not None and outer.path == path) or torch._C._current_graph_task_id() != -1:
            name = outer.name if outer is not None and outer.path == path else path
            self.stack.append(Call(module, path, name, (), quiet=True))
            return
        count = self.calls.get(path, 0) + 1
        self.calls[path] = count
        name = path if count == 1 else f"{path} (call {count})"
        call = Call(module, path, name, tuple(a for a in args if isinstance(a, torch.Tensor)))
        self.stack.append(call)
        if path:
            self.started(call, not known)

    def _raw(self, module: nn.Module, output: Any) -> None:
        if self.stack and self.stack[-1].module is module:
            self.stack[-1].raw = output

    def _final(self, module: nn.Module, output: Any) -> None:
        if not self.stack or self.stack[-1].module is not module:
            return
        call = self.stack.pop()
        if not call.path or call.quiet:
            return
        same = call.raw is output
        for suffix, raw_leaf, leaf in _leaves(call.raw if not same else output, output):
            if raw_leaf is not None and raw_leaf is not leaf and _is_dtensor(raw_leaf):
                self.output(call, call.name + suffix, raw_leaf, True)
            if leaf is not None:
                self.output(call, call.name + suffix, leaf, False)

    # ---- paths ----------------------------------------------------------------------------------
    def path_of(self, module: nn.Module) -> str:
        known = self.paths.get(id(module))
        if known is not None:
            return known[1]
        path = None
        for parent in reversed(self.stack):  # the modules in forward, innermost first
            rel = _relative(parent.module, module)
            if rel is not None:
                path = _join(parent.path, rel)
                break
        if path is None:
            path = self._from_locals(module)
        self.paths[id(module)] = (module, path)
        return path

    def _from_locals(self, module: nn.Module) -> str:
        """The path in the largest module that the user's code holds in a local variable and that contains it."""
        best: tuple[int, str] | None = None
        frame = sys._getframe(2)
        while frame is not None and not frame.f_code.co_filename.startswith(self.stop_files):
            if not frame.f_code.co_filename.startswith(_TORCH_DIR):
                for value in list(frame.f_locals.values()):
                    if isinstance(value, nn.Module) and value is not module:
                        rel = _relative(value, module)
                        if rel is not None:
                            size = sum(1 for _ in value.modules())
                            base = self.paths.get(id(value), (None, ""))[1]
                            if best is None or size > best[0]:
                                best = (size, _join(base, rel))
            frame = frame.f_back
        return best[1] if best else ""

    def modules(self) -> Iterator[tuple[str, nn.Module]]:
        """Every module seen, with its path (the root's path is "")."""
        for module, path in self.paths.values():
            yield path, module

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def parameter_name(path: str, name: str) -> str:
    return _join(path, name)


def _join(base: str, rel: str) -> str:
    return f"{base}.{rel}" if base and rel else base or rel


def _relative(parent: nn.Module, module: nn.Module) -> str | None:
    """``module``'s path inside ``parent``, wrappers' own names left out ("" for a module a wrapper holds)."""
    for name, sub in parent.named_modules():
        if sub is module and name:
            return canonical(parent, name)
    return None


# the attributes under which wrappers hold the module they wrap (torch's own names for them)
_WRAPPED = {"_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module"}


def canonical(root: nn.Module, name: str) -> str:
    """A dotted path inside ``root`` without wrappers' names: ``module.fc1`` under ``DistributedDataParallel`` is
    ``fc1``, ``_orig_mod.layers.0._checkpoint_wrapped_module.attn`` is ``layers.0.attn``."""
    kept, at = [], root
    for part in name.split("."):
        wrapper = part in _WRAPPED or (part == "module" and isinstance(at, _DATA_PARALLEL))
        if not wrapper:
            kept.append(part)
        at = getattr(at, part)
    return ".".join(kept)


def _is_dtensor(value: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(value, DTensor)


def _leaves(raw: Any, final: Any) -> Iterator[tuple[str, Any, Any]]:
    """(name suffix, raw tensor, final tensor) for a tensor output, or each tensor of a tuple or list."""
    if isinstance(final, torch.Tensor):
        yield "", raw if isinstance(raw, torch.Tensor) else None, final
    elif isinstance(final, (tuple, list)):
        raws = raw if isinstance(raw, (tuple, list)) and len(raw) == len(final) else [None] * len(final)
        for i, (r, f) in enumerate(zip(raws, final)):
            if isinstance(f, torch.Tensor):
                yield f"[{i}]", r if isinstance(r, torch.Tensor) else None, f


_TORCH_DIR = torch.__file__.rsplit("/", 1)[0]
_DATA_PARALLEL = (nn.DataParallel, nn.parallel.DistributedDataParallel)


# ---- torch's global hooks, sent to this thread's recorder -------------------------------------------------
def _recorder() -> ModuleRecorder | None:
    return getattr(_local, "recorder", None)


def _pre_hook(module: nn.Module, args: tuple) -> None:
    rec = _recorder()
    if rec is not None:
        rec._pre(module, args)


def _raw_hook(module: nn.Module, args: tuple, output: Any) -> None:
    rec = _recorder()
    if rec is not None:
        rec._raw(module, output)


def _final_hook(module: nn.Module, args: tuple, output: Any) -> None:
    rec = _recorder()
    if rec is not None:
        rec._final(module, output)


def _step_hook(optimizer: Any, args: tuple, kwargs: dict) -> None:
    rec = _recorder()
    if rec is not None:
        rec._step(optimizer)


@contextlib.contextmanager
def recording(recorder: ModuleRecorder) -> Iterator[ModuleRecorder]:
    """Name the modules this thread calls with ``recorder`` while the block runs."""
    global _users
    recorder.steps = 0
    with _lock:
        if _users == 0:
            _global_hooks.append(nn_module.register_module_forward_pre_hook(_pre_hook))
            _global_hooks.append(nn_module.register_module_forward_hook(_raw_hook))
            _global_hooks.append(register_optimizer_step_pre_hook(_step_hook))
        _users += 1
    _local.recorder = recorder
    try:
        yield recorder
    finally:
        _local.recorder = None
        recorder.close()
        with _lock:
            _users -= 1
            if _users == 0:
                for handle in _global_hooks:
                    handle.remove()
                _global_hooks.clear()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No module this thread calls is named while the block runs (torch's own bookkeeping, ``bookkeeping.py``)."""
    recorder = _recorder()
    _local.recorder = None
    try:
        yield
    finally:
        _local.recorder = recorder


@dataclass
class Gradients:
    """The gradients of the parameters of the modules a recorder saw, at the end of a run."""

    items: list[tuple[str, torch.Tensor]] = field(default_factory=list)

    @classmethod
    def of(cls, recorder: ModuleRecorder, only: set[int] | None = None) -> Gradients:
        """``only``: the ids of the parameters to take (None: every one)."""
        out = cls()
        for path, module in recorder.modules():
            if not path:  # a root's own parameters have no path to name them by (as its output has none)
                continue
            for pname, param in module.named_parameters(recurse=False):
                if param.grad is not None and (only is None or id(param) in only):
                    out.items.append((parameter_name(path, pname) + ".grad", param.grad))
        return out
