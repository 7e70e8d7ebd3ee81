"""The `farm` command line: each command parses its options and calls one library function.

`common.py` holds the apps, the shared option types and how a command ends (exit codes: README, "Exit codes");
the commands live by kind in `commands.py` (making music), `planning.py` and `bench.py`.
"""
from __future__ import annotations

import typer

from . import bench, commands, planning
from .common import EXIT_FAILED_TRACKS, app

COMMANDS = (commands, planning, bench)     # imported for their registrations on `app`
__all__ = ["EXIT_FAILED_TRACKS", "app", "main"]


def main() -> None:
    """The `farm` command. A user's mistake is one line and exit 2 (`guarded`); a bug is one line that points at the
    log file holding its traceback, and exit 1."""
    import sys

    from ..errors import write_crash_log

    try:
        app()
    except Exception as exc:        # SystemExit (every normal end, typer.Exit included) is not an Exception
        lines = [line for line in str(exc).splitlines() if line.strip()]
        typer.echo(f"farm: internal error ({type(exc).__name__}: {lines[0][:200] if lines else ''}); the traceback "
                   f"is in {write_crash_log(exc)} — please report it", err=True)
        sys.exit(1)
