"""perfsuite.measure.serving.wirecap: TTFT on the loopback. Frame parsing and request/first-token pairing on frames built by
hand; a live capture against the stub server where this machine allows one (CAP_NET_RAW)."""

from __future__ import annotations

import struct

import psutil
import pytest

from perfsuite.measure.serving import wirecap
from perfsuite.measure.serving.wirecap import Streams, tcp_payload

SERVER = 8123


def _tcp(sport: int, dport: int, payload: bytes) -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, 0x18, 65535, 0, 0) + payload


def _ipv4(sport: int, dport: int, payload: bytes, pad: bytes = b"") -> bytes:
    seg = _tcp(sport, dport, payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(seg), 0, 0, 64, 6, 0, bytes([127, 0, 0, 1]),
                     bytes([127, 0, 0, 1]))
    return b"\0" * 12 + b"\x08\x00" + ip + seg + pad


def _ipv6(sport: int, dport: int, payload: bytes) -> bytes:
    seg = _tcp(sport, dport, payload)
    ip = struct.pack("!IHBB16s16s", 6 << 28, len(seg), 6, 64, b"\0" * 15 + b"\1", b"\0" * 15 + b"\1")
    return b"\0" * 12 + b"\x86\xdd" + ip + seg


def test_tcp_payload_of_ipv4_and_ipv6_frames():
    assert tcp_payload(_ipv4(50000, SERVER, b"POST /v1/completions HTTP/1.1\r\n")) == \
        (50000, SERVER, b"POST /v1/completions HTTP/1.1\r\n")
    # Ethernet padding beyond the IP total length is not payload
    assert tcp_payload(_ipv4(SERVER, 50000, b"", pad=b"\0" * 6)) == (SERVER, 50000, b"")
    assert tcp_payload(_ipv6(SERVER, 50001, b"data: {}")) == (SERVER, 50001, b"data: {}")
    udp = bytearray(_ipv4(1, 2, b"x"))
    udp[14 + 9] = 17
    assert tcp_payload(bytes(udp)) is None and tcp_payload(b"\0" * 12 + b"\x08\x06" + b"\0" * 28) is None
    assert tcp_payload(b"short") is None


def _chunk(text: bytes) -> bytes:  # HTTP/1.1 chunked encoding, as the server sends each SSE event
    return b"%x\r\n" % len(text) + text + b"\r\n"


def test_streams_pair_each_request_with_its_first_event_with_a_choice():
    s = Streams(SERVER)
    s.feed(1.000, 50000, SERVER, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")
    s.feed(1.001, 50000, SERVER, b'{"prompt": [1, 2]}')  # the body, a segment of its own: not a new request
    s.feed(1.002, 50001, SERVER, b"POST /v1/completions HTTP/1.1\r\n")
    s.feed(1.003, SERVER, 50000, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")  # headers only
    s.feed(1.004, SERVER, 50000, _chunk(b'data: {"id": "a", "choices": []}\n\n'))  # no choice yet
    s.feed(1.010, SERVER, 50000, _chunk(b'data: {"id":"a","choices":[{"index":0,"text":"x"}]}\n\n'))
    s.feed(1.011, SERVER, 50000, _chunk(b'data: {"id":"a","choices":[{"index":0,"text":"y"}]}\n\n'))  # 2nd token
    s.feed(1.020, SERVER, 50001, b"HTTP/1.1 200 OK\r\n\r\n" + _chunk(b'data: {"choices": [ {"text": ""}]}\n\n'))
    s.feed(1.030, 50000, SERVER, b"POST /v1/completions HTTP/1.1\r\n")  # keep-alive: the next request
    s.feed(1.031, 50000, SERVER, b"GET /metrics HTTP/1.1\r\n")  # not a completion
    s.feed(1.045, SERVER, 50000, _chunk(b'data: {"choices":[{"text":"z"}]}\n\n'))
    s.feed(1.050, SERVER, 50002, _chunk(b'data: {"choices":[{"text":"z"}]}\n\n'))  # a connection with no request
    assert [round(d, 6) for _, d in s.ttft_s] == [0.010, 0.018, 0.015]
    assert [round(d, 6) for d in s.timed(2)] == [0.018, 0.015]  # the last two to start
    assert len(s.timed(10)) == 3 and s.timed(0) == [] and Streams(SERVER).timed(3) == []
    # decode spans: first token to the last segment with a choice, per request; the keep-alive connection's next
    # request ends the first one's span (its 1.045 token is the second request's first)
    assert [round(d, 6) for d in s.decode_spans(10)] == [0.001, 0.0, 0.0]
    s.feed(1.060, SERVER, 50000, _chunk(b'data: {"choices":[{"text":"w","finish_reason":"length"}]}\n\n'))
    s.feed(1.061, SERVER, 50000, _chunk(b'data: {"choices":[],"usage":{"completion_tokens":2}}\n\ndata: [DONE]\n\n'))
    assert [round(d, 6) for d in s.decode_spans(2)] == [0.0, 0.015]  # the usage chunk has no choice: not a token
    assert s.decode_spans(0) == [] and Streams(SERVER).decode_spans(3) == []
    assert [round(g, 6) for g in s.gaps(10)] == [0.001, 0.015] and s.gaps(0) == []  # per chunk, pooled


@pytest.mark.skipif(wirecap.available() is not None, reason=str(wirecap.available()))
def test_live_capture_against_the_stub_never_precedes_the_client():
    from serve_stub import Stub

    from perfsuite.measure.serving.datasets import random_requests
    from perfsuite.measure.serving.load import parse_load, run_load
    from perfsuite.measure.serving.server import free_port

    port = free_port()
    with Stub(ttft_s=0.02, itl_s=0.005, port=port):
        reqs = random_requests(10, 8, 3, 500, 0)
        with wirecap.capture(port) as cap:
            res = run_load(f"http://127.0.0.1:{port}", "stub", reqs[2:], parse_load("poisson:20", num_requests=8,
                                                                                    warmup=2), warmup=reqs[:2])
    assert len(cap.starts) == 10 and len(cap.timed(8)) == 8
    wire = sorted(cap.timed(8))
    client = sorted(r.ttft_s for r in res.records if r.success)
    # a client starts its clock before the request is on the wire and stops it after the token is: every order
    # statistic of its TTFTs is at least the loopback's (the stub's 20 ms sleep is a floor for both)
    assert len(client) == 8 and all(c >= w >= 0.02 for c, w in zip(client, wire, strict=True))
    spans = cap.decode_spans(8)  # 3 tokens each: two 5 ms gaps of the stub on the wire
    assert len(spans) == 8 and all(s >= 0.01 for s in spans)
    assert len(cap.gaps(8)) <= 16 and all(g >= 0 for g in cap.gaps(8))  # two gaps per request, fewer if coalesced
    assert not [p for p in psutil.process_iter(["cmdline"]) if "perfsuite.measure.serving.wirecap" in
                " ".join(p.info["cmdline"] or [])]


@pytest.mark.skipif(wirecap.available() is not None, reason=str(wirecap.available()))
def test_the_capture_process_ends_when_the_block_raises():
    from perfsuite.measure.serving.server import free_port

    with pytest.raises(KeyboardInterrupt):
        with wirecap.capture(free_port()):
            raise KeyboardInterrupt
    assert not [p for p in psutil.process_iter(["cmdline"]) if "perfsuite.measure.serving.wirecap" in
                " ".join(p.info["cmdline"] or [])]
