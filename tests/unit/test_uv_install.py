"""scripts/uv_install.py hands pip's configuration to uv: precedence and the option mapping (no install runs)."""

from __future__ import annotations

import importlib.util
import itertools
import subprocess
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "uv_install.py"
_spec = importlib.util.spec_from_file_location("uv_install", _PATH)
assert _spec and _spec.loader
uv_install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uv_install)


def test_pip_config_precedence_install_over_global_and_variables_over_both(monkeypatch) -> None:
    listed = "\n".join([
        ":env:.find-links='/opt/wheels'",
        "global.constraint='/etc/xdg/pip/constraints.txt'",
        "global.extra-index-url='file:///a/simple file:///b/simple'",
        "global.find-links='/ignored'",
        "global.index-url='https://global.example/simple'",
        "install.index-url='https://install.example/simple'",
        "user.something='not a section pip reads for install'",
    ])

    def fake_run(args, **kw):
        assert args[1:] == ["-m", "pip", "config", "list"]
        return subprocess.CompletedProcess(args, 0, stdout=listed + "\n", stderr="")

    monkeypatch.setattr(uv_install.subprocess, "run", fake_run)
    assert uv_install.pip_settings() == {
        "find-links": "/opt/wheels", "constraint": "/etc/xdg/pip/constraints.txt",
        "extra-index-url": "file:///a/simple file:///b/simple", "index-url": "https://install.example/simple"}


def test_uv_gets_every_index_and_pips_all_index_strategy(monkeypatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    args, env = uv_install.uv_command(".[cpu,test]", {
        "index-url": "https://i.example/simple", "extra-index-url": "file:///a/simple file:///b/simple",
        "find-links": "/opt/wheels", "constraint": "/c.txt", "no-index": "false", "cert": "/ca.crt",
        "default-timeout": "180", "trusted-host": "h.example"})
    assert args[:3] == [sys.executable, "-m", "uv"] and ["-e", ".[cpu,test]"] == args[args.index("-e"):][:2]
    pairs = list(itertools.pairwise(args))
    for pair in [("--index-url", "https://i.example/simple"), ("--extra-index-url", "file:///a/simple"),
                 ("--extra-index-url", "file:///b/simple"), ("--find-links", "/opt/wheels"),
                 ("--constraint", "/c.txt"), ("--allow-insecure-host", "h.example"),
                 ("--index-strategy", "unsafe-best-match"), ("--python", sys.executable)]:
        assert pair in pairs, (pair, args)
    assert "--compile-bytecode" in args and "--no-index" not in args
    assert env["SSL_CERT_FILE"] == "/ca.crt" and env["UV_HTTP_TIMEOUT"] == "180"
    args, _ = uv_install.uv_command(".", {"no-index": "true"})
    assert "--no-index" in args
