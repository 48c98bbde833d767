"""Template hygiene: no float arithmetic reaches a kernel except through a printed spec term.

``check_source(source, printed)`` walks every ``@triton.jit`` function of a generated file
(Python ``ast``) and reports, as ``"function:line: problem"`` strings:

1. **float arithmetic not printed.** A statement whose text is not one of ``printed`` (the lines
   the printer emits for some variant, ``printed_lines()``) may not contain arithmetic: a
   ``BinOp`` or unary minus, a float literal, or a ``tl`` math call (``ARITHMETIC_CALLS``) —
   unless every name it touches is on the index allow-list (``INDEX_NAME``) or it sits in the
   allowed places below.
2. **state assigned only by printed terms.** A name some printed line assigns (``acc``, ``l_i``,
   ``m_i``, ``p``, ``lse``, ``off_kvh``, ``kv_lo`` ...) may otherwise be assigned only by a load
   (``tl.load``/``desc.load``/``_tma_tile``, optionally cast with ``.to``), a cast of itself, or a call
   to another ``@triton.jit`` function of the same file (the stage helpers return the state).
3. **no unprinted random draw.** A call to Triton's random functions (``RANDOM_CALLS``: ``tl.rand``,
   ``tl.randint``, ``tl.randn``, their ``4x`` forms, ``philox``) outside a printed line is a problem
   whatever its arguments (index math included): dropout's keep decision is the one printed term
   ``spec.terms.DROPOUT_KEEP`` (claim dropout_mask_same), and a second draw could give the backward
   another mask than the forward's.
4. **stage calls from the proven table.** Every call to a ``*_stage`` helper passes ``(lo, hi,
   MASKED)`` equal to a row of ``spec.structure.KEY_STAGES`` / ``ROW_STAGES`` (claim stages_cover).
4. **pointer arithmetic printed** (issue 24). In every jit function, the pointer of
   every ``tl.load`` / ``tl.store`` is a pointer parameter alone or ``pointer + offset`` with
   ``offset`` a name a printed address term assigns (``spec.addresses``, claims
   ``decode_addresses`` / ``forward_addresses`` / ``rows_addresses`` / ``append_addresses`` /
   ``backward_addresses`` / ``backward_kernel_addresses`` / ``tma_addresses`` / ``varlen_addresses``), and no
   other statement
   computes on a pointer
   (a pointer is a parameter some load or store of the function reads through, or that it hands
   to a helper of the file at a pointer parameter's place: ``_file_pointers``), and what it hands to a
   helper at a pointer parameter's place is a pointer parameter or a name a printed line assigns (a
   local built by hand, ``X_row = X + ...``, would escape the rest). Integer arithmetic on pointers that is not
   printed is refused, as unprinted float arithmetic is; no function is excepted.

   A TMA descriptor is moved (``desc.load(box)``, ``desc.store(box, tile)``) only at a printed box
   (``spec.addresses.TMA_BOXES``, claim ``tma_addresses``) or a parameter every caller hands one.
5. **launch strides from spec.launch** (issue 24). A generated file's host code passes no kernel
   stride by hand (a keyword ``stride_*=``): strides ride the integers of a ``spec.launch`` function,
   which the address claims quantify over; no host function is excepted; nor a window side
   (``window_left=``, ``window_right=``): they ride ``spec.launch.window_arguments``.
6. **program coordinates pass through by name** (audit of round three). The address claims prove a
   helper's offsets in its parameters ``off_b``, ``off_h``, ``off_kvh``, ``off_bc``, ``off_head`` (``COORDINATES``:
   the batch entry, query head, KV head, cache row, head of the program); a call of a ``@triton.jit`` helper
   of the file hands each such parameter the caller's name of the same coordinate, whose binding is a
   grid line or a printed term. ``_fp8_descales(..., off_b, off_h, ...)`` (the descales of the query head:
   NaN under GQA) or ``(..., off_bc, ...)`` (of the cache row) proved every claim before this rule
   (``COORDINATE_GAPS``: the reviewed exceptions).

7. **load and store masks printed** (issue 24). In every jit function, the ``mask=`` of every
   ``tl.load`` / ``tl.store`` combines (``&``, ``[:, None]``) names printed mask terms assign (``spec.addresses``
   and ``spec.paged``: a name ending ``_ok``, e.g. ``row_ok``, ``d_ok``, ``key_ok``; claims ``decode_addresses``,
   ``paged_kv_reads``, ``forward_addresses``), or locals every assignment of which combines such names the same
   way (the forward's ``k_mask = d_ok[None, :]``, ``k_mask = k_mask & key_ok[:, None]``), and holds no comparison of
   its own; a printed mask's name is assigned only by a printed line. (Rule 2 leaves these names to this rule.)

8. **lanes printed** (issue 24). A ``tl.arange`` (a tile's lanes) appears only in a printed line: the lane terms
   ``offs_x = base + tl.arange(0, width)`` of ``spec.addresses`` (``*_LANES``), whose claims (``decode_addresses``,
   ``forward_addresses``, ``backward_addresses``, ``backward_kernel_addresses``, ``rows_addresses``,
   ``append_addresses``) read each lane's base and width from the printed term; and a lane a printed line assigns is
   assigned by no other line (rule 2). No function is excepted (a user score_mod's ``_score_param_scatter`` prints its
   chunk lanes too).

9. **tile loops printed** (issue 24). Every ``for`` header of a jit function (``for x in range(a, b, c):``,
   ``tl.range``, ``tl.static_range`` alike) is a printed loop term ``x = tile_range(a, b, c)`` of ``spec.addresses``
   (``*_LOOPS``), whose claims (``decode_addresses``, ``forward_addresses``, ``backward_kernel_addresses``,
   ``rows_addresses``) read its start, stop and step (the tiles ``x = a + t·c < b``) and its variable, the tile start
   the printed lane's base reads: a hand-edited header (a step ``2 * BLOCK_N``, a stop ``hi - 1``) is refused. The
   index loops are loop terms too (``tile_range(0, GROUP)``, ``tile_range(S)``): dK/dV's loop over the GROUP query
   heads of its K/V head and ``_merge_states``' loop over the S splits, whose claims (``backward_kernel_addresses``,
   ``rows_addresses``) prove they reach each query head of the K/V head, each split, exactly once. No loop is
   excepted.

The allow-list (reviewed; keep it short):

* loads and stores: ``tl.load(ptr, mask=..., other=<padding value>)`` (the ``other`` literal is
  the value padding reads as), ``tl.store(ptr, x.to(dtype), mask=...)`` with a name or its cast;
* a padding select ``x = tl.where(<printed mask>, x, <constant>)`` of a loaded tile (a masked load's ``other=``
  after the load, as the TMA path does for keys past ``key_len`` with the printed ``key_ok``, claims
  ``forward_addresses`` and ``tma_addresses``): its predicate combines printed mask terms (names ending ``_ok``,
  ``&``, ``[:, None]``) as rule 7's masks do; a comparison of its own is refused;
* casts ``x.to(dtype)``, ``tl.multiple_of`` (``x = tl.multiple_of(x, C)``: a hint, the same value), ``tl.program_id``,
  ``tl.zeros`` of a
  name no printed line assigns (``dlse`` when the loss ignores lse), ``reshape``;
* index and pointer math: every name matches ``INDEX_NAME`` (offsets, strides, sizes, block
  constants, pointers — capitalised names —, loop bounds, masks of booleans).

Index names added when varlen (#13), decode (#14) and ring (#17) were merged: ``lse_row0`` /
``lse_off_b`` (an lse row's offset), ``seq_start_q/k``, ``n_q``, ``n_k`` (a packed segment's
start and lengths, from the printed ``spec.varlen.SEGMENT``), decode's ``tok``, ``head``,
``split``, ``page``, ``page_idx``, ``slot``, ``k_rows``, ``v_rows``, the merge kernels' split
index ``s``, and pointers spelled in capitals with underscores (``LSE_A``, ``O_S``). With mask_mod
(#16): ``mm_state``, the integer tile class (0 skip / 1 partial / 2 full) the printed corner
classifier assigns (``spec.mask_mod``, claim mask_mod_sound); the stage loop AND-s it into
``tile_state`` with ``tl.where(mm_state == 0, 0, tile_state)`` (Kleene's AND on the skip state),
integer tile logic like ``tile_state`` itself.

``EXCEPTIONS``: the reviewed per-line list of statements that break rule 2 without being a
printed term; each is reported as a gap (a structural line with no spec term yet), not allowed
by pattern. Any other line stays under the strict rules.

``check_generated()`` runs it over every ``.py`` file of ``generated/`` that holds a
``@triton.jit`` function, so a kernel file another change adds is checked without registering it.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

#: names of integer index / pointer / boolean-mask values: arithmetic on these alone is index math
INDEX_NAME = re.compile(
    r"^(offs_\w+|off_\w+|start_\w+|stride_\w+|N_Q|N_K|N|R|H|H_KV|GROUP|(MAP_)?BLOCK_\w+|HEAD_DIM|g|i|j|"
    r"lo|hi|key_len|shift|window_left|window_right|row_ok|rows|in_bounds|q_mask|kv_mask|tile_state|"
    r"[A-Z][A-Za-z0-9]*(_[a-z]+)?|[A-Z][A-Z0-9]*(_[A-Z0-9]+)+|\w+_ptrs|out_ptrs|tile|"
    # merged with varlen / decode / merge (see the module docstring)
    r"lse_row0|lse_off_b|seq_start_[qk]|n_q|n_k|tok|head|split|page|page_idx|slot|k_rows|v_rows|s|"
    # the printed address terms (issue 24, spec.addresses): offsets `*_off`, per-program bases `*_base`,
    # the forward's query tile index (rule 4 lets a pointer move only by a printed `*_off`)
    r"[a-z]\w*_off|[a-z]\w*_base|pid_m|"
    # merged with mask_mod (#16): the mask_mod's integer tile class (0 skip / 1 partial / 2 full)
    r"mm_state)$")
#: (function, statement) pairs that assign a printed term's name without a printed term: reviewed
#: gaps, each named in docs/verification.md's hygiene section; nothing else is excepted
EXCEPTIONS = frozenset({
    # (every grid's program split is a printed term since issue 24: spec.addresses.GRID_GROUPS, claim launch_grid)
    # varlen: the packed segment's lengths rebind the kernel's N_Q / N_K (values from the printed
    # SEGMENT terms through _varlen_segment; the rebind itself is no term)
    ("_attn_fwd", "N_Q = n_q"), ("_attn_fwd", "N_K = n_k"),
    ("_attn_bwd_dkdv", "N_Q = n_q"), ("_attn_bwd_dkdv", "N_K = n_k"),
    ("_attn_bwd_dq", "N_Q = n_q"), ("_attn_bwd_dq", "N_K = n_k"),
    # merge_states: the fold starts from spec.terms.MERGE_IDENTITY (0, -inf), printed by print_expr
    # (claim lse_merge proves it the identity) but not as a claim-commented init term
    ("_merge_states", "o_acc = tl.full([BLOCK_M, BLOCK_D], 0, dtype=tl.float32)"),
    ("_merge_states", 'lse_acc = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)'),
    # score modifications (issue 15): the values a modification that is switched off leaves in place
    # (its constexpr compiles every use out, so no kernel computes with them); the switched-on values
    # are the printed SOFTCAP_SCALARS / ALIBI_SCALAR / SOFTCAP terms
    ("_score_mod_scalars", "softcap_in = 0.0"), ("_score_mod_scalars", "softcap_out = 0.0"),
    ("_score_mod_scalars", "alibi_coef = 0.0"), ("_score_mod", "t = qk"),
})
#: a helper's program-coordinate parameters (rule 6): a call hands each the caller's name of the same coordinate
COORDINATES = frozenset({"off_b", "off_h", "off_kvh", "off_bc", "off_head"})
#: (caller, helper, parameter) triples rule 6 accepts with another argument, each listed on docs/verification.md
COORDINATE_GAPS = frozenset({
    # decode's rows are GROUP x N_Q: each row's query head is the printed `head` (claim decode_addresses), a
    # vector, with padding rows at head 0 (`head_safe`), for the ALiBi slope read of _score_mod_scalars and a
    # user score_mod's h
    ("_decode_fwd", "_score_mod_scalars", "off_h"), ("_decode_fwd", "_user_score", "off_h"),
})
#: a printed mask term's name ends so (spec.addresses.MASK_SUFFIX)
MASK_SUFFIX = "_ok"
#: names the printed address terms assign (spec.addresses): offsets a pointer may be moved by
ADDRESS_CLAIMS = ("decode_addresses", "varlen_addresses", "forward_addresses", "rows_addresses", "append_addresses",
                  "backward_addresses", "backward_kernel_addresses", "tma_addresses")
#: calls that do not compute on values (everything else — tl.exp2, tl.dot, tl.where, tl.math.*, ... —
#: is arithmetic unless every name it touches is index math); the reviewed allow-list
ALLOWED_CALLS = {"program_id", "multiple_of", "zeros", "trans", "reshape", "to", "range", "store"}
#: Triton's random draws: only a printed line may make one (rule 3)
RANDOM_CALLS = {"rand", "randint", "randn", "rand4x", "randint4x", "randn4x", "philox", "philox_impl"}
#: calls that bring values in from memory (their result may be assigned to a term's name)
LOADS = {"load", "_tma_tile"}


def _is_jit(fn: ast.FunctionDef) -> bool:
    return any(ast.unparse(d) in ("triton.jit", "jit") for d in fn.decorator_list)


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _index_only(node) -> bool:
    return all(INDEX_NAME.match(name) or name == "tl" for name in _names(node))


def _arithmetic(node, helpers=frozenset()) -> list[ast.AST]:
    """Sub-expressions of ``node`` that are float arithmetic outside the allowed places."""
    found = []

    def visit(x):
        if isinstance(x, ast.Call):
            name = _call_name(x)
            if name in LOADS:  # a load's pointer is index math; its `other=` is the padding value
                for a in x.args:
                    visit(a)
                for kw in x.keywords:
                    if kw.arg != "other":
                        visit(kw.value)
                return
            if name not in ALLOWED_CALLS and name not in helpers and not _index_only(x):
                found.append(x)  # tl.exp2(...), tl.dot(...), float("-inf"), ...
                return
        if isinstance(x, ast.Constant) and isinstance(x.value, float):
            found.append(x)
            return
        if isinstance(x, (ast.BinOp, ast.UnaryOp)) and not isinstance(x.op, (ast.BitAnd, ast.BitOr, ast.Not,
                                                                              ast.Invert)):
            if not _index_only(x):
                found.append(x)
                return
        for child in ast.iter_child_nodes(x):
            visit(child)

    visit(node)
    return found


def _stage_triple(call: ast.Call, stage_names: set[str]):
    names = [a.id for a in call.args if isinstance(a, ast.Name) and a.id in stage_names]
    flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, bool)]
    if len(names) != 2 or len(flags) != 1:
        return None
    return names[0], names[1], flags[0]


def _pointers(fn: ast.FunctionDef) -> set[str]:
    """The parameters some load or store of ``fn`` reads through (the root name of its pointer)."""
    params = {a.arg for a in fn.args.args}
    out = set()
    for call in (c for c in ast.walk(fn) if isinstance(c, ast.Call) and _call_name(c) in ("load", "store")):
        if call.args:
            root = call.args[0]
            while isinstance(root, ast.BinOp):
                root = root.left
            if isinstance(root, ast.Name) and root.id in params:
                out.add(root.id)
    return out


def _file_pointers(jit: list[ast.FunctionDef]) -> dict[str, set[str]]:
    """``{function: its pointer parameters}``: those a load or store reads through, a TMA descriptor's
    ``.load``/``.store`` is called on, or that the function hands to a helper of the file at a pointer
    parameter's place (to a fixed point: ``K`` of ``_attn_fwd`` reaches a load only in ``_attn_fwd_tile``)."""
    params = {fn.name: [a.arg for a in fn.args.args] for fn in jit}
    out = {fn.name: _pointers(fn) for fn in jit}
    for fn in jit:
        for call in (c for c in ast.walk(fn) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                     and c.func.attr in ("load", "store") and isinstance(c.func.value, ast.Name)
                     and c.func.value.id in params[fn.name]):
            out[fn.name].add(call.func.value.id)  # desc.load([...]), Out.store([...], ...)
    changed = True
    while changed:
        changed = False
        for fn in jit:
            for call in (c for c in ast.walk(fn) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                         and c.func.id in params):
                callee = params[call.func.id]
                for k, arg in enumerate(call.args):
                    if (k < len(callee) and callee[k] in out[call.func.id] and isinstance(arg, ast.Name)
                            and arg.id in params[fn.name] and arg.id not in out[fn.name]):
                        out[fn.name].add(arg.id)
                        changed = True
    return out


