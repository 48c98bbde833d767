"""Proof that a packed (varlen) kernel never reads or writes across segments.

The varlen kernels map each program to one segment ``b`` and print ``spec.varlen.SEGMENT``:
``N_Q``, ``N_K`` from the offsets ``cu_seqlens[b]``, ``cu_seqlens[b+1]`` and the bottom-right
``shift``; they then offset every Q/K/V/O pointer by the segment's first row and run the dense
kernel on the slice. So a segment is sound when

(a) its lengths are non-negative and an index ``0 <= j < N_K`` (``0 <= i < N_Q``) addressed at
    ``cu_seqlens_k[b] + j`` lies inside ``[cu_seqlens_k[b], cu_seqlens_k[b+1])``, and a later
    segment's addresses all lie past it (so no two segments share a row);
(b) the dense kernel on the slice addresses keys ``0 <= j < N_K`` only: partial tiles mask their
    loads and their scores by ``j < N_K`` (``masks.KEEP_INIT``; claim ``mask_tiles_sound``), and
    the full tiles, loaded without a mask, lie in ``[full_start, full_end)`` (``mask_tiles_sound``),
    so it is enough that the narrowed ``full_end <= N_K`` (``q_full_end <= N_Q`` for the dK/dV
    kernel's query tiles) for every set of kinds;
(c) its ``shift`` is the alignment the reference gives a segment (``spec.varlen.ALIGNMENT``);
(d) a segment without keys (``N_K = 0``) visits no key tile, and one without queries
    (``N_Q = 0``) no query tile in the dK/dV kernel: no key of the neighbours is ever loaded
    for it, its rows get output 0 and ``lse = -inf``, its keys zero gradients; and a tile that
    starts past its segment's end (``ROWS_PAST_END``, ``KEYS_PAST_END``) is given exactly that
    empty case, a tile inside it its real lengths;
(e) the launch grid of ``cdiv(max_seqlen, B)`` tiles per segment covers every row of a segment
    with ``n <= max_seqlen`` (which is why a smaller ``max_seqlen`` hint is an error).

Every inequality is decided on slack variables (``end = start + w``, ``w >= 0``), never on samples.
"""

from __future__ import annotations

import sympy as sp
import z3
from sympy.core.function import AppliedUndef

from spec import addresses as A
from spec import launch as L
from spec import masks
from spec import notation as n
from spec import terms
from spec import varlen as V
from spec.proofs.tools import decide, difference, nonnegative, result
from spec.proofs.masks import implies
from spec.proofs import paged as PP
from spec.registry import claim

#: slack variables: the segment lengths, a row/key index's distance to the segment's ends,
#: the gap to a later segment, an index of it, and the max_seqlen hint's excess
w_q, w_k, t, u, gap, j_next, excess, r = sp.symbols("w_q w_k t u gap j_next excess r", integer=True,
                                                    nonnegative=True)
#: monotone offsets: cu_seqlens[b+1] = cu_seqlens[b] + w
MONOTONE = {V.seq_end_q: V.seq_start_q + w_q, V.seq_end_k: V.seq_start_k + w_k}


def _address_cases(tag, length, start, end):
    """Index ``j`` in ``[0, length)`` addressed at ``start + j``: inside ``[start, end)``, and
    before every address of a later segment (which starts at ``end + gap``)."""
    first, last = t, length - 1 - u  # 0 <= j, and j <= length - 1
    return [
        (f"{tag}: length >= 0", nonnegative(length.xreplace(MONOTONE))),
        (f"{tag}: start + j >= cu[b] (j = t >= 0)", nonnegative(sp.expand(start + first - start))),
        (f"{tag}: start + j < cu[b+1] (j = length - 1 - u)",
         nonnegative(sp.expand((end - 1 - (start + last)).xreplace(MONOTONE)))),
        (f"{tag}: a later segment's index lies past start + j",
         nonnegative(sp.expand((end + gap + j_next - (start + last) - 1).xreplace(MONOTONE)))),
    ]


