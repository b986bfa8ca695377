"""The `keras-gradmon` command."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-gradmon",
        description="Gradient monitoring for Keras and tf-agents.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="train a small model with monitoring on and write TensorBoard logs"
    )
    demo.add_argument("--logdir", default=None, help="where to write the logs")
    demo.add_argument("--epochs", type=int, default=5)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code."""
    args = _parser().parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.command == "demo":
        if args.epochs < 1:
            print(
                f"--epochs must be >= 1. Received: --epochs={args.epochs}",
                file=sys.stderr,
            )
            return 2
        from keras_gradmon.demo import run_demo

        run_demo(args.logdir, epochs=args.epochs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