def _descriptor_calls(fn: ast.FunctionDef, pointers: set[str]) -> list[ast.Call]:
    """``desc.load(box)`` / ``desc.store(box, tile)`` of ``fn``: a TMA descriptor (a pointer parameter) moved at
    the coordinates ``box``."""
    return [c for c in ast.walk(fn) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
            and c.func.attr in ("load", "store") and isinstance(c.func.value, ast.Name)
            and c.func.value.id in pointers]


def _box_parameters(jit: list[ast.FunctionDef], pointers: dict[str, set[str]]) -> dict[str, set[str]]:
    """``{function: its parameters a descriptor is moved at}`` (``_tma_tile``'s ``box``): what a caller hands
    there must be a printed box (rule 4)."""
    out = {}
    for fn in jit:
        params = {a.arg for a in fn.args.args}
        out[fn.name] = {c.args[0].id for c in _descriptor_calls(fn, pointers[fn.name])
                        if c.args and isinstance(c.args[0], ast.Name) and c.args[0].id in params}
    return out


def _pointer_problems(fn: ast.FunctionDef, lines, printed: set[str], addresses: set[str],
                      pointers: set[str] | None = None, helper_pointers: dict | None = None,
                      boxes: frozenset = frozenset(), box_params: dict | None = None) -> list[str]:
    """Rule 4 for one function: loads and stores through ``pointer`` or ``pointer + <printed offset>``,
    no other arithmetic on a pointer outside printed lines (``pointers``: the function's pointer
    parameters, ``_file_pointers``; by default those it loads or stores through), and a helper of the
    file is handed at a pointer parameter's place (``helper_pointers``: ``{helper: its parameters,
    its pointer parameters}``) a pointer parameter or a name a printed line assigns, never a local
    built by hand (``Grad_row = ScoreGrad + ...`` would escape the rules above). A TMA descriptor is moved
    (``desc.load(c)``, ``desc.store(c, x)``) only at ``c`` a printed box (``boxes``: spec.addresses.TMA_BOXES,
    claim tma_addresses) or a box parameter (``box_params``), and a helper's box parameter is handed a printed
    box or a box parameter."""
    pointers = _pointers(fn) if pointers is None else pointers
    box_params = box_params or {}
    own_boxes = set(boxes) | box_params.get(fn.name, set())
    problems = []
    descriptor_calls = {id(c) for c in _descriptor_calls(fn, pointers)}
    for call in (c for c in ast.walk(fn) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                 and box_params.get(c.func.id) and helper_pointers):
        names = helper_pointers[call.func.id][0]
        for k, arg in enumerate(call.args):
            if k < len(names) and names[k] in box_params[call.func.id] and not (
                    isinstance(arg, ast.Name) and arg.id in own_boxes):
                problems.append(f"{fn.name}:{call.lineno}: `{ast.unparse(arg)}` handed to {call.func.id} as the TMA "
                                f"box {names[k]} is not a printed box (spec.addresses.TMA_BOXES, claim tma_addresses)")
    if helper_pointers:
        printed_names = {t.id for stmt in ast.walk(fn) if isinstance(stmt, ast.Assign)
                         and "\n".join(lines[stmt.lineno - 1:stmt.end_lineno]).strip() in printed
                         for target in stmt.targets for t in ast.walk(target) if isinstance(t, ast.Name)}
        params = {a.arg for a in fn.args.args}
        for call in (c for c in ast.walk(fn) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                     and c.func.id in helper_pointers):
            names, ptrs = helper_pointers[call.func.id]
            for k, arg in enumerate(call.args):
                if (k < len(names) and names[k] in ptrs and isinstance(arg, ast.Name)
                        and arg.id not in params and arg.id not in printed_names):
                    problems.append(f"{fn.name}:{call.lineno}: `{arg.id}` handed to {call.func.id} as the pointer "
                                    f"{names[k]} is neither a pointer parameter nor a printed address term "
                                    "(spec.addresses)")
    for stmt in (x for x in ast.walk(fn) if isinstance(x, ast.stmt)
                 and not isinstance(x, (ast.If, ast.For, ast.While, ast.FunctionDef))):
        text = "\n".join(lines[stmt.lineno - 1:stmt.end_lineno]).strip()
        if text in printed:  # a printed term (a cu_seqlens load, a segment's pointer move): proven
            continue
        allowed = set()
        for call in (c for c in ast.walk(stmt) if isinstance(c, ast.Call) and _call_name(c) in ("load", "store")):
            ptr = call.args[0] if call.args else None
            if id(call) in descriptor_calls:  # desc.load(box): the coordinates a printed box
                if ptr is not None:
                    allowed.add(id(ptr))
                if not (isinstance(ptr, ast.Name) and ptr.id in own_boxes):
                    problems.append(f"{fn.name}:{call.lineno}: TMA coordinates `{ast.unparse(ptr)}` of a "
                                    f"{_call_name(call)} are not a printed box (spec.addresses.TMA_BOXES, claim "
                                    "tma_addresses)")
                continue
            ok = isinstance(ptr, ast.Name) and ptr.id in pointers or (
                isinstance(ptr, ast.BinOp) and isinstance(ptr.op, ast.Add) and isinstance(ptr.left, ast.Name)
                and ptr.left.id in pointers and isinstance(ptr.right, ast.Name) and ptr.right.id in addresses)
            if ptr is not None:
                allowed.add(id(ptr))
            if not ok:
                problems.append(f"{fn.name}:{call.lineno}: pointer `{ast.unparse(ptr)}` of a {_call_name(call)} is "
                                "not `pointer + offset` with a printed address term (spec.addresses)")
        for node in ast.walk(stmt):
            if isinstance(node, (ast.BinOp, ast.AugAssign)) and id(node) not in allowed and _names(node) & pointers:
                problems.append(f"{fn.name}:{stmt.lineno}: `{ast.unparse(node)}` computes on a pointer without a "
                                "printed address term (spec.addresses)")
                break
    return problems