def _loop(init, narrowing, loop, kinds, at=None):
    """A kernel's ranges and tile loop in closed form: init, each kind's narrowing, the rounding.
    ``at`` substitutes into every term *before* chaining (``N_K = 0``: SymPy must not simplify
    with the symbol's ``positive`` assumption first)."""
    seq = list(init) + [term for kind in kinds for term in narrowing(kind)] + list(loop)
    if at:
        seq = [terms.Term(x.symbol, x.expr.xreplace(at), x.claim, x.note) for x in seq]
    return terms.chain(seq)


@claim(V.CLAIM,
       "for a packed batch (cu_seqlens, FlashAttention's varlen layout), the segment terms the kernels print "
       "(N_Q, N_K from the offsets, the bottom-right shift) and the dense tile loop they then run address only "
       "rows and keys of their own segment [cu[b], cu[b+1]) — for all integer offsets, lengths (0 included) and "
       "block sizes (mathematical integers: the int32 offsets are non-negative, so their differences cannot "
       "overflow, and the kernels scale them to pointers in int64): lengths >= 0, segments disjoint, full tiles "
       "(no load mask) below N_K (N_Q in dK/dV) for every kind set, the reference's bottom-right alignment, no tile visited by a segment without keys or "
       "queries nor by a tile past its segment's end, and the launch grid (spec.launch.varlen_grid, the one the "
       "launchers use) of cdiv(max_seqlen, B) tiles covering every segment no longer than max_seqlen",
       r"0\le j<N_K \Rightarrow \mathrm{cu}_k[b]\le \mathrm{cu}_k[b]+j<\mathrm{cu}_k[b+1];\quad "
       r"\mathrm{full}(T)\Rightarrow T\subseteq[0,N_K)",
       terms=("N_Q", "N_K", "shift"),
       scope="symbolic offsets, lengths (0 included) and block sizes (z3/SymPy); mathematical integers Z "
             "(offsets non-negative int32, pointers int64; not the int32 tile bounds of a segment), exact")
def prove_varlen_segments_sound(segment=V.SEGMENT, rows_past_end=V.ROWS_PAST_END, keys_past_end=V.KEYS_PAST_END,
                                bounds_init=masks.BOUNDS_INIT,
                                row_bounds_init=masks.ROW_BOUNDS_INIT, tile_loop=masks.TILE_LOOP,
                                row_tile_loop=masks.ROW_TILE_LOOP, grid=None):
    grid = L.varlen_grid if grid is None else grid
    seg = terms.chain(segment)
    nq, nk = seg[n.Nq], seg[n.Nk]
    # (a) addresses of rows and keys
    cases = _address_cases("keys", nk, V.seq_start_k, V.seq_end_k)
    cases += _address_cases("rows", nq, V.seq_start_q, V.seq_end_q)
    # (c) the alignment of the reference's segment problem, at the segment's lengths
    reference_shift = masks.ALIGNMENT_SHIFT[V.ALIGNMENT].xreplace({n.Nq: nq, n.Nk: nk})
    cases.append(("shift is the reference's alignment of a segment", difference(seg[n.shift], reference_shift)))
    # (d') a tile past the segment's end (the grid covers the longest one) is emptied, one inside kept
    for term, first, length, kept in ((rows_past_end, n.start_m, n.Nq, n.Nk), (keys_past_end, n.start_n, n.Nk, n.Nq)):
        past, inside = term.expr.xreplace({first: length + t}), term.expr.xreplace({first: length - 1 - t})
        cases.append((f"{first} >= {length}: {term.name} = 0", difference(past, sp.Integer(0))))
        cases.append((f"{first} < {length}: {term.name} unchanged", difference(inside, kept)))
    every_set = [()] + list(masks.kind_sets())
    for kinds in every_set:
        tag = "+".join(kinds) or "no kind"
        keys = _loop(bounds_init, masks.bounds_terms, tile_loop, kinds)
        rows = _loop(row_bounds_init, masks.row_bounds_terms, row_tile_loop, kinds)
        # (b) full tiles run without a load mask: they must end inside the segment
        cases.append((f"{tag}: full_end <= N_K", implies([], n.Nk - keys[masks.full_end])))
        cases.append((f"{tag}: q_full_end <= N_Q", implies([], n.Nq - rows[masks.q_full_end])))
        # (d) an empty segment visits no tile: hi <= lo once N_K (N_Q) is 0
        no_keys = _loop(bounds_init, masks.bounds_terms, tile_loop, kinds, at={n.Nk: sp.Integer(0)})
        no_rows = _loop(row_bounds_init, masks.row_bounds_terms, row_tile_loop, kinds, at={n.Nq: sp.Integer(0)})
        cases.append((f"{tag}: N_K = 0 visits no key tile", implies([], no_keys[masks.kv_lo] - no_keys[masks.kv_hi])))
        cases.append((f"{tag}: N_Q = 0 visits no query tile (dK/dV)",
                      implies([], no_rows[masks.q_lo] - no_rows[masks.q_hi])))
    # (e) the grid: cdiv(max_seqlen, B) tiles of B rows cover n <= max_seqlen rows
    #     (B·ceiling(M/B) = M + r with r >= 0, the definition of the ceiling)
    #     the grid is spec.launch.varlen_grid's, the launchers' (claim varlen_addresses proves its
    #     axis 1 too); its tiles: ceiling(M/B), by the definition of the ceiling (M + r)/B, r >= 0
    length, block = sp.symbols("n B", integer=True, positive=True)
    max_seqlen = length + excess
    tiles = grid(max_seqlen, block, A.symbolic("cu_seqlens", ("B1",)), 1)[0]
    covered = (block * tiles).xreplace({sp.ceiling(max_seqlen / block): (max_seqlen + r) / block})
    cases.append(("grid cdiv(max_seqlen, B)·B covers a segment of n <= max_seqlen rows",
                  nonnegative(sp.expand(covered - length))))
    return result(V.CLAIM, cases,
                  f"segment offsets and lengths on slack variables; full-tile ends and empty segments for every "
                  f"combination of {list(masks.MASK_KINDS)} (and none), both kernels' loops")



