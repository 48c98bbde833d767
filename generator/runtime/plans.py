"""The host path's caches (issue 25): what a call derives from its tensors' metadata, kept per call signature.

A decode step or a forward does the same host work on every call with the same shapes: the checks
of shapes, dtypes, strides and devices, the block and the generated module, the grid, every stride
the kernel takes, its constexprs and warps/stages, the placeholder tensors of the options not in
use. None of that depends on a tensor's *values* or address, so an entry point computes it once per
**signature** (each tensor's type, shape, strides, dtype, device and ``requires_grad``
(``tensor_key``), each option's value and type (``options_key``), the grad mode) and keeps it
here; each call then does only what depends on values:

* the declared value rules (``contract.keep_values``; which of them apply is kept in the plan), every
  call, so an edit in place between two calls is still kept in range: each value clamped on the
  device, no host sync (the named errors: the opt-in ``contract.checking_values``, one sync);
* the outputs' allocation and the launch.

Every check still runs: on the first call of a signature the entry point takes its full path (every
check, the launch) and only then records what it derived (``PlanCache.record``); a call whose
checks raise records nothing, so it raises again next time. An option that is not a plain
``bool``/``int``/``float``/``str``/``None`` (or a tuple of them) is not cached: such a call takes the
full path each time.

``direct(...)``: in eager mode, with nothing that needs PyTorch's dispatcher (no ``torch.compile``
trace, no dispatch or ``__torch_function__`` mode, no functorch transform, no JIT trace, plain
tensors), an entry point runs its op's body itself instead of calling the ``torch.library`` custom
op: the same function, without the ~9 µs of the op's dispatch; with a gradient to record, the dense
forward records the op's own autograd functions (``autograd.DirectForward``). Any of those present,
the custom op is called as before (what ``torch.compile``, ``make_fx``, ``vmap`` and tensor
subclasses see), and its body keeps its own launch plans per signature of its inputs (``signature``).

Nothing here is a tensor of a call: a plan holds Python numbers, flags and one-element
placeholders on the device, never a user's tensor (a cached reference would keep it alive).
"""

from __future__ import annotations

import torch

#: plans kept per cache before it is emptied (a server sees a handful of signatures; a sweep over
#: many shapes must not grow memory without bound)
MAX_PLANS = 1024

#: every ``PlanCache`` (``clear`` empties them all)
_CACHES: list = []

#: tensor types whose calls may skip the dispatcher: a subclass may override any op
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def tensor_key(t):
    """What a plan may depend on of tensor ``t`` (``None`` stays ``None``); its type too, so nothing
    but a tensor of the type checked matches."""
    if t is None:
        return None
    return type(t), t.shape, t.stride(), t.dtype, t.device, t.requires_grad


#: the option types a key may hold: compared by value *and* type, so ``True`` and ``1`` (or ``1.0``)
#: differ as the checks tell them apart. Anything else (a list, a tensor, a numpy scalar) is not cached.
KEYABLE = frozenset({bool, int, float, str, type(None)})


def options_key(*values) -> tuple | None:
    """The options' values and types, a tuple option (a window, a block) by its elements; None when
    one is not ``KEYABLE`` (the call is not cached: it takes the full path)."""
    types = tuple(map(type, values))
    if KEYABLE.issuperset(types):
        return values, types
    elements = []
    for t, value in zip(types, values):
        if t is tuple and KEYABLE.issuperset(map(type, value)):
            elements.append(tuple(map(type, value)))
        elif t not in KEYABLE:
            return None
    return values, types, tuple(elements)


def signature(tensors, options) -> tuple | None:
    """A plan's key: ``tensor_key`` of each tensor and ``options_key`` of the options (None: not cached)."""
    key = options_key(*options)
    return None if key is None else (tuple(map(tensor_key, tensors)), key)


def direct(*tensors, autograd: bool = False) -> bool:
    """Whether an eager call may run its op's body itself rather than through the custom op: no
    ``torch.compile`` trace, no active dispatch mode (``make_fx``, ``FakeTensorMode``, a
    ``TorchDispatchMode``), no ``__torch_function__`` mode, no functorch transform (``vmap``,
    ``grad``), no ``torch.jit.trace`` (``dispatcher_idle``), every tensor a plain ``torch.Tensor`` (or
    ``None``), and no gradient to record (grad mode off or no tensor requiring one) unless
    ``autograd``: the caller records it with the op's own autograd functions
    (``autograd.DirectForward``) (``plain``)."""
    return dispatcher_idle() and plain(*tensors, autograd=autograd)


def per_call_context() -> bool:
    """Whether a call runs where its checks' effects are per call, so no plan may be kept for its
    signature: a ``torch.compile`` trace, forward-mode AD, a functorch transform."""
    return (torch.compiler.is_compiling() or torch.autograd.forward_ad._current_level >= 0
            or torch._C._functorch.peek_interpreter_stack() is not None)


def dispatcher_idle() -> bool:
    """The call-time half of ``direct``: nothing active that needs PyTorch's dispatcher (no
    ``torch.compile`` trace, dispatch or ``__torch_function__`` mode, functorch transform, JIT trace)."""
    return not (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack()
                or torch._C._len_torch_function_stack() or torch._C._functorch.peek_interpreter_stack() is not None
                or torch._C._get_tracing_state() is not None)


def plain(*tensors, autograd: bool = False) -> bool:
    """The tensors' half of ``direct``: each a plain tensor (or ``None``), none requiring a gradient
    in grad mode unless ``autograd``. A function of a signature (``tensor_key`` holds each tensor's
    type and ``requires_grad``, the key the grad mode), so a plan may keep it."""
    grad = torch.is_grad_enabled() and not autograd
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN or (grad and t.requires_grad)):
            return False
    return True


class PlanCache(dict):
    """``signature -> plan``: what an entry point derived from the metadata of a call that passed
    every check. Bounded by ``MAX_PLANS`` (emptied when full)."""

    def __init__(self):
        super().__init__()
        _CACHES.append(self)

    def record(self, key, plan):
        if key is None:
            return plan
        if len(self) >= MAX_PLANS:
            self.clear()
        self[key] = plan
        return plan


def clear() -> None:
    """Empty every plan. The limits the checks read (``spec.assumptions``) are constants; a test that
    lowers one empties the plans first (``tests/conftest.py`` does before every test), so the checks
    run again rather than a plan recorded under the old limit answering."""
    for cache in _CACHES:
        cache.clear()