def _launcher_problems(tree: ast.Module) -> list[str]:
    """Rule 5: a generated file's host functions pass no kernel stride by hand (a keyword ``stride_*=``): the
    strides ride the integers a spec.launch function returns, which the address claims quantify over; nor a
    window side (``window_left=``, ``window_right=``: ``spec.launch.window_arguments``' names, claim window_clamp)."""
    problems = []
    for fn in (f for f in tree.body if isinstance(f, ast.FunctionDef) and not _is_jit(f)):
        for call in (c for c in ast.walk(fn) if isinstance(c, ast.Call)):
            for kw in call.keywords:
                if kw.arg and kw.arg.startswith("stride_"):
                    problems.append(f"{fn.name}:{call.lineno}: `{kw.arg}={ast.unparse(kw.value)}` passes a stride by "
                                    "hand; take it from the spec.launch function of the kernel (its claim reads it)")
                if kw.arg in ("window_left", "window_right"):  # audit of issue 24's additions: a swap typed here
                    problems.append(f"{fn.name}:{call.lineno}: `{kw.arg}={ast.unparse(kw.value)}` passes a window side "
                                    "by hand; pass **spec.launch.window_arguments(window) (claim window_clamp reads it)")
    return problems


def _coordinate_problems(jit: list[ast.FunctionDef]) -> list[str]:
    """Rule 6: a call of a @triton.jit helper of the file hands each parameter named a program coordinate
    (``COORDINATES``) the caller's name of the same coordinate (``COORDINATE_GAPS``: the reviewed exceptions)."""
    params = {fn.name: [a.arg for a in fn.args.args] for fn in jit}
    problems = []
    for fn in jit:
        for call in (c for c in ast.walk(fn) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                     and c.func.id in params):
            pairs = list(zip(params[call.func.id], call.args)) + [(kw.arg, kw.value) for kw in call.keywords]
            for name, arg in pairs:
                if name in COORDINATES and not (isinstance(arg, ast.Name) and arg.id == name) \
                        and (fn.name, call.func.id, name) not in COORDINATE_GAPS:
                    problems.append(f"{fn.name}:{call.lineno}: `{ast.unparse(arg)}` handed to {call.func.id} as its "
                                    f"coordinate {name}: the claims prove the helper's offsets at the caller's "
                                    f"{name}; pass it by that name")
    return problems