# ----------------------------------------------------------------------------------
# Packed queries over paged caches: the decode launch's slots (spec.varlen.paged_*).
# ----------------------------------------------------------------------------------
class _Index:
    """A 1-D index tensor (torch's long tensor of one entry per packed token): entry ``p`` is ``at(p)``.
    Arithmetic is elementwise, as torch's."""

    def __init__(self, length, at):
        self.length, self.at = length, at

    def _map(self, other, op):
        other_at = other.at if isinstance(other, _Index) else (lambda p: other)
        return _Index(self.length, lambda p: op(self.at(p), other_at(p)))

    def __add__(self, other):
        return self._map(other, lambda a, b: a + b)

    def __sub__(self, other):
        return self._map(other, lambda a, b: a - b)

    def __mul__(self, other):
        return self._map(other, lambda a, b: a * b)

    def __floordiv__(self, other):
        return self._map(other, lambda a, b: sp.floor(a / b))

    def __mod__(self, other):
        return self._map(other, lambda a, b: sp.Mod(a, b))

    __radd__, __rmul__ = __add__, __mul__


class _Elements:
    """A tensor by what its elements are (torch's value semantics, not its strides): element ``idx`` is element
    ``src(idx)`` of the tensor ``name``. The torch methods spec.varlen's paged functions use: ``shape``,
    ``new_zeros`` (its elements 0: ``name`` None), indexing by ``_Index`` vectors and full slices (advanced
    indexing: adjacent vectors keep their place, separated ones put the gathered dim first), item assignment (kept
    in ``writes``), ``transpose``, ``t``, ``reshape``/``view`` (row-major), ``contiguous``."""

    def __init__(self, name, shape, src=None):
        self.name, self.shape = name, tuple(sp.sympify(s) for s in shape)
        self.src = src if src is not None else (lambda idx: tuple(idx))
        self.writes = []

    def at(self, idx):
        """``(tensor name, index)`` of the element at ``idx``."""
        return self.name, tuple(sp.sympify(i) for i in self.src(tuple(idx)))

    def new_zeros(self, shape, **_):
        return _Elements(None, shape)

    def contiguous(self):
        return self

    def transpose(self, a, b):
        shape = list(self.shape)
        shape[a], shape[b] = shape[b], shape[a]

        def src(idx):
            idx = list(idx)
            idx[a], idx[b] = idx[b], idx[a]
            return self.src(tuple(idx))
        return _Elements(self.name, shape, src)

    def t(self):
        assert len(self.shape) == 2
        return self.transpose(0, 1)

    def reshape(self, *shape):
        """Row-major: element idx of the new shape is the element of the same flat position in the old."""
        shape = list(shape)
        if -1 in shape:
            known = sp.Mul(*[s for s in shape if s != -1])
            shape[shape.index(-1)] = sp.cancel(sp.Mul(*self.shape) / known)

        def src(idx):
            flat = sp.Integer(0)
            for i, s in zip(idx, shape):
                flat = flat * s + i
            old = []
            for s in reversed(self.shape):
                old.append(sp.Mod(flat, s))
                flat = sp.floor(flat / s)
            return self.src(tuple(reversed(old)))
        return _Elements(self.name, shape, src)

    view = reshape

    def _key(self, key):
        key = key if isinstance(key, tuple) else (key,)
        key = key + (slice(None),) * (len(self.shape) - len(key))
        for k in key:
            assert isinstance(k, _Index) or k == slice(None), f"unsupported index {k!r}"
        return key

    def _gather(self, key):
        """``(shape, src)`` of ``self[key]``."""
        key = self._key(key)
        vecs = [d for d, k in enumerate(key) if isinstance(k, _Index)]
        free = [d for d, k in enumerate(key) if not isinstance(k, _Index)]
        if not vecs:
            return self.shape, self.src
        length = key[vecs[0]].length
        adjacent = vecs == list(range(vecs[0], vecs[-1] + 1))
        # the result's dims: the gathered dim where the vectors were (adjacent) or first (separated)
        order = ([d for d in free if d < vecs[0]] + ["p"] + [d for d in free if d > vecs[0]]) if adjacent \
            else (["p"] + free)
        shape = tuple(length if d == "p" else self.shape[d] for d in order)

        def src(idx):
            where = dict(zip(order, idx))
            p = where["p"]
            return self.src(tuple(key[d].at(p) if d in vecs else where[d] for d in range(len(self.shape))))
        return shape, src

    def __getitem__(self, key):
        shape, src = self._gather(key)
        return _Elements(self.name, shape, src)

    def __setitem__(self, key, value):
        self.writes.append((self._gather(key), value))


