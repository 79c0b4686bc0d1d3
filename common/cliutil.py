"""What every `ykshm` subcommand shares: one-line usage errors (exit 2) and failures (exit 1).

A user never sees a traceback: `run_main` turns `UsageError` into exit 2 and `Failure` into exit 1,
each printed as one line `ykshm <cmd>: error: <reason>` on stderr.

Ctrl-C always works: a shell without job control starts a background command (`ykshm ... &` in a
script, a CI runner) with SIGINT ignored, and Python then keeps it ignored, so `kill -INT PID` did
nothing. `run_main` takes SIGINT back (KeyboardInterrupt -> exit 130, or `interrupted` for a
command whose documented way to stop is Ctrl-C: `ykshm run` exits 0); a role that wants another
behaviour installs its own handler after that.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class CliError(Exception):
    """Base of the errors a subcommand reports to the user as one line; never raised itself."""

    exit_code = EXIT_FAILURE


class UsageError(CliError):
    """The command line (or its input) is wrong: bad flag, bad number, bad JSON line. Exit 2."""

    exit_code = EXIT_USAGE


class Failure(CliError):
    """The command was well formed but could not be done: unknown ring, dead peer. Exit 1."""

    exit_code = EXIT_FAILURE


def ranged(convert: Callable[[str], Any], what: str, minimum: Any, maximum: Any) -> Callable[[str], Any]:
    """argparse type: a value `convert` accepts within [minimum, maximum], else argparse's one
    line (`argument --port: 99999 is out of range (1 to 65535)`) and exit 2, before anything acts
    on it."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"{value} is out of range ({minimum} to {maximum})")
        return value

    return parse


def int_range(low: int, high: int) -> Callable[[str], int]:
    return ranged(int, "an integer", low, high)


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error message instead of usage + message."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


EXIT_INTERRUPTED = 130   # the shell's code for a command ended by SIGINT


def run_main(prog: str, body: Callable[[Sequence[str]], int | None], argv: Sequence[str],
             interrupted: int = EXIT_INTERRUPTED) -> int:
    """Run a subcommand body and map its errors to exit codes and one stderr line; Ctrl-C
    (KeyboardInterrupt) is `interrupted`."""
    take_back_ctrl_c()
    try:
        return body(argv) or EXIT_OK
    except CliError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return interrupted
    except BrokenPipeError:
        return EXIT_OK


def first_leaf(error: BaseException) -> BaseException:
    """The first non-group exception inside `error` (itself if it is none): what an `except*`
    that turns a trio role's failure into one line reports."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def take_back_ctrl_c() -> None:
    """SIGINT raises KeyboardInterrupt again, even if our parent left it ignored (see above)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