def check_source(source: str, printed: set[str], assigned: set[str], stages: set[tuple]) -> list[str]:
    """The hygiene problems of one generated file (empty: clean). ``printed``: every line the
    printer emits (stripped); ``assigned``: the names printed lines assign; ``stages``: the
    allowed ``(lo, hi, MASKED)`` triples."""
    tree = ast.parse(source)
    lines = source.splitlines()
    jit = [fn for fn in tree.body if isinstance(fn, ast.FunctionDef) and _is_jit(fn)]
    helpers = {fn.name for fn in jit}
    stage_names = {name for triple in stages for name in triple[:2]}
    problems = _launcher_problems(tree) + _coordinate_problems(jit)
    file_pointers = _file_pointers(jit)
    addresses = {name for name in (line.split("=", 1)[0].strip() for line in printed
                                   if any(f"(claim: {c})" in line for c in ADDRESS_CLAIMS))
                 if name.endswith("_off")}  # the offsets of spec.addresses (OFFSET_SUFFIX), not its indices
    boxes = frozenset(name for name in (line.split("=", 1)[0].strip() for line in printed
                                        if "(claim: tma_addresses)" in line) if name.endswith("_box"))
    # the printed masks (rule 7): names a printed line assigns ending _ok; rule 2 leaves them to rule 7
    mask_names = {name for name in assigned if name.endswith(MASK_SUFFIX)}
    assigned = set(assigned) - mask_names
    helper_pointers = {fn.name: ([a.arg for a in fn.args.args], file_pointers[fn.name]) for fn in jit}
    box_params = _box_parameters(jit, file_pointers)
    for fn in jit:
        problems += _mask_problems(fn, lines, printed, mask_names)
        problems += _pointer_problems(fn, lines, printed, addresses, file_pointers[fn.name], helper_pointers, boxes,
                                      box_params)
        for stmt in ast.walk(fn):
            if not isinstance(stmt, ast.stmt) or isinstance(stmt, (ast.FunctionDef, ast.If, ast.For)):
                if isinstance(stmt, ast.For):  # rule 9: a tile loop's header is a printed loop term
                    head = lines[stmt.lineno - 1].strip()
                    if head not in printed:
                        problems.append(f"{fn.name}:{stmt.lineno}: loop header `{head}` is not a printed loop term "
                                        "(spec.addresses.*_LOOPS: for x in range(start, stop, step), whose address "
                                        "claim reads start, stop and step)")
                if isinstance(stmt, (ast.If, ast.For)):  # their headers: conditions and ranges
                    header = stmt.test if isinstance(stmt, ast.If) else stmt.iter
                    for bad in _arithmetic(header, helpers):
                        problems.append(f"{fn.name}:{stmt.lineno}: float arithmetic `{ast.unparse(bad)}` "
                                        "in a condition or loop range")
                continue
            text = "\n".join(lines[stmt.lineno - 1:stmt.end_lineno]).strip()
            where = f"{fn.name}:{stmt.lineno}"
            if text in printed or (fn.name, text) in EXCEPTIONS:
                continue
            lanes = [c for c in ast.walk(stmt) if isinstance(c, ast.Call) and _call_name(c) == "arange"]
            if lanes:
                problems.append(f"{where}: lane `{ast.unparse(lanes[0])}` is not a printed lane term (spec.addresses."
                                "*_LANES: offs_x = base + tl.arange(0, width), whose address claim reads base and width)")
                continue
            draws = [c for c in ast.walk(stmt) if isinstance(c, ast.Call) and _call_name(c) in RANDOM_CALLS]
            if draws:
                problems.append(f"{where}: random draw `{ast.unparse(draws[0])}` is not the printed keep term "
                                "(spec.terms.DROPOUT_KEEP, claim dropout_mask_same): a second draw could give the "
                                "backward another dropout mask than the forward's")
                continue
            for call in (c for c in ast.walk(stmt) if isinstance(c, ast.Call) and _call_name(c).endswith("_stage")):
                triple = _stage_triple(call, stage_names)
                if triple not in stages:
                    problems.append(f"{where}: stage call with (lo, hi, MASKED) = {triple}, not a row of the "
                                    "proven stage table (spec.structure, claim stages_cover)")
            select = _padding_select(stmt, assigned)
            if select is not None:
                if not _combines(select, mask_names):
                    problems.append(f"{where}: the padding select `{text}` keeps the lanes `{ast.unparse(select)}`, "
                                    "not printed mask terms: print the predicate as a mask term (spec.addresses, a "
                                    f"name ending {MASK_SUFFIX}) whose claim proves the lanes it keeps")
                continue
            if isinstance(stmt, (ast.Assign, ast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                value = stmt.value
                if names & assigned and not _allowed_state_source(value, names, helpers):
                    problems.append(f"{where}: `{text}` assigns {sorted(names & assigned)}, which only a printed "
                                    "spec term, a load or a @triton.jit helper may assign")
                    continue
            for bad in _arithmetic(stmt, helpers):
                problems.append(f"{where}: float arithmetic `{ast.unparse(bad)}` is not a printed spec term "
                                "(and not loads, stores, casts or index math)")
    return problems


def _mask_problems(fn: ast.FunctionDef, lines, printed: set[str], mask_names: set[str]) -> list[str]:
    """Rule 7 for one function: every ``mask=`` of a ``tl.load`` / ``tl.store`` combines printed masks
    (``mask_names``) with ``&`` and ``[:, None]`` / ``[None, :]`` only (no comparison of its own, no other name),
    and a printed mask's name is assigned only by its printed line."""
    problems = []
    # locals every assignment of which combines printed masks (to a fixed point): the forward's k_mask
    assigns: dict[str, list] = {}
    for stmt in (x for x in ast.walk(fn) if isinstance(x, ast.Assign) and len(x.targets) == 1
                 and isinstance(x.targets[0], ast.Name)):
        assigns.setdefault(stmt.targets[0].id, []).append(stmt.value)
    allowed = set(mask_names)
    changed = True
    while changed:
        changed = False
        for name, values in assigns.items():
            if name not in allowed and all(_combines(v, allowed | {name}) for v in values):
                allowed.add(name)
                changed = True
    for call in (c for c in ast.walk(fn) if isinstance(c, ast.Call) and _call_name(c) in ("load", "store")):
        for kw in (k for k in call.keywords if k.arg == "mask"):
            text = ast.unparse(kw.value)
            if any(isinstance(x, ast.Compare) for x in ast.walk(kw.value)):
                problems.append(f"{fn.name}:{call.lineno}: the mask `{text}` of a {_call_name(call)} compares by "
                                "hand; print the comparison as a mask term (spec.addresses, a name ending "
                                f"{MASK_SUFFIX}) whose claim proves the lanes it admits")
                continue
            other = sorted(n for n in _names(kw.value) if n not in allowed and n != "None")
            if other:
                problems.append(f"{fn.name}:{call.lineno}: the mask `{text}` of a {_call_name(call)} reads {other}, "
                                f"not printed mask terms (spec.addresses, names ending {MASK_SUFFIX})")
    for stmt in (x for x in ast.walk(fn) if isinstance(x, (ast.Assign, ast.AugAssign))):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)} & mask_names
        text = "\n".join(lines[stmt.lineno - 1:stmt.end_lineno]).strip()
        if names and text not in printed:
            problems.append(f"{fn.name}:{stmt.lineno}: `{text}` assigns the printed mask {sorted(names)} by hand")
    return problems