class _Offsets:
    """A 1-D integer tensor by value (``cu_seqlens_q``): entry ``i`` is ``fn(first + i)`` (a SymPy function), ``length``
    entries. The torch uses of spec.varlen.packed_tokens: slices ``[a:]`` / ``[:b]`` (a view: the same values),
    ``long()``, and gathering by an ``_Index`` (an ``_Index`` of the values)."""

    def __init__(self, fn, length, first=0):
        self.fn, self.length, self.first = fn, sp.sympify(length), sp.sympify(first)

    def at(self, i):
        return self.fn(self.first + i)

    def long(self):
        return self

    def __sub__(self, other):
        """Elementwise, over this vector's entries (``other`` as long: the claim checks the length)."""
        return _Index(self.length, lambda p: self.at(p) - other.at(p))

    def __getitem__(self, key):
        if isinstance(key, _Index):
            return _Index(key.length, lambda p: self.at(key.at(p)))
        assert isinstance(key, slice) and key.step is None, f"unsupported index {key!r}"
        lo = sp.sympify(key.start or 0)
        hi = self.length if key.stop is None else (self.length + key.stop if key.stop < 0 else sp.sympify(key.stop))
        lo = self.length + lo if lo < 0 else lo
        return _Offsets(self.fn, hi - lo, self.first + lo)


class _SearchOps:
    """The torch functions spec.varlen.packed_tokens calls, on symbolic vectors: ``arange(n)`` (entry p is p) and
    ``searchsorted(sorted, values, right)``, whose entry p is an uninterpreted ``searchsorted_k(p)`` constrained by
    ``contract``: torch's documented result on a sorted sequence ``sorted[i − 1] <= v < sorted[i]`` for
    ``right=True`` (``<`` then ``<=`` for ``right=False``), ``0 <= i <= len(sorted)``, the ends open."""

    def __init__(self):
        self.searches = []

    def arange(self, length):
        return _Index(sp.sympify(length), lambda p: p)

    def searchsorted(self, sorted_seq, values, right=False):
        fn = sp.Function(f"searchsorted_{len(self.searches)}")
        self.searches.append((fn, sorted_seq, values, right))
        return _Index(values.length, lambda p: fn(p))

    def contract(self, z, p):
        """z3 hypotheses: every searchsorted's entry ``p`` is torch's answer."""
        out = []
        for fn, seq, values, right in self.searches:
            i, v, size = z(fn(p)), z(values.at(p)), z(seq.length)
            below = z(seq.at(fn(p) - 1)) <= v if right else z(seq.at(fn(p) - 1)) < v
            above = v < z(seq.at(fn(p))) if right else v <= z(seq.at(fn(p)))
            out += [0 <= i, i <= size, z3.Or(i == 0, below), z3.Or(i == size, above)]
        return out


