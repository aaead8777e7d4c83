"""A seeded, bounded fuzz of the control protocol against a real ``ibdiag bench serve`` process.

Frames of every kind a hostile or broken client might send — random bytes, truncated and oversized
frames, non-UTF-8, non-objects, deep nesting, huge and non-finite numbers, wrong types in the
hello, the run request and the messages of a run, replayed and reflected hellos — at each stage of
the protocol (before the hello, after authenticating, in the middle of a run). The server must
never crash, never log an internal error, answer or hang up within its deadlines, and then serve a
good client. ``IBDIAG_FUZZ_CASES`` / ``IBDIAG_FUZZ_SEED`` size and seed it (``make fuzz`` runs a
long one); the normal suite runs a few thousand frames in seconds.
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from ibdiag.bench.p2p.control import protocol
from ibdiag.bench.p2p.control.protocol import Channel, client_handshake
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.tcp.sides import TcpClientSide
from tests.adversarial.net_support import good_run, read_frame, start_server, token_env
from tests.support.p2p import write_token

pytestmark = pytest.mark.slow

CASES = int(os.environ.get("IBDIAG_FUZZ_CASES", "1500"))
SEED = int(os.environ.get("IBDIAG_FUZZ_SEED", "16"))
WORKERS = 4
TOKEN = "fuzz-token"
SERVER_TIMEOUT_S = 3


def _frame(payload: bytes) -> bytes:
    return struct.pack("!I", len(payload)) + payload


def _nested(depth: int) -> bytes:
    return b'{"type":"hello","x":' + b"[" * depth + b"]" * depth + b"}"


WEIRD_VALUES: list[object] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2**31,
    2**63,
    2**64,
    2**200,
    -(2**200),
    0.5,
    -0.0,
    1e308,
    1e-308,
    "",
    "x",
    "ibdiag-p2p",
    "tcp",
    "bw",
    "\x00\x1b[2J",
    "é" * 100,
    "A" * 5000,
    [],
    [1] * 100,
    [[[[[]]]]],
    {},
    {"type": "hello"},
    ["tcp"] * 70,
    [2**200],
    ["4K"],
    [0],
    [-5],
    [True],
]
RAW_NUMBERS = [
    b"1" * 5000,
    b"1e999",
    b"-1e999",
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1" * 4300,
    b"0." + b"0" * 5000 + b"1",
]


def _mutate(rng: random.Random, doc: dict) -> bytes:
    """``doc`` with one or more fields wrong, as a JSON payload (sometimes with a raw literal spliced in)."""
    doc = json.loads(json.dumps(doc))
    for _ in range(rng.randint(1, 3)):
        key = rng.choice([*doc, "extra", "type"])
        action = rng.random()
        if action < 0.15 and key in doc and key != "type":
            del doc[key]
        else:
            doc[key] = rng.choice(WEIRD_VALUES)
    text = json.dumps(doc)
    if rng.random() < 0.3:
        key = rng.choice(list(doc))
        text = text.replace(
            f'"{key}": ', f'"{key}": {rng.choice(RAW_NUMBERS).decode()}, "{key}_was": ', 1
        )
    return text.encode()


@dataclass
class Case:
    stage: (
        str  # "pre": instead of the client's hello; "run": after authenticating; "phase": mid-run
    )
    chunks: list[bytes] = field(default_factory=list)
    frames: int = 0


def _pre_auth_case(rng: random.Random, replay: list[bytes]) -> Case:
    good_hello = {
        "type": "hello",
        "proto": protocol.PROTO,
        "version": protocol.VERSION,
        "nonce": os.urandom(32).hex(),
        "mac": "00" * 32,
        "host": "fuzz",
        "ibdiag": "fuzz",
    }
    kind = rng.randrange(12)
    if kind == 0:
        return Case("pre", [os.urandom(rng.randint(1, 300))], 1)
    if kind == 1:
        return Case(
            "pre",
            [
                struct.pack("!I", rng.randint(protocol.MAX_MESSAGE_BYTES + 1, 2**32 - 1))
                + os.urandom(16)
            ],
            1,
        )
    if kind == 2:  # truncated: the header promises more than comes before the hang-up
        body = json.dumps(good_hello).encode()
        return Case(
            "pre", [struct.pack("!I", len(body)) + body[: rng.randint(0, len(body) - 1)]], 1
        )
    if kind == 3:
        return Case("pre", [_frame(os.urandom(rng.randint(1, 200)) + b"\xff\xfe")], 1)
    if kind == 4:
        return Case(
            "pre",
            [
                _frame(
                    rng.choice(
                        [b"[1,2]", b"3", b'"hello"', b"null", b"{}", b'{"type":3}', b"{", b""]
                    )
                )
            ],
            1,
        )
    if kind == 5:
        return Case("pre", [_frame(_nested(rng.choice([17, 100, 5000, 30000])))], 1)
    if kind == 6:
        return Case("pre", [_frame(_mutate(rng, good_hello))], 1)
    if kind == 7 and replay:  # a real client's hello (and what followed it) from an earlier session
        return Case("pre", list(replay), len(replay))
    if kind == 8:  # one frame split into single bytes, sent at once
        return Case("pre", [bytes([b]) for b in _frame(_mutate(rng, good_hello))], 1)
    if kind == 9:  # several frames back to back
        return Case("pre", [b"".join(_frame(_mutate(rng, good_hello)) for _ in range(3))], 3)
    if kind == 10:
        return Case(
            "pre",
            [
                _frame(
                    json.dumps({"type": "error", "message": "A" * rng.randint(0, 60000)}).encode()
                )
            ],
            1,
        )
    return Case(
        "pre",
        [_frame(json.dumps(good_hello).encode().replace(b'"fuzz"', rng.choice(RAW_NUMBERS), 1))],
        1,
    )


def _still_valid(request: bytes) -> bool:
    try:
        RunRequest.from_json(json.loads(request))
    except (ValueError, TypeError, AttributeError):
        return False
    return True


def _run_case(rng: random.Random) -> Case:
    """A run request with something wrong in it (a valid one would start a run and wait for data)."""
    good = RunRequest(transport="tcp", mode="both", sizes=(1, 4096), iters=2, warmup=0).to_json()
    if rng.random() < 0.3:
        return Case("run", [_frame(_mutate(rng, {"type": "run", "request": good}))], 1)
    while _still_valid(request := _mutate(rng, good)):
        pass
    return Case("run", [_frame(b'{"type":"run","request":' + request + b"}")], 1)


def _phase_case(rng: random.Random) -> Case:
    base = rng.choice(
        [
            {"type": "phase", "kind": "bw", "bytes": 4096, "warmup": 0},
            {"type": "iters", "n": 2},
            {"type": "bye"},
            {"type": "qp", "qp": {}},
        ]
    )
    msg = _mutate(rng, base)
    return Case("phase", [_frame(msg)], 1)


@dataclass
class Tally:
    cases: int = 0
    frames: int = 0
    slow: list[str] = field(default_factory=list)
    retries: int = 0
    replies: bytearray = field(default_factory=bytearray)
    """What the server answered (its error frames), up to 4 MiB: the lines of its log about
    strangers are rate-limited (one per address per second), so the reasons are read here too."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def _drain(sock: socket.socket, limit_s: float, into: bytearray) -> bool:
    """Read until the server hangs up, keeping what it said; False when it did not within ``limit_s``."""
    sock.settimeout(limit_s)
    try:
        while chunk := sock.recv(65536):
            if len(into) < 4 << 20:
                into += chunk
    except TimeoutError:
        return False
    except OSError:
        pass
    return True


