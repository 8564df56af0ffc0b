"""SIGTERM as Ctrl-C (perfsuite.machine.signals): raised as Terminated inside the block, the old handler back after it, and an
ignored SIGTERM left ignored."""

from __future__ import annotations

import os
import signal
import time

import pytest

from perfsuite.machine import signals


def test_sigterm_inside_the_block_raises_terminated_and_the_old_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    ran_finally = []
    with pytest.raises(signals.Terminated, match="SIGTERM"), signals.sigterm_as_interrupt():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler interrupts the sleep
        finally:
            ran_finally.append(True)
    assert ran_finally == [True]
    assert issubclass(signals.Terminated, KeyboardInterrupt)  # every Ctrl-C path handles it
    assert signal.getsignal(signal.SIGTERM) == before


def test_an_ignored_sigterm_stays_ignored() -> None:
    old = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        assert signals.install() is None
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        signals.restore(None)  # nothing to restore
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, old)


def test_cli_turns_sigterm_into_exit_143(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from perfsuite import cli

    def main(args: object) -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        return 0

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    sub = next(a for a in parser._actions if a.dest == "command")
    sub.choices["doctor"].set_defaults(func=main)  # a real command whose work is replaced by the SIGTERM above
    assert cli.main(["doctor"]) == 143
    assert "terminated (SIGTERM)" in capsys.readouterr().err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_script_started_with_sigint_ignored_still_stops_and_cleans_up(sig: int) -> None:
    """``nohup script &`` from a shell script starts Python with SIGINT ignored; inside ``stoppable`` both kill -INT
    and kill -TERM take the Ctrl-C path, so a ``finally`` (stopping a server, its clients) runs."""
    import subprocess
    import sys

    code = ("import sys, time\nfrom perfsuite.machine.signals import stoppable\nwith stoppable():\n    try:\n"
            "        print('ready', flush=True); time.sleep(60)\n    except KeyboardInterrupt:\n"
            "        print('cleaned up', flush=True); sys.exit(3)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 3 and "cleaned up" in out


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_call_passes_the_signal_to_its_child_and_waits_for_its_cleanup(sig: int, code: int, tmp_path) -> None:
    """``perfsuite run`` drives pytest through ``signals.call``: started in the background (SIGINT ignored), a
    ``kill -INT`` or ``kill -TERM`` to the wrapper alone reaches pytest, which ends its own children before it exits
    (``subprocess.call`` would SIGKILL it at once and orphan its workers)."""
    import subprocess
    import sys

    import psutil

    child = tmp_path / "child.py"  # stands for pytest: a worker of its own, ended in its cleanup
    child.write_text(
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))\n"
        "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(tmp_path / 'worker')!r}, 'w').write(str(w.pid))\n"
        "try:\n    print('ready', flush=True); time.sleep(120)\n"
        "except KeyboardInterrupt:\n"
        f"    w.terminate(); w.wait(); open({str(tmp_path / 'cleaned')!r}, 'w').write('yes'); sys.exit(2)\n")
    wrapper = ("import sys\nfrom perfsuite.machine import signals\n"
               f"rc = signals.call([sys.executable, {str(child)!r}])\nprint('rc', rc, flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", wrapper], stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.send_signal(sig)  # to the wrapper only, as `kill` does
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert f"rc {code}" in out and proc.returncode == 0
    assert (tmp_path / "cleaned").read_text() == "yes"  # the child ran its cleanup: it was not killed outright
    assert not psutil.pid_exists(int((tmp_path / "worker").read_text()))