class _Z3Functions(PP._Z3):
    """PP._Z3 with SymPy's undefined functions (``cu(i)``, ``searchsorted_0(p)``) as z3 uninterpreted functions."""

    def __init__(self):
        super().__init__()
        self.functions = {}

    def __call__(self, e):
        e = sp.sympify(e)
        if isinstance(e, AppliedUndef):
            name = str(e.func)
            fn = self.functions.setdefault(name, z3.Function(name, *[z3.IntSort()] * (len(e.args) + 1)))
            return fn(*[self(a) for a in e.args])
        return super().__call__(e)


def _token_cases(tokens):
    """Claim paged_varlen_slots' cases for ``tokens`` (spec.varlen.packed_tokens): every packed row r of a
    non-decreasing ``cu_seqlens_q`` (``cu[0] = 0``, ``cu[B] = total_q``) lands on a token ``(s, t)`` of a segment,
    ``cu[s] <= r < cu[s + 1]``, ``t = r − cu[s]``, the length ``cu[s+1] − cu[s]``; one to one and onto."""
    z, ops = _Z3Functions(), _SearchOps()
    B, total_q = (sp.Symbol(x, integer=True, positive=True) for x in ("B", "total_q"))
    r, r2, s0, t0 = (sp.Symbol(x, integer=True) for x in ("r", "r2", "s", "t"))
    cu = sp.Function("cu")
    out = tokens(_Offsets(cu, B + 1), total_q, ops)
    if not (isinstance(out, tuple) and len(out) == 3 and all(isinstance(x, _Index) for x in out)):
        return [("packed_tokens returns (segment, token, length) vectors", sp.Symbol(repr(out)))]
    seg, tok, length = out
    i, j = z3.Ints("i j")
    cu_z = z.functions["cu"] = z3.Function("cu", z3.IntSort(), z3.IntSort())

    def z_cu(e):
        return cu_z(z(e))
    # cu_seqlens_q as segments() accepts it: from 0 to total_q, non-decreasing
    cu_ok = [cu_z(0) == 0, z_cu(B) == z(total_q), z(B) >= 1,
             z3.ForAll([i, j], z3.Implies(z3.And(0 <= i, i <= j, j <= z(B)), cu_z(i) <= cu_z(j)))]

    def row(p):
        return [0 <= z(p), z(p) < z(total_q)] + ops.contract(z, p)
    s, t = seg.at(r), tok.at(r)
    cases = [
        ("packed_tokens gives one entry per packed row",
         sp.Integer(0) if all(sp.expand(x.length - total_q) == 0 for x in out) else sp.Tuple(*[x.length for x in out])),
        decide("row r lies in its segment s: 0 <= s < B, cu[s] <= r < cu[s+1]", cu_ok + row(r),
                   z3.And(0 <= z(s), z(s) < z(B), z_cu(s) <= z(r), z(r) < z_cu(s + 1))),
        decide("row r is token t = r − cu[s] of segment s, 0 <= t < n_q[s] = cu[s+1] − cu[s]", cu_ok + row(r),
                   z3.And(z(t) == z(r) - z_cu(s), 0 <= z(t), z(t) < z(length.at(r)),
                          z(length.at(r)) == z_cu(s + 1) - z_cu(s))),
        decide("one to one: two packed rows of one (segment, token) are one row",
                   cu_ok + row(r) + row(r2) + [z(s) == z(seg.at(r2)), z(t) == z(tok.at(r2))], z(r) == z(r2)),
    ]
    r0 = cu(s0) + t0
    cases.append(decide(
        "onto: token t of segment s (0 <= t < cu[s+1] − cu[s]) is packed row cu[s] + t < total_q, read as (s, t)",
        cu_ok + [0 <= z(s0), z(s0) < z(B), 0 <= z(t0), z(t0) < z_cu(s0 + 1) - z_cu(s0)] + ops.contract(z, r0),
        z3.And(0 <= z(r0), z(r0) < z(total_q), z(seg.at(r0)) == z(s0), z(tok.at(r0)) == z(t0))))
    return cases


