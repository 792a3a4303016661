"""The exit of a tool script, as the command line's contract has it (llilc_eh.cli.EXIT_STATUS):
its main's status, 130 on Ctrl-C, 141 when the reader of its output went away (`| head`) --
never a traceback for either. One place for it, so every tool in tools/ ends the same way:

    if __name__ == "__main__":
        toolmain.run(main)
"""

from __future__ import annotations

import sys
from typing import Callable


def run(main: Callable[[], int]) -> None:
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:     # `| head`: the reader went away
        sys.stderr.close()
        sys.exit(141)
