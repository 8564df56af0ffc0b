"""Install a requirement (editable) with uv, under pip's own configuration: what scripts/install.sh runs first.

    python scripts/uv_install.py ".[cpu,test]"

uv resolves the same versions as pip from the same places in a fraction of the time (2026-12-07, 2-core AMD EPYC:
40 s against ~150 s for ``.[cpu,test]``, byte-compiled both, identical ``pip freeze``;
benchmarks/data/test-time-20261207/install-uv.md). uv does not read pip's configuration, so this hands it over:
the index, extra indexes, find-links, constraints, no-index, trusted hosts, the CA bundle and the timeout, from
``pip config list`` (files and ``PIP_*`` variables, the ``install`` section over ``global``, variables over both).
pip looks at every index for the best version; ``--index-strategy unsafe-best-match`` makes uv do the same.
Exit status: uv's (scripts/install.sh falls back to pip on any failure).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile

_RANK = {"global": 0, "install": 1, ":env:": 2}  # later wins, as in pip
_LISTS = {"extra-index-url": "--extra-index-url", "find-links": "--find-links", "constraint": "--constraint",
          "trusted-host": "--allow-insecure-host"}


def pip_settings() -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                         check=True).stdout
    best: dict[str, tuple[int, str]] = {}
    for line in out.splitlines():
        name, sep, value = line.partition("=")
        section, _, key = name.rpartition(".")
        if sep and section in _RANK and (key not in best or _RANK[section] >= best[key][0]):
            best[key] = (_RANK[section], str(ast.literal_eval(value)))
    return {k: v for k, (_, v) in best.items()}


def uv_command(requirement: str, settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    args = [sys.executable, "-m", "uv", "pip", "install", "-q", "--python", sys.executable, "--compile-bytecode",
            "--index-strategy", "unsafe-best-match", "-e", requirement]
    env = dict(os.environ)
    if "index-url" in settings:
        args += ["--index-url", settings["index-url"]]
    for key, flag in _LISTS.items():
        for value in settings.get(key, "").split():
            args += [flag, value]
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        args.append("--no-index")
    if "cert" in settings:
        env.setdefault("SSL_CERT_FILE", settings["cert"])
    if "default-timeout" in settings:
        env.setdefault("UV_HTTP_TIMEOUT", settings["default-timeout"])
    return args, env


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print('usage: python scripts/uv_install.py ".[extras]"', file=sys.stderr)
        return 2
    args, env = uv_command(argv[0], pip_settings())
    with tempfile.TemporaryDirectory(prefix="perfsuite-uv-") as tmp:  # uv leaves a build lock file in the temp folder
        return subprocess.run(args, env={**env, "TMPDIR": tmp}).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
