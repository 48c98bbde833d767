"""mkdocs hooks: every fact on the site is computed from the code at build time.

The Markdown pages hold the prose; wherever a page needs a fact that the code owns, it
holds a directive, an HTML comment on a line of its own::

    <!-- fp:claims -->                     every claim of spec.claims.REGISTRY, proved now
    <!-- fp:claim mask_tiles_sound -->     one claim
    <!-- fp:claims-summary -->             one table: claim, statement, PROVED/FAILED
    <!-- fp:glossary -->                   spec.notation.GLOSSARY
    <!-- fp:overflow -->                   where exp overflows per dtype (numpy, at build time)
    <!-- fp:sram -->                       on-chip footprint as a function of B_r, B_c, D
    <!-- fp:mask-kinds -->                 the predicates of spec.masks.MASK_KINDS
    <!-- fp:tile-bounds -->                spec.masks.tile_bounds per kind
    <!-- fp:mask-alignment -->             pictures of spec.masks.dense_mask, both alignments
    <!-- fp:tile-classes -->               a picture of spec.masks.classify_tile over a grid
    <!-- fp:packed-tiles -->               a packed batch's block-diagonal mask: dense tiles vs varlen's
    <!-- fp:varlen-terms -->               spec.varlen's segment terms beside their generated lines
    <!-- fp:ring-layouts -->               spec.ring's layouts (P = 4) and each rank's plan per step
    <!-- fp:mask-mod-builtins -->          the built-in mask_mods: predicate, atoms, corner classifier
    <!-- fp:mask-mod-tiles -->             each built-in's tiles classified at their corners (pictures)
    <!-- fp:score-mod-examples -->         the example score_mods: f, its derivatives, the printed lines
    <!-- fp:terms-kernel forward_tile -->  each spec.terms term beside its generated line
    <!-- fp:generated-source fwd -->       a checked-in generated kernel, verbatim
    <!-- fp:generator-help -->             the output of `python -m generator --help`
    <!-- fp:spec-hash -->                  spec.fingerprint.spec_hash_prefix()
    <!-- fp:claim-scopes -->               every claim: scope, assumptions, time, status
    <!-- fp:proof-map -->                  every generated kernel line -> claim -> scope; the rest
    <!-- fp:assumptions -->                spec.assumptions.ASSUMPTIONS
    <!-- fp:trust-base -->                 what the proofs rely on without proving it

``on_page_markdown`` replaces each directive with generated Markdown/HTML; an unknown
directive, an unknown claim, or a term whose generated line cannot be found aborts the
build with a message that names the problem and the fix. Nothing here is pasted: change
a claim in ``spec/`` and the page changes (tests/test_docs.py shows it).
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / "generated"


def _repo_on_path() -> None:
    """`mkdocs build` from a checkout without `pip install -e .`: import this repo's spec.

    Called from ``on_config`` too: mkdocs restores ``sys.path`` after loading a hook file.
    """
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


_repo_on_path()

import sympy as sp  # noqa: E402

DIRECTIVE = re.compile(r"^<!--\s*fp:(?P<name>[a-z-]+)(?P<arg>(?:\s+[\w.-]+)*)\s*-->[ \t]*$", re.M)

# Proof results are computed once per build (several pages show them) and dropped before the
# next one, so `mkdocs serve` and a test that edits a claim always see the current spec.
_results: dict | None = None


class DocsError(PluginError):
    """A fact the site needs is missing or inconsistent; the build stops."""


# ---------------------------------------------------------------------------------
# mkdocs events
# ---------------------------------------------------------------------------------
def on_config(config):
    """Append a Performance section for the benchmark pages that exist (written elsewhere)."""
    _repo_on_path()
    perf = sorted(Path(config["docs_dir"], "performance").glob("*.md"))
    nav = config["nav"]
    if perf and nav is not None and not any(isinstance(e, dict) and "Performance" in e for e in nav):
        pages = [p.relative_to(config["docs_dir"]).as_posix() for p in perf]
        pages.sort(key=lambda s: (not s.endswith("/index.md"), s))  # the overview first
        nav.append({"Performance": pages})
    return config


def on_pre_build(config):
    global _results
    _results = None
    _shown_groups.clear()


def on_post_build(config):
    """Every kernel term group of the spec must appear beside its generated lines somewhere."""
    from spec import terms

    missing = [g for g in terms.GROUPS if g not in _shown_groups]
    if missing:
        raise DocsError(f"spec.terms.GROUPS has {missing}, which no page shows: add "
                        f"<!-- fp:terms-kernel GROUP --> for each to docs/kernel.md (or docs/backward.md)")


def on_page_markdown(markdown, page, config, files):
    def expand(match: re.Match) -> str:
        name, arg = match["name"], match["arg"].split()
        if name not in DIRECTIVES:
            raise DocsError(f"{page.file.src_uri}: unknown directive fp:{name}; known: {sorted(DIRECTIVES)}")
        try:
            return DIRECTIVES[name](*arg)
        except TypeError as err:
            raise DocsError(f"{page.file.src_uri}: fp:{name} {' '.join(arg)}: {err}") from err

    return DIRECTIVE.sub(expand, markdown)


# ---------------------------------------------------------------------------------
# LaTeX: sympy.latex, with the kernel's multi-letter names set upright
# ---------------------------------------------------------------------------------
SPECIAL_NAMES = {"delta": r"\Delta", "BLOCK_M": "B_r", "BLOCK_N": "B_c"}  # the seeds' names


def _symbol_tex(name: str) -> str | None:
    """``qk_scale`` -> ``\\mathrm{qk}_{\\mathrm{scale}}`` (SymPy would print ``qk_{scale}``, which reads
    as q·k); ``None`` (SymPy's own rendering) for single letters and Greek names like ``alpha``."""
    if name in SPECIAL_NAMES:
        return SPECIAL_NAMES[name]
    base, _, sub = name.partition("_")
    if base in ("alpha", "N"):
        return None
    if len(base) == 1:  # m_ij stays m_{ij}; m_safe becomes m_{\mathrm{safe}}
        return rf"{base}_{{\mathrm{{{sub}}}}}" if sub.isalpha() and len(sub) > 2 else None
    out = rf"\mathrm{{{base}}}"
    if sub:
        out += "_{" + ",".join(rf"\mathrm{{{s}}}" if len(s) > 1 and s.isalpha() else s for s in sub.split("_")) + "}"
    return out


def tex(expr) -> str:
    names = {s: t for s in sp.sympify(expr).free_symbols if isinstance(s, sp.Symbol)
             and (t := _symbol_tex(s.name)) is not None}
    return sp.latex(expr, symbol_names=names, mul_symbol="dot")


def math_inline(latex: str) -> str:
    """Arithmatex's own markup, for math inside generated HTML (where Markdown does not run)."""
    return f'<span class="arithmatex">\\({html.escape(latex)}\\)</span>'


def math_block(latex: str) -> str:
    return f"\n$$\n{latex}\n$$\n"


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]|$])")


