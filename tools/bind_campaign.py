#!/usr/bin/env python3
"""Every EH method of a generic type or a generic method in the given assemblies, bound as an
exact instantiation with every type argument the one given, through the whole pipeline for
linux-x64 (the code `llilc-eh run` installs) -- without the runtime.

Why: under `run` an exact instantiation is compiled only when a program makes the runtime ask for
it; this asks the reader, LLVM and our checks about all of them at once, for the type arguments
that stress different paths (int32; float64: SSE passing; a struct holding a reference: auto
layout, write barriers, GC refs in T-typed locals). A failure is a method an exact instantiation
would decline (or get wrong); it names the method and the error.

    tools/bind_campaign.py System.Linq System.Private.CoreLib --arg I4
    tools/bind_campaign.py System.Linq --arg R8
    tools/bind_campaign.py System.Linq --struct PROGRAM.exe Named      # a value class of a program

Assemblies are names in the corpus's framework folder or paths. Exit 0 when all are clean, 2 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path


def main(argv=None) -> int:
    from llilc_eh.assembly.corpus import Corpus
    from llilc_eh.assembly.loader import Assembly
    from llilc_eh.backend.codegen import CodegenPool
    from llilc_eh.batch import tune_gc
    from llilc_eh.pipeline import Pipeline
    from llilc_eh.reader.translate import Options
    from llilc_eh.runtime.install import generic_owners
    from llilc_eh.runtime.instantiation import _arity
    from llilc_eh.target import LINUX_X64

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("assemblies", nargs="+")
    ap.add_argument("--arg", default="I4", help="a primitive type argument (ElementType name: I4, I8, R8, U1 ...)")
    ap.add_argument("--struct", nargs=2, metavar=("FILE", "NAME"), help="a value class of FILE as the type argument")
    ap.add_argument("--opt", type=int, default=2)
    args = ap.parse_args(argv)
    tune_gc()
    arg = ("primitive", args.arg)
    if args.struct:
        ns, _, name = args.struct[1].rpartition(".")
        arg = ("valuetype", str(Path(args.struct[0]).resolve()), ns, name, ())
    framework = Corpus().framework_dir
    counts: collections.Counter = collections.Counter()
    with CodegenPool(1) as pool:
        for a in args.assemblies:
            path = Path(a) if Path(a).is_file() else framework / f"{a}.dll"
            asm = Assembly(path)
            owners = generic_owners(asm)
            pipe = Pipeline(asm, pool, opt=args.opt, options=Options(target=LINUX_X64), differential=False,
                            framework="netcore")
            for rid in asm.methods_with_il():
                token, owner = 0x06000000 | rid, asm.names.method_owner(rid)
                if not owners & {token, owner} or not asm.body(rid).has_eh:
                    continue
                pipe.ee.bind_instantiation(token, (arg,) * (_arity(asm, owner) if owner in owners else 0),
                                           (arg,) * (_arity(asm, token) if token in owners else 0))
                run = pipe.run(rid)
                err = run.error or (run.image_findings or [None])[0] or (run.findings or [None])[0]
                if err is None:
                    counts["clean"] += 1
                    continue
                kind = f"[{err.stage}/{err.kind}]" if hasattr(err, "stage") else "finding"
                counts[kind] += 1
                print(f"{path.stem} | {asm.method(rid).name} | {kind} | {err}")
            print(f"{path.stem}: bound to {arg[1] if arg[0] == 'primitive' else args.struct[1]}", file=sys.stderr)
    print(", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0 if set(counts) <= {"clean"} else 2


if __name__ == "__main__":
    sys.exit(main())
