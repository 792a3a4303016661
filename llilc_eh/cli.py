"""Command line: `llilc-eh <command> ...` (placeholder, filled in by the il stage)."""


def main(argv=None) -> int:
    return 0