def md_text(text: str) -> str:
    """Plain text from the code (a claim's statement, a proof's detail) as literal Markdown:
    ``d'_{i-1}`` must not turn into emphasis, ``$`` not into math, ``|`` not into a cell."""
    return _MD_SPECIAL.sub(r"\\\1", html.escape(text, quote=False))


def _indent(text: str, by: str = "    ") -> str:
    return "\n".join(by + line if line.strip() else line for line in text.splitlines())


# ---------------------------------------------------------------------------------
# Claims
# ---------------------------------------------------------------------------------
def _registry():
    from spec import claims

    if not claims.REGISTRY:
        raise DocsError("spec.claims.REGISTRY is empty: the claims are registered with @claim in spec/claims.py; "
                        "nothing to document (is spec/claims.py complete?)")
    return claims.REGISTRY


def _proofs() -> dict:
    global _results
    if _results is None:
        _results = {}
        for cid, c in _registry().items():
            try:
                _results[cid] = c.prove()
            except Exception as err:  # a proof that crashes is a failed proof, shown as such
                from spec.claims import Result

                _results[cid] = Result(cid, False, f"the proof raised {type(err).__name__}: {err}")
    return _results


def _terms_named(name: str) -> list[tuple[str, object]]:
    from spec import printed

    return [(label, t) for label, t in printed.all_terms() if t.name == name]


def _term_latex(name: str) -> list[str]:
    """``name <- expr`` lines for every kernel term (or tile-classifier bound) called ``name``."""
    from spec import masks

    found = [rf"{tex(t.symbol)} &\leftarrow {tex(t.expr)} && \text{{({group.replace('_', ' ')})}}"
             for group, t in _terms_named(name)]
    if not found and name in ("kv_start", "kv_end", "full_start", "full_end"):
        for kind in masks.MASK_KINDS:
            value = getattr(masks.tile_bounds(kind), name)
            if value is not None:
                label = name.replace("_", r"\_")
                found.append(rf"\mathrm{{{label}}} &\leftarrow {tex(value)} && \text{{({kind})}}")
    if not found:
        raise DocsError(f"a claim names the kernel term {name!r}, which is in none of spec.printed.all_terms() "
                        "nor spec.masks.tile_bounds; fix the claim's terms=(...) in spec/proofs/")
    return found


def _status_html(r) -> str:
    return '<span class="fp-proved">PROVED</span>' if r.proved else '<span class="fp-failed">FAILED</span>'


def claim_block(cid: str, heading: str = "###") -> str:
    registry = _registry()
    if cid not in registry:
        raise DocsError(f"the docs name claim {cid!r}, which spec.claims.REGISTRY does not have "
                        f"(it has {list(registry)}); fix the page or the registry")
    c, r = registry[cid], _proofs()[cid]
    status = _status_html(r)
    out = [f"{heading} `{cid}` {{#{cid}}}", "", f"{status} — {md_text(c.statement)}", math_block(c.latex)]
    if not r.proved:
        out.append(f'!!! failure "This claim is FAILED in the current spec"\n    {md_text(r.detail or "no detail")}\n')
    if c.terms:
        lines = [line for name in c.terms for line in _term_latex(name)]
        out.append("Kernel terms it licenses (`spec.terms`, printed by `sympy.latex`):")
        out.append(math_block(r"\begin{aligned}" + r" \\ ".join(lines) + r"\end{aligned}"))
    if r.cases:
        body = [f"How it was checked: {md_text(r.detail)}" if r.detail else "", ""]
        # a code span: case names like "a,b,c[0]" must not be read as Markdown links
        body += [f"- `` {name} ``: residual {_residual(res)}" for name, res in r.cases]
        kind = "success" if r.proved else "failure"
        out.append(f'??? {kind} "Proof cases: residual = simplified difference of the two sides"\n'
                   + _indent("\n".join(body)) + "\n")
    return "\n".join(out) + "\n"


def _residual(res) -> str:
    latex = tex(res)
    if len(latex) > 1500:  # a huge failed residual stays readable as source
        return f"(too long to typeset, {len(latex)} characters of LaTeX)\n\n        `{sp.srepr(res)[:300]}…`"
    return f"${latex}$"


def claims_all() -> str:
    return "\n".join(claim_block(cid) for cid in _registry())


def claims_summary() -> str:
    rows = ["| claim | statement | status |", "|---|---|---|"]
    for cid, c in _registry().items():
        r = _proofs()[cid]
        status = _status_html(r)
        rows.append(f"| [`{cid}`](merge.md#{cid}) | {md_text(c.statement)} | {status} |")
    return "\n".join(rows) + "\n"


def glossary() -> str:
    from spec import notation as n

    rows = ["| kernel name | seeds' notation | meaning |", "|---|---|---|"]
    for name, (seed, meaning) in n.GLOSSARY.items():
        rows.append(f"| `{name}` | `{seed}` | {md_text(meaning)} |")
    return "\n".join(rows) + "\n"


def spec_hash() -> str:
    from spec.fingerprint import spec_hash_prefix

    return f"`{spec_hash_prefix()}`"


