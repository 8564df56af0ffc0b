"""TTFT and decode time as the loopback sees them: a packet capture on ``lo`` that times each streamed completion from
the first byte of its request to the first byte of its first SSE event with a choice (TTFT), and from there to its
last segment holding an event with a choice (the decode span: TPOT = span / (output tokens - 1)), with the kernel's
packet timestamps.

Neither client's own work is in it, so it is the reference both clients' TTFT can be held against
(benchmarks/serve_agreement.py ``--wire``). It needs ``CAP_NET_RAW`` (root; :func:`available`). The capture runs in
its own process with its own socket, ends with the block (also on an error or Ctrl-C) and reads one port's TCP.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import select
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4  # the sender's copy of a loopback packet; the receiver's copy (PACKET_HOST) is kept
SO_TIMESTAMPNS = 35  # Linux asm-generic/socket.h; SCM_TIMESTAMPNS has the same value
FIRST_CHOICE = re.compile(rb'^data:\s*\{.*"choices"\s*:\s*\[\s*\{', re.MULTILINE)  # an SSE event with a choice


def tcp_payload(frame: bytes) -> tuple[int, int, bytes] | None:
    """``(source port, destination port, payload)`` of an Ethernet frame holding IPv4 or IPv6 TCP; else None."""
    if len(frame) < 14:
        return None
    ethertype = struct.unpack_from("!H", frame, 12)[0]
    off = 14
    if ethertype == 0x0800:
        if len(frame) < off + 20 or frame[off + 9] != 6:
            return None
        end = off + struct.unpack_from("!H", frame, off + 2)[0]
        off += (frame[off] & 0x0F) * 4
    elif ethertype == 0x86DD:
        if len(frame) < off + 40 or frame[off + 6] != 6:  # no extension headers on loopback TCP
            return None
        end = off + 40 + struct.unpack_from("!H", frame, off + 4)[0]
        off += 40
    else:
        return None
    if len(frame) < off + 20:
        return None
    sport, dport = struct.unpack_from("!HH", frame, off)
    off += (frame[off + 12] >> 4) * 4
    return sport, dport, frame[off:min(end, len(frame))]


@dataclass
class Streams:
    """Per client connection: a request starts at a segment to the server beginning with an HTTP method; its first
    token is the first later segment from the server holding an SSE event with a non-empty ``choices``, its last
    token the last such segment before the connection's next request (or the capture's end)."""

    port: int
    open: dict[int, float] = field(default_factory=dict)  # client port -> request start, waiting for its first token
    starts: list[float] = field(default_factory=list)
    ttft_s: list[tuple[float, float]] = field(default_factory=list)  # (request start, TTFT), in order of first token
    tokens_s: dict[float, list[float]] = field(default_factory=dict)  # request start -> its segments with a choice
    decoding: dict[int, float] = field(default_factory=dict)  # client port -> start of its request past token 1

    def feed(self, t: float, sport: int, dport: int, payload: bytes) -> None:
        if not payload:
            return
        if dport == self.port and payload[:5] == b"POST ":
            self.open[sport] = t
            self.starts.append(t)
            self.decoding.pop(sport, None)
        elif sport == self.port and FIRST_CHOICE.search(payload):
            if dport in self.open:
                st = self.open.pop(dport)
                self.ttft_s.append((st, t - st))
                self.decoding[dport] = st
            if dport in self.decoding:
                self.tokens_s.setdefault(self.decoding[dport], []).append(t)

    def _timed(self, last: int) -> list[tuple[float, float]]:
        """(start, TTFT) of the ``last`` requests to start that had a first token, in start order."""
        if last <= 0 or not self.starts:
            return []
        cut = sorted(self.starts)[-min(last, len(self.starts))]
        return [(st, d) for st, d in sorted(self.ttft_s) if st >= cut]

    def timed(self, last: int) -> list[float]:
        """TTFTs of the ``last`` requests to start (a run's test request and warm-ups come first), in start order;
        a request among them without a first token is left out (so fewer than ``last`` says some failed)."""
        return [d for _, d in self._timed(last)]

    def _timed_tokens(self, last: int) -> list[list[float]]:
        return [self.tokens_s[st] for st, _ in self._timed(last) if st in self.tokens_s]

    def decode_spans(self, last: int) -> list[float]:
        """Of the same requests as :meth:`timed`: first token to last token, in start order."""
        return [ts[-1] - ts[0] for ts in self._timed_tokens(last)]

    def gaps(self, last: int) -> list[float]:
        """Of the same requests: every gap between consecutive segments with a choice, pooled (ITL per chunk, as
        the clients count it, where each event travels in a segment of its own)."""
        return [b - a for ts in self._timed_tokens(last) for a, b in itertools.pairwise(ts)]


def available() -> str | None:
    """None if a loopback capture can be opened here, else why not."""
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(ETH_P_ALL)).close()
    except (OSError, AttributeError) as exc:
        return f"no loopback packet capture: {exc} (needs Linux and CAP_NET_RAW, e.g. root)"
    return None


def _capture(port: int) -> None:
    """The capture process: frames of ``port`` on ``lo`` until its stdin closes, then one JSON line on stdout."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(ETH_P_ALL))
    s.bind(("lo", 0))
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
    streams = Streams(port)
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([s, sys.stdin], [], [], 1.0)
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 4096):
            break  # the parent closed our stdin (or died): stop
        if s not in readable:
            continue
        frame, anc, _flags, addr = s.recvmsg(1 << 16, socket.CMSG_SPACE(16))
        if addr[2] == PACKET_OUTGOING:
            continue
        got = tcp_payload(frame)
        if got is None or port not in got[:2]:
            continue
        t = next((sec + ns * 1e-9 for lvl, typ, data in anc if lvl == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS
                  for sec, ns in [struct.unpack("qq", data[:16])]), None)
        if t is not None:
            streams.feed(t, *got)
    print(json.dumps({"starts": streams.starts, "ttft_s": streams.ttft_s, "tokens_s": list(streams.tokens_s.items())}),
          flush=True)


Capture = Streams  # what :func:`capture` yields: the capture process's streams, filled in when the block ends


@contextlib.contextmanager
def capture(port: int, start_timeout_s: float = 30.0) -> Iterator[Capture]:
    """Capture the block's requests to ``port`` on ``lo``; the yielded :class:`Capture` is filled when it ends.
    The capture process is its own session (Ctrl-C reaches the caller, whose ``finally`` ends it) and also ends by
    itself when this process dies (its stdin closes)."""
    proc = subprocess.Popen([sys.executable, "-m", "perfsuite.measure.serving.wirecap", str(port)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    cap = Capture(port)
    try:
        ok, _, _ = select.select([proc.stdout], [], [], start_timeout_s)
        line = proc.stdout.readline() if ok else b""
        if line.strip() != b"ready":
            proc.kill()
            err = proc.stderr.read().decode(errors="replace").strip().splitlines()
            raise RuntimeError(f"the loopback capture did not start: {err[-1] if err else 'no output'}")
        yield cap
        out, _ = proc.communicate(timeout=30)  # closes its stdin: the capture stops and reports
        got = json.loads(out.decode().strip().splitlines()[-1])
        cap.starts, cap.ttft_s = list(got["starts"]), [tuple(x) for x in got["ttft_s"]]
        cap.tokens_s = {st: list(ts) for st, ts in got["tokens_s"]}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for f in (proc.stdin, proc.stdout, proc.stderr):
            f.close()


if __name__ == "__main__":
    _capture(int(sys.argv[1]))