def _same_index(name, got, want, hypotheses, z):
    """The case ``name``: the element ``got`` is ``want`` (both ``(tensor, index)``): the same tensor, and each
    index component equal — SymPy's canonical zero, else z3 under ``hypotheses`` (floor/Mod of a reshape)."""
    if got[0] != want[0] or len(got[1]) != len(want[1]):
        return name, sp.Symbol(f"element {got[0]}{list(got[1])}, not {want[0]}{list(want[1])}")
    residual = [sp.expand(a - b) for a, b in zip(got[1], want[1])]
    if all(r == 0 for r in residual):
        return name, sp.Integer(0)
    def mod_free(e):  # a reshape's remainder as its definition: a mod m = a − m·floor(a / m)
        return sp.sympify(e).replace(sp.Mod, lambda a, m: a - m * sp.floor(a / m))
    try:
        statement = z3.And(*[z(mod_free(a)) == z(mod_free(b)) for a, b in zip(got[1], want[1])])
    except TypeError as e:
        return name, sp.Symbol(f"element {got[0]}{list(got[1])}, not {want[0]}{list(want[1])}: {e}")
    return decide(name, hypotheses, statement)


@claim(V.PAGED_CLAIM,
       "paged varlen (flash_attention_varlen(..., block_table=), run on the decode kernel): for all segment counts "
       "B >= 1 and every non-decreasing cu_seqlens_q from 0 to total_q, spec.varlen.packed_tokens maps packed row "
       "0 <= r < total_q to segment s = searchsorted(cu_seqlens_q[1:], r, right=True) with cu[s] <= r < cu[s+1], "
       "token t = r − cu[s] and length n_q[s] = cu[s+1] − cu[s], one to one and onto the segments' tokens, and "
       "spec.varlen.paged_key_lengths gives segment b's key count k_len[b] = cu_seqlens_k[b+1] − cu_seqlens_k[b] "
       "(spec.varlen.SEGMENT's N_K), the decode launch's cache_seqlens; for "
       "max_seqlen_q >= 1, heads Hq >= 1, head dims D, D_v >= 1, segments b (0 <= b < B) of n_q[b] <= "
       "max_seqlen_q queries and k_len[b] keys and tokens 0 <= t < n_q[b] (packed row r = cu_seqlens_q[b] + t, "
       "total_q rows), spec.varlen.paged_slot puts token (b, t) at row b, slot 0 <= slot < max_seqlen_q of the "
       "decode launch's queries, one to one (two tokens never share a (row, slot)), never in a padding slot "
       "(slot >= max_seqlen_q − n_q[b]) and onto every non-padding slot; the decode kernel's bottom-right position "
       "of that slot (slot + key_len − N_Q with key_len = k_len[b] and N_Q = the launch queries' max_seqlen_q rows) "
       "is the reference's k_len[b] − n_q[b] + t (spec.varlen.SEGMENT's shift at the segment's lengths); "
       "spec.varlen.paged_queries builds (B, max_seqlen_q, Hq, D) zeros with q[r, h, d] written at [row, slot, h, d], "
       "spec.varlen.paged_out reads out[r, h, dv] from the decode's (B, max_seqlen_q, Hq, D_v) at [row, slot, h, dv] "
       "and spec.varlen.paged_lse returns FlashAttention's varlen layout (Hq, total_q) with element [h, r] the decode "
       "lse (B, Hq, max_seqlen_q)'s [row, h, slot] — the element the kernel wrote for that slot and head; so every "
       "element read back is one a token wrote, never a padding slot's",
       r"r \mapsto (s, r - cu[s]),\ cu[s] \le r < cu[s+1];\quad (b, t) \mapsto (b,\ M - n_q[b] + t)\ \text{one to one};\quad "
       r"\mathrm{pos} = t + k_{\mathrm{len}}[b] - n_q[b];\quad \mathrm{lse}[h, r] = \mathrm{lse}_{dec}[b, h, M - n_q[b] + t]",
       terms=(),
       scope="symbolic B, max_seqlen_q, Hq, D, D_v, segment, token, lengths and head (z3 over unbounded integers Z, "
             "SymPy for the element maps); the tensors' values by torch's indexing semantics (not their strides); "
             "cu_seqlens_q an uninterpreted non-decreasing integer function, torch.searchsorted by its documented "
             "result on a sorted sequence (a model: tests/test_mutants.py compares it with torch on numbers)")