def overflow() -> str:
    """Where exp overflows per dtype, and the seeds' example evaluated in float16 with numpy."""
    import numpy as np

    rows = ["| dtype | largest finite value | $e^x$ overflows for $x >$ |", "|---|---|---|"]
    for dt in (np.float16, np.float32, np.float64):
        fmax = np.finfo(dt).max
        rows.append(f"| `{np.dtype(dt).name}` | {float(fmax):.6g} | {float(np.log(np.float64(fmax))):.5g} |")
    x = np.array([10.0, 11.0, 12.0], dtype=np.float16)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
        naive = e / e.sum()
    shifted = np.exp(x - x.max())
    safe = shifted / shifted.sum()
    exact = np.exp(x.astype(np.float64) - 12.0)
    exact /= exact.sum()
    fmt = lambda a: "[" + ", ".join(f"{float(v):.4g}" for v in a) + "]"  # noqa: E731
    return ("\n".join(rows) + "\n\nThe logits $x = (10, 11, 12)$ in float16, evaluated with numpy while "
            "this page was built:\n\n"
            f"| | float16 result |\n|---|---|\n"
            f"| $e^{{x}}$ | `{fmt(e)}` |\n"
            f"| $e^{{x_i}} / \\sum_j e^{{x_j}}$ (naive) | `{fmt(naive)}` |\n"
            f"| $e^{{x_i - m}} / \\sum_j e^{{x_j - m}}$ (safe, $m = 12$) | `{fmt(safe)}` |\n"
            f"| exact (float64) | `{fmt(exact)}` |\n")


def sram() -> str:
    """On-chip footprint of one forward program (FA2), as a formula and for the generated blocks."""
    from generator import manifest
    from spec import notation as n

    D = sp.Symbol("D", integer=True, positive=True)
    elems = {  # tile -> (elements, bytes per element: fp16/bf16 inputs, fp32 accumulators)
        "Q tile": (n.B_r * D, 2), "K tile": (n.B_c * D, 2), "V tile": (n.B_c * D, 2),
        "scores / P tile (fp32)": (n.B_r * n.B_c, 4), "acc (fp32)": (n.B_r * D, 4),
        "m_i, l_i (fp32)": (2 * n.B_r, 4),
    }
    total = sp.expand(sum(e * b for e, b in elems.values()))
    rows = ["| tile | elements | bytes each |", "|---|---|---|"]
    rows += [f"| {name} | ${tex(e)}$ | {b} |" for name, (e, b) in elems.items()]
    blocks = sorted((c.block_m, c.block_n) for c in manifest.configs_of(manifest.load(GENERATED))) or [(64, 64)]
    table = ["| $B_r$ | $B_c$ | $D = 64$ | $D = 128$ |", "|---|---|---|---|"]
    for br, bc in blocks:
        kib = [float(total.subs({n.B_r: br, n.B_c: bc, D: d})) / 1024 for d in (64, 128)]
        table.append(f"| {br} | {bc} | {kib[0]:.1f} KiB | {kib[1]:.1f} KiB |")
    return ("\n".join(rows) + "\n\nIn total, in bytes (no $N$ anywhere):\n"
            + math_block(rf"\text{{bytes}}(B_r, B_c, D) = {tex(total)}")
            + "\nFor the block sizes of the kernels in `generated/`:\n\n" + "\n".join(table) + "\n")


# ---------------------------------------------------------------------------------
# Masks
# ---------------------------------------------------------------------------------
def mask_kinds() -> str:
    from spec import masks

    rows = ["| kind | kernel flag | attend(i, j) | meaning |", "|---|---|---|---|"]
    for k in masks.MASK_KINDS.values():
        rows.append(f"| `{k.name}` | `{k.flag}` | ${tex(k.predicate())}$ | {md_text(k.doc)} |")
    lo, hi = masks.bounds(tuple(masks.MASK_KINDS))
    combined = math_block(rf"\mathrm{{attend}}(i,j) \iff {tex(lo)} \le j \le {tex(hi)}")
    shifts = ", ".join(f"`{a}`: ${tex(s)}$" for a, s in masks.ALIGNMENT_SHIFT.items())
    return ("\n".join(rows) + "\n\nAll kinds at once (the intersection, with the key range $0 \\le j < N_K$):\n"
            + combined + f"\nThe alignment offset `shift` per alignment: {shifts}.\n")


def tile_bounds() -> str:
    from spec import masks

    fields = ("kv_start", "kv_end", "full_start", "full_end")
    rows = ["| kind | " + " | ".join(f"`{f}`" for f in fields) + " |", "|---" * 5 + "|"]
    for kind in masks.MASK_KINDS:
        tb = masks.tile_bounds(kind)
        cells = ["—" if getattr(tb, f) is None else f"${tex(getattr(tb, f))}$" for f in fields]
        rows.append(f"| `{kind}` | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


_CELL = 14  # px per mask cell in the pictures
_COLORS = {"attend": "#3f51b5", "skip": "#f2f2f2", "full": "#c8e6c9", "partial": "#ffe0b2"}


def _svg_mask(dense, title: str, tiles=None) -> str:
    """An SVG of a boolean (nq, nk) mask: rows are queries, columns keys; filled = attended.

    ``tiles`` (optional): ``[(r0, c0, br, bc, cls)]`` painted under the cells by class.
    """
    nq, nk = dense.shape
    pad, c = 22, _CELL
    w, h = pad + nk * c + 2, pad + nq * c + 2
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
             f'role="img" aria-label="{html.escape(title)}">',
             f'<text x="{pad}" y="10" font-size="9" fill="#555">key j →</text>',
             f'<text x="2" y="{pad + 8}" font-size="9" fill="#555" transform="rotate(90 2 {pad + 8})">query i →</text>']
    for r0, c0, br, bc, cls in tiles or ():
        parts.append(f'<rect x="{pad + c0 * c}" y="{pad + r0 * c}" width="{bc * c}" height="{br * c}" '
                     f'fill="{_COLORS[cls]}" stroke="#333" stroke-width="1.5"/>')
    for i in range(nq):
        for j in range(nk):
            fill = _COLORS["attend"] if dense[i, j] else "none"
            parts.append(f'<rect x="{pad + j * c + 2}" y="{pad + i * c + 2}" width="{c - 4}" height="{c - 4}" '
                         f'fill="{fill}" stroke="#9e9e9e" stroke-width="0.5"/>')
    parts.append("</svg>")
    return "".join(parts)


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{caption}</figcaption></figure>"


