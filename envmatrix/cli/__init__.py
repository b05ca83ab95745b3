"""The `envmatrix` command: one module per command (its parser and handler), the options several
commands share declared once in `options`, and here the parser and the mapping of errors to exit statuses."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from .. import __version__
from ..errors import EnvmatrixError, OutputError
from . import bisect, catalog, check, classify, doctor, golden, gpucheck, images, init, lock, plan, preflight, probe, publish, report, run, submit, watch
from .exits import EXIT_BROKEN_PIPE, drop_stdout, os_problem, print_error

Handler = Callable[[argparse.Namespace], int]
#: The commands in the order `envmatrix --help` lists them; each module has `add_parser(sub)` and `handle(args)`.
COMMANDS = (plan, run, submit, report, publish, golden, lock, check, catalog, classify, probe, bisect, doctor, preflight, gpucheck, init, watch, images)


def build_parser() -> argparse.ArgumentParser:
    """The command line; each subcommand stores its handler in `func`."""
    parser = argparse.ArgumentParser(prog="envmatrix", description="Which CUDA / PyTorch / transformers / flash-attn stacks train cleanly, by experiment.")
    parser.add_argument("--version", action="version", version=f"envmatrix {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: exit status 0 on success, the error family's status otherwise; never a traceback
    (unless --debug). Output trouble is an error too: a reader that went away (`| head -1`) ends
    quietly with 141, a full or unwritable output exits 2 naming it."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.func
    try:
        code = handler(args)
        if sys.stdout is not None:
            sys.stdout.flush()  # a full device or a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        drop_stdout()
        return EXIT_BROKEN_PIPE
    except EnvmatrixError as exc:
        if args.debug:
            raise
        print_error(exc)
        return exc.exit_code
    except OSError as exc:
        if args.debug:
            raise
        drop_stdout()
        err = OutputError(os_problem(exc))
        print_error(err)
        return err.exit_code
    except KeyboardInterrupt:
        print("envmatrix: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
