"""`python -m llilc_eh.gcinfo ASSEMBLY...`: decode, check and re-encode RyuJIT's GC info of
every body of ReadyToRun images (a name alone means the corpus assembly of that name).

Exit status: 0 all decoded, re-encoded identically and invariants hold; 2 something did not;
1 an argument is not a usable R2R image; 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys

from ..assembly.corpus import Corpus
from ..errors import LlilcEhError
from .r2r import Survey, survey_image


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llilc_eh.gcinfo", description=__doc__.split("\n\n")[0])
    parser.add_argument("assemblies", nargs="+", metavar="ASSEMBLY")
    parser.add_argument("--limit", type=int, default=None, help="bodies per image (default: all)")
    parser.add_argument("--examples", type=int, default=10, help="problems to print (default 10)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return 0 if e.code == 0 else 1
    total = Survey()
    try:
        for name in args.assemblies:
            try:
                path = Corpus().locate(name)
                s = survey_image(path, args.limit)
            except (LlilcEhError, KeyError, OSError) as e:
                print(f"{name}: {e}", file=sys.stderr)
                return 1
            print(f"{path.name}: {s}")
            total.add(s)
    except KeyboardInterrupt:
        return 130
    if len(args.assemblies) > 1:
        print(f"total: {total}")
    for line in total.examples[:args.examples]:
        print(f"  {line}")
    return 2 if total.not_round_tripped or total.violations or total.decode_errors else 0


if __name__ == "__main__":
    sys.exit(main())
