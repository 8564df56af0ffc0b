"""Subcommands of the ``perfsuite`` console script (one module each: ``register(subparsers)``, ``main(args)``)."""