def mask_alignment() -> str:
    """Causal masks for N_Q != N_K, in both alignments, from spec.masks.dense_mask."""
    from spec import masks

    figures = []
    for nq, nk in ((6, 10), (10, 6)):
        for alignment in masks.ALIGNMENTS:
            shift = masks.alignment_shift(alignment, nq, nk)
            dense = masks.dense_mask(("causal",), nq, nk, shift=shift)
            caption = (f"causal, <code>{alignment}</code>, N_Q = {nq}, N_K = {nk}: shift = {shift}; "
                       f"query 0 sees {int(dense[0].sum())} key(s), the last query sees {int(dense[-1].sum())}")
            figures.append(_figure(_svg_mask(dense, f"causal {alignment} {nq}x{nk}"), caption))
    return '<div class="fp-figures" markdown="0">' + "".join(figures) + "</div>\n"


def tile_classes() -> str:
    """classify_tile over every tile of two example masks, painted under their dense mask."""
    from spec import masks

    examples = [
        (("causal",), 16, 24, 4, 4, dict(shift=24 - 16), "causal, bottom_right"),
        (("causal", "window"), 16, 16, 4, 4, dict(shift=0, window_left=5, window_right=0),
         "causal + window (left = 5), top_left"),
    ]
    figures = []
    for kinds, nq, nk, br, bc, params, label in examples:
        full = dict(N_Q=nq, N_K=nk, **params)
        dense = masks.dense_mask(kinds, nq, nk, **params)
        tiles, counts = [], {"skip": 0, "full": 0, "partial": 0}
        for r0 in range(0, nq, br):
            for c0 in range(0, nk, bc):
                cls = masks.classify_tile(kinds, r0, c0, br, bc, **full)
                tiles.append((r0, c0, br, bc, cls))
                counts[cls] += 1
        caption = (f"{label}, N_Q = {nq}, N_K = {nk}, B_r = B_c = {br}: "
                   + ", ".join(f'<span style="background:{_COLORS[k]}">&nbsp;{k}&nbsp;</span> {v}'
                               for k, v in counts.items()))
        figures.append(_figure(_svg_mask(dense, label, tiles), caption))
    return '<div class="fp-figures" markdown="0">' + "".join(figures) + "</div>\n"


# ---------------------------------------------------------------------------------
# Ring attention
# ---------------------------------------------------------------------------------
_RANK_COLORS = ("#3f51b5", "#e91e63", "#009688", "#ff9800", "#795548", "#607d8b")


def ring_layouts() -> str:
    """Which rank holds which chunk (spec.ring.LAYOUTS), and each rank's plan per causal step
    (spec.ring.plan_step), for P = 4."""
    from spec import ring

    P, c = 4, 36
    figures = []
    for name, lay in ring.LAYOUTS.items():
        owner = {g: r for r in range(P) for g in ring.chunks_of(name, P, r)}
        n = len(owner)
        w = n * c + 2
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{c + 16}" role="img" '
                 f'aria-label="{name} layout, P = {P}">']
        for g in range(n):
            parts.append(f'<rect x="{g * c + 1}" y="14" width="{c - 2}" height="{c - 2}" '
                         f'fill="{_RANK_COLORS[owner[g]]}"/><text x="{g * c + c / 2}" y="{14 + c / 2 + 4}" '
                         f'font-size="11" fill="white" text-anchor="middle">r{owner[g]}</text>'
                         f'<text x="{g * c + c / 2}" y="10" font-size="9" fill="#555" text-anchor="middle">{g}</text>')
        parts.append("</svg>")
        caption = (f"<code>{name}</code>, P = {P}: {P * lay.slots} chunks of N/{P * lay.slots} positions "
                   f"(numbered above), coloured by the rank that holds them — {html.escape(lay.doc)}")
        figures.append(_figure("".join(parts), caption))
    rows = []
    for name in ring.LAYOUTS:
        rows.append(f"| `{name}` | " + " | ".join(
            " · ".join(_plan_cell(ring.plan_step(name, P, r, (r - s) % P, True, 1)) for r in range(P))
            for s in range(P)) + " |")
    table = (f"\n\nEach rank's kernel call per step under a causal mask (ranks 0 … {P - 1}, "
             "left to right; `rows×cols` in slots):\n\n| layout | " + " | ".join(f"step {s}" for s in range(P))
             + " |\n|---" + "|---" * P + "|\n" + "\n".join(rows) + "\n")
    return '<div class="fp-figures" markdown="0">' + "".join(figures) + "</div>\n" + table


def _plan_cell(plan) -> str:
    if plan.kind == "full":
        return f"{plan.rows[1] - plan.rows[0]}×{plan.cols[1] - plan.cols[0]}"
    return {"empty": "—", "causal": "causal"}[plan.kind]


# ---------------------------------------------------------------------------------
# Generated kernels
# ---------------------------------------------------------------------------------
#: which generated kernel files hold each term group (a glob under generated/)
GROUP_FAMILY = {"qk_scale": "fwd", "qk": "fwd", "forward_tile": "fwd", "forward_epilogue": "fwd",
                "softmax_normalise": "softmax", "backward_preprocess": "bwd", "backward_tile": "bwd",
                "backward_tile_t": "bwd", "backward_dkdv_t": "bwd", "backward_dq": "bwd", "backward_scale": "bwd",
                "backward_tail": "bwd",  # a split head dim (MLA, claim head_dim_split)
                "merge_state": "merge",
                # score modifications (docs/softcap.md, alibi.md, sinks.md)
                "softcap_scalars": "fwd", "softcap": "fwd", "alibi_scalar": "fwd", "alibi": "fwd",
                "score_log2_scalar": "fwd", "score_log2": "fwd", "mod_tile_scale": "fwd",
                "sink_fold": "fwd", "sink_grad": "bwd", "softcap_ds": "bwd", "softcap_ds_t": "bwd",
                # split-KV decode's sink, after the combine's fold (docs/decoding.md)
                "sink_partial": "merge",
                # attention dropout (docs/dropout.md)
                "dropout_scale": "fwd", "dropout_base": "fwd", "dropout_keep": "fwd", "dropout_p": "fwd",
                "dropout_dp": "bwd", "dropout_dv_t": "bwd", "dropout_dp_t": "bwd",
                "dropout_box.forward": "fwd", "dropout_box.dropout_mask": "fwd", "dropout_box_packed": "fwd",
                "dropout_box.dkdv": "bwd", "dropout_box.dq": "bwd",
                # MLA's split head dim, in the decode kernel (docs/mla.md)
                "qk_tail": "decode",
                # the FP8 forward's descales (docs/fp8.md)
                "fp8_qk_scale": "fwd", "fp8_p": "fwd", "fp8_v_scale": "fwd", "fp8_out": "fwd"}