_ONE_RUN_AT_A_TIME = (
    threading.Lock()
)  # the server runs one benchmark at a time: mid-run cases take turns


def _play(port: int, case: Case, tally: Tally) -> None:
    if case.stage == "phase":
        with _ONE_RUN_AT_A_TIME:
            _play_one(port, case, tally)
    else:
        _play_one(port, case, tally)


def _play_one(port: int, case: Case, tally: Tally) -> None:
    t0 = time.monotonic()
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    side = None
    try:
        if case.stage == "pre":
            read_frame(sock)
        else:
            ch = Channel(sock, "server", 5)
            client_handshake(ch, token=TOKEN.encode(), host="fuzz", version="fuzz")
            if case.stage == "phase":
                req = RunRequest(transport="tcp", mode="both", sizes=(1, 4096), iters=2, warmup=0)
                ch.send({"type": "run", "request": req.to_json()})
                try:
                    ready = ch.expect("ready", "ready")
                except (
                    protocol.RemoteError
                ) as e:  # the previous mid-run case is still unwinding on the server
                    assert e.code == "busy", e.message
                    time.sleep(0.05)
                    tally.retries += 1
                    return _play_one(port, case, tally)
                side = TcpClientSide(ch, req, timeout_s=5)
                side.connect(ready)
                ch.expect("connected", "connected")
        for chunk in case.chunks:
            sock.sendall(chunk)
        if side is not None:
            side.close()
            side = None
        sock.shutdown(socket.SHUT_WR)
        said = bytearray()
        hung_up = _drain(sock, SERVER_TIMEOUT_S + 2, said)
        with tally.lock:
            tally.replies += said
    except (OSError, protocol.PeerClosedError):
        hung_up = True  # the server reset the connection: it hung up
    finally:
        if side is not None:
            side.close()
        sock.close()
    took = time.monotonic() - t0
    with tally.lock:
        tally.cases += 1
        tally.frames += (
            case.frames + (2 if case.stage != "pre" else 0) + (3 if case.stage == "phase" else 0)
        )
        if not hung_up or took > SERVER_TIMEOUT_S + 1:
            tally.slow.append(
                f"{case.stage} {case.chunks[0][:60]!r}: {took:.1f} s, hung up: {hung_up}"
            )


