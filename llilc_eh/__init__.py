"""llilc-eh: the exception-handling half of a CLR JIT, LLILC-style.

The pipeline runs one way, one sub-package per stage:

    assembly -> il -> reader -> funclets -> backend -> clauses / unwind -> check

Each stage's output is a frozen dataclass that prints itself; no stage reaches back
into an earlier one's internals.
"""

__version__ = "0.1.0"