FAMILY_GLOB = {"fwd": "attention_fwd_*.py", "bwd": "attention_bwd_*.py", "softmax": "softmax_*.py",
               "merge": "merge_state_*.py", "decode": "attention_decode_*.py"}
#: the file shown for a family: the plain 64x64 variant when it exists, else the first by name
PREFERRED = {"fwd": "attention_fwd_br64_bc64.py", "bwd": "attention_bwd_br64_bc64.py", "merge": "merge_state_br64_bc64.py",
             "decode": "attention_decode_br64_bc64.py"}
#: term groups shown during this build; on_post_build fails if one of spec.terms.GROUPS is not
_shown_groups: set[str] = set()


def _generated_files(family: str) -> list[Path]:
    """The family's generated files, the plain 64x64 variant first."""
    found = sorted(GENERATED.glob(FAMILY_GLOB[family]))
    preferred = GENERATED / PREFERRED.get(family, "-")
    return sorted(found, key=lambda f: f != preferred)


def _rename(family: str, group: str | None = None) -> dict | None:
    """The symbol renames the generator applies for a family (softmax calls the logits ``x``), or for
    a group (dropout's keep term names its coordinates on the forward's row-major tile)."""
    if family == "softmax":
        from generator.render import SOFTMAX_NAMES

        return SOFTMAX_NAMES
    if group == "dropout_keep":
        from generator.render import DROPOUT_NAMES

        return DROPOUT_NAMES
    return None


def _find_term_lines(terms, path: Path, rename: dict | None) -> list[tuple[int, str]]:
    """The generated line of each term, in order: the first line after the previous term's that
    is exactly what ``spec.printer.print_term`` prints for the term today."""
    from spec.printer import print_term

    lines = path.read_text().splitlines()
    pos, found = 0, []
    for t in terms:
        expected = print_term(t, rename)
        k = next((k for k in range(pos, len(lines)) if lines[k].strip() == expected), None)
        if k is None:
            raise DocsError(
                f"term {t.name} = {t.expr} (claim {t.claim}) has no generated line in "
                f"{path.relative_to(ROOT)} after line {pos} (expected `{expected}`): the generated kernel "
                "is stale or its template does not print this term; run `python -m generator` "
                "(`python -m generator --check` lists stale files)")
        found.append((k + 1, lines[k].strip()))
        pos = k + 1
    return found


def terms_kernel(group: str) -> str:
    from spec import terms

    _shown_groups.add(group)
    if group not in terms.GROUPS:
        raise DocsError(f"fp:terms-kernel {group}: spec.terms.GROUPS has {list(terms.GROUPS)}")
    family = GROUP_FAMILY.get(group)
    if family is None:
        raise DocsError(f"term group {group!r} has no kernel family in docs/hooks.py GROUP_FAMILY; add it")
    files = _generated_files(family)
    if not files:
        if family == "bwd":  # the backward kernels are emitted by a later stage of the generator
            return ('!!! warning "No backward kernel is generated yet"\n    `generated/attention_bwd_*.py` '
                    "does not exist in this checkout, so these terms have no kernel line to show.\n")
        raise DocsError(f"no generated/{FAMILY_GLOB[family]}: run `python -m generator` before building the docs")
    return _terms_table(terms.GROUPS[group], files, _rename(family, group), f"term group {group!r}")


def _terms_table(seq, files: list[Path], rename: dict | None, what: str) -> str:
    """Each term of ``seq`` beside its line in the first of ``files`` that prints them all, in order."""
    errors = []
    for path in files:
        try:
            found = _find_term_lines(seq, path, rename)
            break
        except DocsError as err:
            errors.append(str(err))
    else:
        raise DocsError(f"{what}: " + " | ".join(errors))
    rel = path.relative_to(ROOT).as_posix()
    rows = ['<table class="fp-terms"><thead><tr><th>kernel name</th><th>spec term (<code>sympy.latex</code>)</th>'
            f"<th>generated line in <code>{rel}</code></th></tr></thead><tbody>"]
    registry = _registry()
    for t, (lineno, line) in zip(seq, found):
        if t.claim not in registry:
            raise DocsError(f"term {t.name} of {what} cites claim {t.claim!r}, which "
                            "spec.claims.REGISTRY does not have; register it or fix the term's claim")
        term = math_inline(tex(t.symbol) + r" \leftarrow " + tex(t.expr))
        claim = f'<a href="../merge/#{t.claim}"><code>{t.claim}</code></a>'
        rows.append(f"<tr><td><code>{t.name}</code></td><td>{term}<br><small>claim: {claim}</small></td>"
                    f"<td><code>{html.escape(line.split('  # ', 1)[0])}</code>"
                    f"<br><small>line {lineno} · {html.escape(t.note)}</small></td></tr>")
    rows.append("</tbody></table>")
    return "\n".join(rows) + "\n"


def varlen_terms() -> str:
    """The segment terms of a packed batch (spec.varlen) beside their lines in the generated forward."""
    from spec import varlen

    files = _generated_files("fwd")
    if not files:
        raise DocsError(f"no generated/{FAMILY_GLOB['fwd']}: run `python -m generator` before building the docs")
    return _terms_table((*varlen.SEGMENT, varlen.ROWS_PAST_END), files, None, "spec.varlen's segment terms")