def _combines(node, names) -> bool:
    """Whether ``node`` combines ``names`` with ``&`` and broadcasts ``x[:, None]`` / ``x[None, :]`` only."""
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd):
        return _combines(node.left, names) and _combines(node.right, names)
    if isinstance(node, ast.Subscript):
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return _combines(node.value, names) and all(
            (isinstance(x, ast.Slice) and x.lower is x.upper is x.step is None)
            or (isinstance(x, ast.Constant) and x.value is None) for x in parts)
    return False


def _padding_select(stmt, assigned):
    """``x = tl.where(<predicate>, x, <constant>)``: padding of a loaded tile read as a constant (what a masked
    load's ``other=`` does), e.g. the TMA path's keys past ``key_len``. Returns the predicate (None: not a padding
    select); the caller accepts it only when it combines printed mask terms (rule 7's names ending ``_ok``)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    v = stmt.value
    if (isinstance(v, ast.Call) and _call_name(v) == "where" and len(v.args) == 3
            and isinstance(v.args[1], ast.Name) and v.args[1].id == stmt.targets[0].id
            and isinstance(v.args[2], ast.Constant) and stmt.targets[0].id not in assigned):
        return v.args[0]
    return None


def _allowed_state_source(value, names, helpers) -> bool:
    """A load (optionally cast), a cast of the same name, or a call to a jit helper of this file."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "to":
        value = value.func.value
    if isinstance(value, ast.Call) and _call_name(value) == "multiple_of" and value.args:
        value = value.args[0]  # x = tl.multiple_of(x, C): a hint, the same value
    if isinstance(value, ast.Name):
        return value.id in names  # x = x.to(DOT_DTYPE)
    if isinstance(value, ast.Compare):  # `mask_tile = tl.load(...) != 0`: a load of bits
        return isinstance(value.left, ast.Call) and _call_name(value.left) in LOADS
    return isinstance(value, ast.Call) and (_call_name(value) in LOADS or _call_name(value) in helpers)


