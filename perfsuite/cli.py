"""``perfsuite <command>``: each command is a module in perfsuite/adapters/cli with register() and main()."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import perfsuite.adapters.cli
from perfsuite.facts.errors import UsageError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfsuite", description="LLM inference performance regression suite")
    parser.add_argument("--version", action="version", version=f"perfsuite {perfsuite.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in sorted(pkgutil.iter_modules(perfsuite.adapters.cli.__path__), key=lambda m: m.name):
        if not mod.name.startswith("_"):
            importlib.import_module(f"perfsuite.adapters.cli.{mod.name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if extra and not getattr(args, "accepts_extra", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    from perfsuite.machine.signals import Terminated, sigterm_as_interrupt

    try:
        with sigterm_as_interrupt():  # `timeout`, kill, a cancelled CI job: the Ctrl-C path, which cleans up
            return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"perfsuite {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # each command has stopped its processes on the way out (machine.external, pool)
        term = isinstance(exc, Terminated)
        print(f"perfsuite {args.command}: {'terminated (SIGTERM)' if term else 'interrupted'}", file=sys.stderr)
        return 143 if term else 130


if __name__ == "__main__":
    sys.exit(main())
