#!/usr/bin/env python3
"""Fetch the pinned corpus (corpus/packages.tsv, corpus/manifest.tsv) into the cache and verify it.

Usage: tools/fetch_corpus.py [--verify-only]
The cache is $LLILC_EH_CACHE or ~/.cache/llilc-eh; nothing large goes into git.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llilc_eh.assembly.corpus import Corpus  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verify-only", action="store_true", help="only check the hashes of what is there")
    args = ap.parse_args()
    corpus = Corpus()
    if args.verify_only:
        corpus.verify()
    else:
        corpus.fetch()
    print(f"corpus ok: {len(corpus.files)} assemblies verified by sha256")
    return 0


if __name__ == "__main__":
    sys.exit(main())
