"""``python -m generator``: print Triton kernels from the proven spec terms."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from generator.variants import ALLOWED_BLOCKS, ALLOWED_STAGES, ALLOWED_WARPS, MASKS, BlockConfig

EPILOG = """\
examples:
  python -m generator                          # the default block, 64 x 64
  python -m generator --br 128 --bc 64         # another block size (kept beside the others)
  python -m generator --br 64 --bc 64 --mask causal,lengths   # or --mask causal --mask lengths
  python -m generator --br 64 --bc 64 --num-warps 8 --num-stages 2
  python -m generator --br 64 --bc 64 --mask-mod mymasks:prefix_2d   # a user mask_mod (spec.masks.mask_mod)
  python -m generator --br 64 --bc 64 --score-mod mymods:rel_bias    # a user score_mod (spec.score_mods.score_mod)
  python -m generator --br 64 --bc 64 --out /tmp/kernels
  python -m generator --check                  # exit 1 if generated/ is stale or edited
  python -m generator --regenerate             # after a spec or template change: re-emit every config on disk

Before emitting, every claim of spec.claims is proved; a FAILED claim stops the generator
(exit 1) and nothing is written. A config is keyed by its block and mask set: emitting one
never removes another. Its files are written all or nothing (staged, then swapped in; on a
failure the previous files stay). User errors exit 2 with a message.
"""


def _power_of_two_block(flag: str):
    def parse(text: str) -> int:
        allowed = ", ".join(map(str, ALLOWED_BLOCKS))
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a power of two among {allowed} (got {text!r})")
        if value not in ALLOWED_BLOCKS:
            raise argparse.ArgumentTypeError(f"{flag} must be a power of two among {allowed} (got {value})")
        return value
    return parse


def _mask_kinds(text: str) -> list[str]:
    kinds = [k for k in text.split(",") if k]
    bad = [k for k in kinds if k not in MASKS]
    if bad or not kinds:
        raise argparse.ArgumentTypeError(f"mask kinds are {', '.join(MASKS)} (got {text!r})")
    return kinds


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m generator",
        description="Emit Triton attention and softmax kernels whose arithmetic is printed from the "
                    "proven SymPy terms of spec/ (one block config per run), or check generated/.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--br", type=_power_of_two_block("--br"), default=64, metavar="B_r",
                   help="query rows per tile (BLOCK_M): one of %(choices)s" % {"choices": ALLOWED_BLOCKS}
                   + " (default 64)")
    p.add_argument("--bc", type=_power_of_two_block("--bc"), default=64, metavar="B_c",
                   help="keys per tile (BLOCK_N): one of %(choices)s" % {"choices": ALLOWED_BLOCKS}
                   + " (default 64)")
    p.add_argument("--mask", nargs="+", type=_mask_kinds, action="extend", default=None, metavar="KIND",
                   help=f"mask kinds compiled into the kernels, any of {', '.join(MASKS)}: space- or "
                        "comma-separated, and --mask may be repeated (they add up); default: all")
    p.add_argument("--num-warps", type=int, choices=ALLOWED_WARPS, default=None,
                   help="warps per program, forward and backward (default: forward 4 up to a 64x64 "
                        "tile, else 8; backward per kernel, generator/variants.py)")
    p.add_argument("--num-stages", type=int, choices=ALLOWED_STAGES, default=None,
                   help="software-pipeline stages of the streamed tiles, forward and backward (default: "
                        "forward 3 for B_c <= 64, else 2; backward dK/dV 2, dQ 3)")
    p.add_argument("--mask-mod", nargs="+", default=[], metavar="MODULE:NAME",
                   help="user mask_mods (functions decorated with spec.masks.mask_mod) to emit forward and "
                        "backward kernels for, beside the built-ins prefix_lm, chunked, sink_window, document")
    p.add_argument("--score-mod", nargs="+", action="extend", default=[], metavar="MODULE:NAME",
                   help="user score_mods (functions decorated with spec.score_mods.score_mod) to emit forward and "
                        "backward kernels for, their gradients derived by sp.diff and checked before printing")
    p.add_argument("--out", type=Path, default=None, help="output directory (default: generated/)")
    p.add_argument("--check", action="store_true",
                   help="re-render every MANIFEST.json entry in memory; exit 1 listing stale or edited "
                        "files (does not run the proofs, writes nothing)")
    p.add_argument("--regenerate", action="store_true",
                   help="re-emit every config MANIFEST.json lists, each with the block, masks, settings "
                        "and mask_mods it was emitted with (the proofs run once)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)  # bad values exit 2 here, before anything is written
    from generator import manifest  # after parsing: --help stays instant

    out = args.out if args.out is not None else manifest.DEFAULT_OUT
    try:
        return _run(args, out, manifest)
    except manifest.ManifestError as e:
        print(f"python -m generator: error: {e}", file=sys.stderr)
        return 2


def _run(args, out, manifest) -> int:
    if args.check:
        problems = manifest.check(out)
        for problem in problems:
            print(problem)
        if problems:
            print(f"{len(problems)} generated file(s) out of date in {out}")
            return 1
        print(f"generated files in {out} match the spec and the templates")
        return 0

    if args.regenerate:
        configs = manifest.configs_of(manifest.load(out))  # a corrupt manifest: exit 2 before the proofs run
        if not configs:
            print(f"python -m generator: error: {out} lists no config to regenerate; emit one with "
                  "`python -m generator --br 64 --bc 64`", file=sys.stderr)
            return 2
    else:
        masks = [kind for group in args.mask for kind in group] if args.mask else list(MASKS)
        configs = [BlockConfig(args.br, args.bc, args.num_warps, args.num_stages, tuple(masks),
                               tuple(args.mask_mod), tuple(args.score_mod))]
        manifest.load(out)  # a corrupt manifest or an --out that is a file: exit 2 before the proofs run
    from spec.mask_mod import NotInClass, resolve
    for ref in {ref for config in configs for ref in config.mask_mods}:  # importable, in the class
        try:
            resolve(ref)
        except (ImportError, ValueError, NotInClass) as e:
            print(f"--mask-mod {ref}: {e}", file=sys.stderr)
            return 2

    from spec import score_mods
    from spec.proofs.score_mod_user import bound_cases, derivative_cases
    for ref in {ref for config in configs for ref in config.score_mods}:  # importable, in the class, derived
        try:
            sm = score_mods.resolve(ref)
        except (ImportError, ValueError, score_mods.NotInClass) as e:
            print(f"--score-mod {ref}: {e}", file=sys.stderr)
            return 2
        bad = [(name, r) for name, r in derivative_cases(sm) if r != 0]
        if bad:
            print(f"--score-mod {ref}: its printed backward is not the derivative of its printed forward "
                  f"(claim score_mod_derived's cases): {bad[0][0]} leaves {bad[0][1]}", file=sys.stderr)
            return 1
        bad = [(name, r) for name, r in bound_cases(sm) if r != 0]
        if bad:
            print(f"--score-mod {ref}: its printed forward does not have its stated rounding count "
                  f"(claim score_mod_error_bound's cases): {bad[0][0]} leaves {bad[0][1]}", file=sys.stderr)
            return 1

    from spec.claims import prove_all  # kernels are printed from proven terms only
    failed = [r for r in prove_all() if not r.proved]
    if failed:
        for r in failed:
            print(f"FAILED {r.id}: {r.detail}", file=sys.stderr)
        print(f"{len(failed)} claim(s) FAILED: refusing to print kernels from unproven terms "
              "(run `python -m spec` for the residuals)", file=sys.stderr)
        return 1

    for config in configs:
        written = manifest.emit(config, out)
        print(f"{config.command}: wrote {', '.join(written)} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