def variant_lines(variants) -> tuple[set[str], set[str]]:
    """The printed lines (those citing a claim) the generator renders for ``variants``, and the names
    those lines assign."""
    from generator.render import CONTEXTS

    lines: set[str] = set()

    def collect(value):
        if isinstance(value, str):
            lines.add(value.strip())
        elif isinstance(value, dict):
            for v in value.values():
                collect(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                collect(v)

    for variant in variants:
        collect(CONTEXTS[variant.kind.name](variant))
    printed = {line for line in lines if "(claim: " in line}
    return printed, {line.split("=", 1)[0].strip() for line in printed if not line.startswith("for ")}


@lru_cache(maxsize=None)
def printed_lines() -> tuple[frozenset[str], frozenset[str], frozenset[tuple]]:
    """Every line the generator prints for any variant of any block config it knows, the names
    those lines assign, and the allowed stage triples (``spec.structure``)."""
    from spec import structure as S

    from generator.variants import BlockConfig

    printed, assigned = variant_lines(BlockConfig(64, 64).variants())
    stages = {(st.lo.name, st.hi.name, st.masked) for st in (*S.KEY_STAGES, *S.ROW_STAGES)}
    return frozenset(printed), frozenset(assigned), frozenset(stages)


def check_file(path: Path) -> list[str]:
    printed, assigned, stages = printed_lines()
    return [f"{path.name}:{p}" for p in check_source(path.read_text(), set(printed), set(assigned), set(stages))]


def check_generated(out: Path | None = None) -> dict[str, list[str]]:
    """``{file name: problems}`` for every ``.py`` file of ``generated/`` with a ``@triton.jit`` function."""
    from generator.manifest import DEFAULT_OUT

    out = out or DEFAULT_OUT
    return {p.name: check_file(p) for p in sorted(out.glob("*.py")) if "@triton.jit" in p.read_text()}