def _captured_session(port: int) -> list[bytes]:
    """The frames a real client sent in a real session, to be replayed on a new connection."""
    sent: list[bytes] = []
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    real_sendall = sock.sendall

    class Recording:
        def __getattr__(self, name: str) -> Callable:
            return getattr(sock, name)

        def sendall(self, data: bytes) -> None:
            sent.append(bytes(data))
            real_sendall(data)

    ch = Channel(Recording(), "server", 5)  # type: ignore[arg-type]
    client_handshake(ch, token=TOKEN.encode(), host="fuzz", version="fuzz")
    ch.send(
        {
            "type": "run",
            "request": RunRequest(
                transport="tcp", mode="bw", sizes=(4096,), iters=2, warmup=0
            ).to_json(),
        }
    )
    ch.expect("ready", "ready")
    sock.close()
    return sent


def test_fuzzed_control_frames_never_take_the_server_down(ibdiag_exe, tmp_path):
    token = write_token(tmp_path / "token", TOKEN)
    s = start_server(ibdiag_exe, "--token-file", str(token), "--timeout", str(SERVER_TIMEOUT_S))
    try:
        replay = _captured_session(s.port)
        rng = random.Random(SEED)
        makers = (
            [lambda: _pre_auth_case(rng, replay)] * 6
            + [lambda: _run_case(rng)] * 3
            + [lambda: _phase_case(rng)]
        )
        cases = [rng.choice(makers)() for _ in range(CASES)]
        tally = Tally()
        queue = list(reversed(cases))
        qlock = threading.Lock()

        def worker() -> None:
            while True:
                with qlock:
                    if not queue:
                        return
                    case = queue.pop()
                _play(s.port, case, tally)

        t0 = time.monotonic()
        workers = [threading.Thread(target=worker, daemon=True) for _ in range(WORKERS)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        took = time.monotonic() - t0
        assert tally.cases == CASES
        assert tally.frames >= 2 * CASES
        assert not tally.slow, (
            f"{len(tally.slow)} cases were not answered within the server's deadlines: {tally.slow[:5]}"
        )
        assert s.proc.poll() is None, "the server died"
        good_run(ibdiag_exe, s.port, env=token_env(TOKEN))
        log = s.log.text()
        assert "internal error" not in log, [ln for ln in s.log.lines if "internal error" in ln][:5]
        # every stage was reached and refused for what it was: after authentication in the log,
        # before it in the log or (the log's lines about strangers being rate-limited) the answers
        for reached in ("refused: invalid request", "refused: phase "):
            assert reached in log, reached
        answers = log + tally.replies.decode("utf-8", "replace")
        for reached in (
            "is not speaking the ibdiag p2p protocol",
            "wrong token",
            "nested deeper than 16",
        ):
            assert reached in answers, reached
        assert all(line.startswith("ibdiag serve: ") and len(line) < 1000 for line in s.log.lines)
        print(f"fuzz: {tally.cases} connections, {tally.frames} frames, seed {SEED}, {took:.1f} s")
    finally:
        s.stop()