def prove_paged_varlen_slots(slot=None, queries=None, out_rows=None, lse_rows=None, tokens=None, key_lengths=None):
    token_cases = _token_cases(V.packed_tokens if tokens is None else tokens)
    key_lengths = V.paged_key_lengths if key_lengths is None else key_lengths
    slot = V.paged_slot if slot is None else slot
    queries = V.paged_queries if queries is None else queries
    out_rows = V.paged_out if out_rows is None else out_rows
    lse_rows = V.paged_lse if lse_rows is None else lse_rows
    z = PP._Z3()
    B, M, Hq, D, Dv, total_q = (sp.Symbol(x, integer=True, positive=True) for x in ("B", "M", "Hq", "D", "D_v", "total_q"))
    b, t, b2, t2, h, d, nq, nq2, klen, r = (sp.Symbol(x, integer=True) for x in (
        "b", "t", "b2", "t2", "h", "d", "n_q", "n_q2", "k_len", "r"))

    def token(bb, tt, nn):
        return [0 <= z(bb), z(bb) < z(B), 0 <= z(tt), z(tt) < z(nn), z(nn) <= z(M), z(M) >= 1]

    row, sl = (sp.sympify(x) for x in slot(b, t, nq, M))
    row2, sl2 = (sp.sympify(x) for x in slot(b2, t2, nq2, M))
    one = token(b, t, nq)
    cases = [
        decide("token (b, t) lands in row b, a slot in [0, max_seqlen_q)", one,
                   z3.And(z(row) == z(b), 0 <= z(sl), z(sl) < z(M))),
        decide("no padding slot: slot >= max_seqlen_q − n_q[b]", one, z(sl) >= z(M) - z(nq)),
        decide("one to one: two tokens at one (row, slot) are one token",
                   one + token(b2, t2, nq2) + [z3.Implies(z(b) == z(b2), z(nq) == z(nq2)),
                                               z(row) == z(row2), z(sl) == z(sl2)],
                   z3.And(z(b) == z(b2), z(t) == z(t2))),
    ]
    # onto the non-padding slots: slot x in [M − n_q, M) of row b is token x − (M − n_q)'s
    x = sp.Symbol("x", integer=True)
    row_x, sl_x = (sp.sympify(e) for e in slot(b, x - (M - nq), nq, M))
    cases.append(decide("onto: every non-padding slot of row b holds a token",
                            [0 <= z(b), z(b) < z(B), z(nq) <= z(M), z(M) - z(nq) <= z(x), z(x) < z(M)],
                            z3.And(z(row_x) == z(b), z(sl_x) == z(x), 0 <= z(x) - (z(M) - z(nq)),
                                   z(x) - (z(M) - z(nq)) < z(nq))))
    # the query position: the decode kernel's bottom-right slot position (the shift it prints, N_K = key_len,
    # N_Q the launch queries' rows) against the reference's segment position
    q = _Elements("q", (total_q, Hq, D))
    row_of, slot_of = sp.Function("row_of"), sp.Function("slot_of")
    rows_v, slots_v = _Index(total_q, row_of), _Index(total_q, slot_of)
    at_token = {row_of(r): row, slot_of(r): sl}
    q_pad = queries(q, rows_v, slots_v, B, M)
    n_q_launch = q_pad.shape[1]
    decode_pos = sl + masks.ALIGNMENT_SHIFT["bottom_right"].xreplace({n.Nk: klen, n.Nq: n_q_launch})
    seg = terms.chain(V.SEGMENT)
    lengths = {V.seq_start_q: 0, V.seq_end_q: nq, V.seq_start_k: 0, V.seq_end_k: klen}
    reference_pos = t + seg[n.shift].xreplace({n.Nq: seg[n.Nq], n.Nk: seg[n.Nk]}).xreplace(lengths)
    cases.append(decide("the decode's position of the slot is the reference's k_len − n_q + t", one,
                            z(decode_pos) == z(reference_pos)))
    # the decode launch's cache_seqlens: segment b's key count, SEGMENT's N_K at cu_seqlens_k[b], cu_seqlens_k[b+1]
    cu_k = sp.Function("cu_k")
    k_lens = key_lengths(_Offsets(cu_k, B + 1))
    cases.append(("paged_key_lengths gives one entry per segment",
                  sp.Integer(0) if isinstance(k_lens, (_Index, _Offsets)) and sp.expand(k_lens.length - B) == 0
                  else sp.Symbol(repr(k_lens))))
    if isinstance(k_lens, (_Index, _Offsets)):
        want = seg[n.Nk].xreplace({V.seq_start_k: cu_k(b), V.seq_end_k: cu_k(b + 1)})
        cases.append(("segment b's key lengths entry (the decode's key_len) is cu_seqlens_k[b+1] − cu_seqlens_k[b], "
                      "SEGMENT's N_K", sp.expand(k_lens.at(b) - want)))
    # the scatter: zeros of (B, max_seqlen_q, Hq, D), token r's q written at [row, slot]
    cases.append(("paged_queries is (B, max_seqlen_q, Hq, D)",
                  sp.Integer(0) if q_pad.shape == (B, M, Hq, D) else sp.Tuple(*q_pad.shape)))
    cases.append(("paged_queries starts from zeros", sp.Integer(0) if q_pad.name is None else sp.Symbol(q_pad.name)))
    written = [(shape, src, value) for (shape, src), value in q_pad.writes]
    if len(written) != 1:
        cases.append(("paged_queries writes q once", sp.Integer(len(written))))
    else:
        (shape, src, value), = written
        index = tuple(e.xreplace(at_token) for e in src((r, h, d)))
        cases.append(("paged_queries writes q[r] whole", sp.Integer(0) if tuple(shape) == tuple(value.shape)
                      == (total_q, Hq, D) else sp.Tuple(*shape)))
        # element (r, h, d) of the assignment: q_pad[index] = value's element (r, h, d), which must be q[r, h, d]
        cases.append(_same_index("paged_queries writes q[r, h, d] (the packed token's element)",
                                 value.at((r, h, d)), ("q", (r, h, d)), one, z))
        cases.append(_same_index("paged_queries writes token r at [row, slot, h, d] (paged_slot's)",
                                 ("q_pad", index), ("q_pad", (row, sl, h, d)), one, z))
    # the read-back: out (B, M, Hq, D_v) and lse (B, Hq, M) at token r's slot
    out = out_rows(_Elements("out", (B, M, Hq, Dv)), rows_v, slots_v)
    cases.append(("paged_out is (total_q, Hq, D_v)",
                  sp.Integer(0) if out.shape == (total_q, Hq, Dv) else sp.Tuple(*out.shape)))
    got = (out.at((r, h, d))[0], tuple(e.xreplace(at_token) for e in out.at((r, h, d))[1]))
    cases.append(_same_index("paged_out's [r, h, dv] is out[row, slot, h, dv]", got, ("out", (row, sl, h, d)), one, z))
    lse = lse_rows(_Elements("lse", (B, Hq, M)), rows_v, slots_v)
    cases.append(("paged_lse is FlashAttention's varlen (Hq, total_q)",
                  sp.Integer(0) if lse.shape == (Hq, total_q) else sp.Tuple(*lse.shape)))
    got = (lse.at((h, r))[0], tuple(e.xreplace(at_token) for e in lse.at((h, r))[1]))
    cases.append(_same_index("paged_lse's [h, r] is the decode lse[row, h, slot] the kernel wrote", got,
                             ("lse", (row, h, sl)), one + [0 <= z(h), z(h) < z(Hq)], z))
    return result(V.PAGED_CLAIM, token_cases + cases,
                  "z3 over Z for the rows' tokens and the slots; element maps by torch's indexing semantics")