def packed_tiles() -> str:
    """A packed batch's block-diagonal causal mask (spec.varlen.packed_mask) twice: tiled on the
    global grid as the dense-mask path sees it (its block map), and tiled per segment as the
    varlen kernels see it (spec.masks.classify_tile at each segment's lengths, bottom-right)."""
    import numpy as np
    import torch

    from generator.runtime.api import EMPTY, FULL, block_map
    from spec import masks, varlen

    lengths_q, lengths_k, br, bc = (5, 10, 3, 8), (5, 10, 6, 8), 4, 4
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(x)]).tolist() for x in (lengths_q, lengths_k))
    dense = varlen.packed_mask(cu_q, cu_k, cu_q[-1], cu_k[-1], causal=True)
    states = block_map(torch.from_numpy(dense), *dense.shape, br, bc)[0, 0].numpy()
    name = {EMPTY: "skip", FULL: "full"}
    grid = [(r * br, c * bc, br, bc, name.get(int(st), "partial")) for (r, c), st in np.ndenumerate(states)]
    per_segment = []
    for q0, q1, k0, k1 in varlen.segments(cu_q, cu_k, cu_q[-1], cu_k[-1]):
        nq, nk = q1 - q0, k1 - k0
        params = dict(N_Q=nq, N_K=nk, shift=masks.alignment_shift(varlen.ALIGNMENT, nq, nk))
        per_segment += [(q0 + r0, k0 + c0, min(br, nq - r0), min(bc, nk - c0),
                         masks.classify_tile(("causal",), r0, c0, br, bc, **params))
                        for r0 in range(0, nq, br) for c0 in range(0, nk, bc)]

    def caption(label, tiles):
        counts = {cls: sum(t[4] == cls for t in tiles) for cls in ("skip", "full", "partial")}
        return (f"{label}: " + ", ".join(f'<span style="background:{_COLORS[k]}">&nbsp;{k}&nbsp;</span> {v}'
                                          for k, v in counts.items())
                + f"; {counts['full'] + counts['partial']} tile pairs computed")

    figures = [
        _figure(_svg_mask(dense, "dense bool mask, global tiles", grid),
                caption(f"dense bool mask over all {cu_q[-1]} x {cu_k[-1]} tokens, B_r = B_c = {br} (block map)",
                        grid)),
        _figure(_svg_mask(dense, "varlen, tiles per segment", per_segment),
                caption(f"varlen, segments (n_q, n_k) = {list(zip(lengths_q, lengths_k))}: tiles start at each "
                        "segment (spec.masks.classify_tile, bottom-right)", per_segment)),
    ]
    return '<div class="fp-figures" markdown="0">' + "".join(figures) + "</div>\n"


def generated_source(family: str) -> str:
    path = next(iter(_generated_files(family)), None)
    if path is None:
        raise DocsError(f"no generated/{FAMILY_GLOB[family]}: run `python -m generator` first")
    rel = path.relative_to(ROOT).as_posix()
    body = _indent(f'```python linenums="1"\n{path.read_text().rstrip()}\n```')
    return f'??? example "The whole of `{rel}`, as checked in"\n{body}\n'


