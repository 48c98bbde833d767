"""Host-side input rewrites that bring an input inside ``spec.assumptions`` without changing the result.

Each function is written once and used twice: on SymPy symbols by its claim
(``spec.proofs.rewrites``), and on torch tensors / Python numbers by the runtime
(``generator.runtime.checks``). Plain Python on purpose: ``-q``, ``q * 0`` and ``min`` mean
the same on a symbol, a float and a tensor (where autograd sees them, so ``dq`` comes back
through the rewrite with its sign).
"""

from __future__ import annotations


def scale_sign(q, scale):
    """``(q', s')`` with ``s' > 0`` and ``s'·(q'·k) = s·(q·k)`` for every key ``k`` (claim
    ``scale_sign_rewrite``): ``s > 0`` unchanged, ``s < 0`` -> ``(-q, -s)``, ``s = 0`` -> ``(0·q, 1)``.
    The kernels' running max ``max(m, s·rowmax(qk))`` is the max of the scaled logits only for
    ``s > 0`` (assumption ``scale_positive``)."""
    if scale > 0:
        return q, scale
    if scale == 0:
        return q * 0, 1
    return -q, -scale


def window_side_bound(n_q, n_k):
    """The widest window side that still changes anything: ``|j - (i + shift)| <= N_q + N_k`` for
    every query ``i < N_q``, key ``j < N_k`` and alignment (claim ``window_clamp``)."""
    return n_q + n_k


def window_clamp(window, n_q, n_k):
    """``(min(left, b), min(right, b))`` with ``b = window_side_bound(N_q, N_k)``: the same keys
    are attended, and the kernels' int32 tile bounds cannot overflow (assumption ``window_bounded``)."""
    bound = window_side_bound(n_q, n_k)
    return _min(window[0], bound), _min(window[1], bound)


def _min(a, b):
    """``min`` on numbers, ``Min`` on SymPy integers (the claim evaluates the call sites symbolically)."""
    import sympy as sp

    if isinstance(a, sp.Basic) or isinstance(b, sp.Basic):
        return sp.Min(a, b)
    return min(a, b)