def generator_help() -> str:
    proc = subprocess.run([sys.executable, "-m", "generator", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise DocsError(f"`python -m generator --help` failed ({proc.returncode}):\n{proc.stderr.strip()}")
    return f"```text\n$ python -m generator --help\n{proc.stdout.rstrip()}\n```\n"


# ---------------------------------------------------------------------------------
# What is proven, what is tested (docs/verification.md)
# ---------------------------------------------------------------------------------
_timings: dict = {}


def claim_scopes() -> str:
    import time

    rows = ["| claim | scope | assumes | time | status |", "|---|---|---|---|---|"]
    for cid, c in _registry().items():
        if cid not in _timings:
            start = time.perf_counter()
            _proofs()  # computed once per build; the time is the claim's own re-run
            c.prove()
            _timings[cid] = time.perf_counter() - start
        assumes = ", ".join([f"`{a}`" for a in c.assumptions]
                            + [f"hardware hypothesis `{h}`" for h in c.hypotheses]) or "—"
        rows.append(f"| [`{cid}`](merge.md#{cid}) | {md_text(c.scope or 'not stated')} | {assumes} | "
                    f"{_timings[cid]:.2f} s | {_status_html(_proofs()[cid])} |")
    return "\n".join(rows) + "\n"


def _kernel_statements(path: Path):
    """``(function, line number, text, printed claim or None, category)`` for every statement of
    every @triton.jit function of a generated file (categories from generator.hygiene's rules)."""
    import ast

    from generator import hygiene

    source = path.read_text()
    lines = source.splitlines()
    out = []
    for fn in ast.parse(source).body:
        if not (isinstance(fn, ast.FunctionDef) and hygiene._is_jit(fn)):
            continue
        for stmt in ast.walk(fn):
            if not isinstance(stmt, ast.stmt) or isinstance(stmt, (ast.FunctionDef, ast.If, ast.For)):
                continue
            text = "\n".join(lines[stmt.lineno - 1:stmt.end_lineno]).strip()
            cited = re.search(r"\(claim: (\w+)\)$", text)
            code = text.split("  #")[0]
            if cited:
                out.append((fn.name, stmt.lineno, code, cited[1], "printed"))
                continue
            calls = {hygiene._call_name(c) for c in ast.walk(stmt) if isinstance(c, ast.Call)}
            category = ("store" if "store" in calls else "load" if calls & hygiene.LOADS else
                        "stage / helper call" if any(c.startswith("_") for c in calls) else
                        "return" if isinstance(stmt, ast.Return) else
                        "cast" if "to" in calls and not hygiene._arithmetic(stmt) else "index math / allocation")
            out.append((fn.name, stmt.lineno, code, None, category))
    return out


def _code_cell(code: str) -> str:
    """Kernel code inside a table cell: HTML, so no Markdown escaping shows and `|` splits nothing."""
    return "<code>" + html.escape(code).replace("|", "&#124;") + "</code>"


def proof_map() -> str:
    from generator.hygiene import check_generated

    registry, proofs = _registry(), _proofs()
    out = []
    problems = {name: p for name, p in check_generated(GENERATED).items() if p}
    if problems:
        raise DocsError(f"generator.hygiene finds arithmetic outside the printed terms: {problems}")
    from generator.hygiene import EXCEPTIONS

    out.append("The hygiene check's reviewed exceptions: statements that set a printed term's name "
               "without a printed term (structural lines with no spec term yet, gaps of the proof map):\n")
    out.append("\n".join(f"* `{fn}`: {_code_cell(code)}" for fn, code in sorted(EXCEPTIONS)) + "\n")
    for path in (GENERATED / "attention_fwd_br64_bc64.py", GENERATED / "attention_bwd_br64_bc64.py",
                 GENERATED / "softmax_br64_bc64.py", GENERATED / "attention_decode_br64_bc64.py",
                 GENERATED / "merge_state_br64_bc64.py"):
        stmts = _kernel_statements(path)
        printed = [s for s in stmts if s[3]]
        rest = [s for s in stmts if not s[3]]
        out.append(f"### `{path.name}`\n")
        out.append(f"{len(printed)} printed lines, each proved by the claim it cites; {len(rest)} other "
                   "statements (memory movement, casts, index math, calls), which the hygiene check keeps "
                   "free of float arithmetic and which the numeric tests cover.\n")
        rows = ["| function | line | kernel code | claim | scope | also at symbolic sizes | status |",
                "|---|---|---|---|---|---|---|"]
        for fn, no, code, cid, _ in sorted(printed, key=lambda st: st[1]):
            if cid not in registry:
                raise DocsError(f"{path.name}:{no} cites claim {cid!r}, which spec.claims.REGISTRY does not have")
            name = code.split("=", 1)[0].strip()
            also = ", ".join(f"[`{other}`](merge.md#{other})" for other, c in registry.items()
                             if other != cid and name in c.terms and "symbolic" in c.scope) or "—"
            rows.append(f"| `{fn}` | {no} | {_code_cell(code)} | [`{cid}`](merge.md#{cid}) | "
                        f"{md_text(registry[cid].scope)} | {also} | {_status_html(proofs[cid])} |")
        out.append("\n".join(rows) + "\n")
        tested = ["| function | line | statement | kind |", "|---|---|---|---|"]
        tested += [f"| `{fn}` | {no} | {_code_cell(code.splitlines()[0])} | {kind} |"
                   for fn, no, code, _, kind in sorted(rest, key=lambda st: st[1])]
        out.append('??? note "Statements covered by tests only (no float arithmetic: generator.hygiene)"\n'
                   + _indent("\n".join(tested)) + "\n")
    return "\n".join(out)


def assumptions_table() -> str:
    from spec.assumptions import ASSUMPTIONS

    users = {}
    for cid, c in _registry().items():
        for a in c.assumptions:
            users.setdefault(a, []).append(cid)
    rows = ["| assumption | statement | how the runtime makes it true | claims relying on it |", "|---|---|---|---|"]
    for a in ASSUMPTIONS.values():
        used = ", ".join(f"[`{cid}`](merge.md#{cid})" for cid in users.get(a.name, [])) or "—"
        rows.append(f"| `{a.name}` | {md_text(a.statement)} | {md_text(a.enforcement)} | {used} |")
    return "\n".join(rows) + "\n"


def trust_base() -> str:
    import z3

    from spec import error_bound
    from spec.assumptions import HYPOTHESES

    items = [
        f"**SymPy {sp.__version__}**: `simplify`, `expand` and its assumption system (the sign of an "
        "expression with positive / nonnegative / integer symbols) decide every equality and inequality "
        "of the SymPy claims (`spec.proofs.tools.reduce_zero`, `nonnegative`).",
        f"**z3 {z3.get_version_string()}**: unsat answers for the int32 bit-vector claims "
        "(`int32_index_arithmetic`), the integer head map (`gqa_head_map`), the real / IEEE-fp32 claims "
        "(`exponent_rounding`, `error_bound`, `forward_error_bound`).",
        "**The project's own reasoning code**: `spec.proofs.tools.interpret` (row operations on symbolic "
        "blocks), `spec.proofs.masks.implies` (max/min lattice rules, floor/ceiling definitions), "
        "`spec.proofs.symbolic.canonical` (finite sums: constants out, Fubini, linearity, capture-avoiding "
        "renaming of bound indices), `spec.proofs.backward.Interpreter` (a tile's generic entry with its "
        "axes), `spec.proofs.z3_int32.Int32Line` (the printed line's Python AST as int32 operations, "
        "Triton's truncating `//` and `cdiv`), and `generator.hygiene` (Python `ast`).",
        "**The printer** (`spec.printer`): the claims check the SymPy terms; the kernels run their "
        "printed text. The int32 claim reads the printed text itself; the hygiene check asserts every "
        "arithmetic line of a kernel is one of the printed lines.",
        "**Floating-point model**: IEEE 754 round-to-nearest is monotone with fl(0) = 0; the standard model "
        f"fl(x∘y) = (x∘y)(1+δ), |δ| ≤ u = 2^-24; exp2 within {error_bound.U_FUNC / error_bound.U:g} u (relative), "
        f"log2 within {error_bound.U_FUNC / error_bound.U:g} u·(1 + |log2 x|); ln monotone with ln(xy) = ln x + ln y; "
        "fp16/bf16 products exact in fp32; Triton may contract a multiply and an add into one FMA; no underflow "
        "or overflow inside the error bound; the inner-product lemma |fl(a·b) − a·b| ≤ γ_n Σ|a_i b_i| "
        "(any summation order) for the dots and row sums of `forward_error_bound`.",
        "**Triton semantics**: int32 scalar arguments and `program_id` products, `//` truncating toward zero, "
        "`tl.cdiv(x, d) = (x + d - 1) // d`, constexpr branches compiled as written.",
        "**Hardware hypotheses** (`spec.assumptions.HYPOTHESES`, each named in its claims' scope): "
        + "; ".join(f"`{h.name}`: {h.statement} (source: {h.source}; checked by {h.checked_by})"
                    for h in HYPOTHESES.values()) + ".",
        "**Not proved, tested only**: the load and store masks (template text; the address claims take them as "
        "the lanes' hypotheses), the int32 products no claim bounds (listed under \"What remains outside the "
        "proofs\"), the autograd / runtime glue, and the backward's rounding (no bound; the forward's out and "
        "lse bounds are claim `forward_error_bound`, and Hypothesis searches beyond them in "
        "`tests/test_error_bound.py`).",
    ]
    return "\n".join(f"- {item}" for item in items) + "\n"


def mask_mod_builtins() -> str:
    """The built-in mask_mods of spec.mask_mod: predicate, normal-form atoms with their directions,
    and the corner classifier (all / none) SymPy derives for a tile."""
    from spec import mask_mod as MM

    def atoms(tree):
        if isinstance(tree, MM.Atom):
            return [tree]
        op, arg = tree
        return [] if op == "const" else atoms(arg) if op == "not" else [a for x in arg for a in atoms(x)]

    arrows = {1: "↑", -1: "↓", 0: "–"}
    out = []
    for mm in MM.BUILTINS:
        every, none = mm.classifier()
        rows = "\n".join(f"| ${tex(a.e)} \\ge 0$ | {arrows[a.di]} | {arrows[a.dj]} |" for a in atoms(mm.tree))
        out.append(f"### `{mm.name}`\n\n{md_text(mm.doc)}\n\n"
                   + math_block(rf"P(i, j) \iff {tex(mm.predicate)}")
                   + "\n| atom | in $i$ | in $j$ |\n|---|---|---|\n" + rows + "\n\nTrue on the whole tile:\n"
                   + math_block(tex(every)) + "\nFalse on the whole tile:\n" + math_block(tex(none)))
    return "\n".join(out)


def score_mod_examples() -> str:
    """The example score_mods of spec.score_mods: f, its derivatives by sp.diff, and the lines the
    generator prints for them (forward, dS, and per tensor read its gradient and entry)."""
    import sympy as sp

    from spec import score_mods as SM
    from spec.printer import print_term

    names = SM.KERNEL_NAMES
    out = []
    for sm in SM.EXAMPLES:
        reads = "".join(math_block(rf"\frac{{\partial f}}{{\partial {tex(sp.IndexedBase(r.tensor)[r.indices])}}} = "
                                   + tex(d)) for r, d in zip(sm.reads, sm.derivatives_reads()))
        lines = [print_term(t, names) for t in sm.forward_terms()]
        lines += [print_term(t, names) for t in sm.backward_terms()]  # the dQ kernel's order (_user_score_bwd)
        parts = sm.abs_parts()
        bound = (f"\nForward error: **proven** (claim `score_mod_error_bound`): every monomial of the printed `f` "
                 f"carries at most k = {sm.roundings()} roundings; its absolute tree is α·|s| + κ with\n"
                 + math_block(rf"\alpha = {tex(parts[0])},\quad \kappa = {tex(parts[1])}") if parts is not None
                 and sm.outside_bound() is None else
                 f"\nForward error: **empirical** (no proven bound): {md_text(sm.outside_bound())}.\n")
        out.append(f"### `{sm.name}`\n\n{md_text(sm.doc)}\n\n" + math_block(rf"f = {tex(sm.expr)}")
                   + math_block(rf"\frac{{\partial f}}{{\partial s}} = {tex(sm.derivative_s())}") + reads
                   + "\nPrinted (forward, then the dQ kernel's backward in its order: per tensor read its gradient and "
                   "entry, scattered, then the dS factor; the dK/dV kernel prints the dS factor alone):\n\n"
                   + "```python\n" + "\n".join(lines) + "\n```\n" + bound)
    return "\n".join(out)


def mask_mod_tiles() -> str:
    """Every tile of each built-in classified by its corners (MaskMod.classify), over its dense mask."""
    import numpy as np

    from spec import mask_mod as MM

    docs = np.repeat([0, 1, 2, 3], [5, 9, 3, 7])
    examples = [(MM.prefix_lm, {"prefix": 6}, "prefix = 6"), (MM.chunked, {"chunk": 8}, "chunk = 8"),
                (MM.sink_window, {"sinks": 2, "left": 5}, "sinks = 2, left = 5"),
                (MM.document, {"doc_q": docs, "doc_k": docs}, "documents of 5, 9, 3, 7 tokens")]
    nq = nk = 24
    br = bc = 4
    figures = []
    for mm, values, label in examples:
        dense = mm.dense(nq, nk, 0, values)
        tiles, counts = [], {"skip": 0, "full": 0, "partial": 0}
        for r0 in range(0, nq, br):
            for c0 in range(0, nk, bc):
                cls = mm.classify(r0, c0, br, bc, nq, nk, 0, values)
                tiles.append((r0, c0, br, bc, cls))
                counts[cls] += 1
        caption = (f"<code>{mm.name}</code>, {label}, N = {nq}, B_r = B_c = {br}: "
                   + ", ".join(f'<span style="background:{_COLORS[k]}">&nbsp;{k}&nbsp;</span> {v}'
                               for k, v in counts.items()))
        figures.append(_figure(_svg_mask(dense, mm.name, tiles), caption))
    return '<div class="fp-figures" markdown="0">' + "".join(figures) + "</div>\n"


DIRECTIVES = {
    "claim-scopes": claim_scopes,
    "proof-map": proof_map,
    "assumptions": assumptions_table,
    "trust-base": trust_base,
    "claims": claims_all,
    "claim": claim_block,
    "claims-summary": claims_summary,
    "glossary": glossary,
    "spec-hash": spec_hash,
    "overflow": overflow,
    "sram": sram,
    "mask-kinds": mask_kinds,
    "tile-bounds": tile_bounds,
    "mask-alignment": mask_alignment,
    "tile-classes": tile_classes,
    "packed-tiles": packed_tiles,
    "varlen-terms": varlen_terms,
    "ring-layouts": ring_layouts,
    "mask-mod-builtins": mask_mod_builtins,
    "mask-mod-tiles": mask_mod_tiles,
    "score-mod-examples": score_mod_examples,
    "terms-kernel": terms_kernel,
    "generated-source": generated_source,
    "generator-help": generator_help,
}
