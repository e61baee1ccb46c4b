"""Shared fixtures: the `fusefss` binary (for deployed servers and the CLI's own rows) and
a running deployment of the dealer's bundles and two servers on loopback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]


def find_binary() -> Optional[str]:
    """The `fusefss` binary: $FUSEFSS_BIN, the repository's release build, or PATH."""
    env = os.environ.get("FUSEFSS_BIN")
    if env:
        return env
    for target in (os.environ.get("CARGO_TARGET_DIR"), str(REPO / "target")):
        if target:
            p = Path(target) / "release" / "fusefss"
            if p.is_file():
                return str(p)
    return shutil.which("fusefss")


@pytest.fixture(scope="session")
def fusefss_bin() -> str:
    b = find_binary()
    if b is None:
        pytest.skip("no fusefss binary (set FUSEFSS_BIN or build with cargo build --release)")
    return b


def run_cli(binary: str, *args: str) -> List[dict]:
    """Run the CLI and parse one JSON object per line of its standard output."""
    out = subprocess.run([binary, *args], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


class Server:
    """A `fusefss serve` process and the lines it printed."""

    def __init__(self, binary: str, party: int, keys: Path, peer: str) -> None:
        self.proc = subprocess.Popen(
            [
                binary, "serve", "--party", str(party), "--dir", str(keys / f"party{party}"),
                "--listen", "127.0.0.1:0", "--peer", peer, "--tls", str(keys / "tls"),
                "--timeout", "60",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: List[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.addr = self.wait_for("listening on ").rsplit(" ", 1)[-1]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, what: str, seconds: float = 30) -> str:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for line in list(self.lines):
                if what in line:
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"no {what!r} from the server: {self.lines}")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


class Deployment:
    """Bundles dealt into a folder and both servers serving it."""

    def __init__(self, binary: str, keys: Path) -> None:
        self.binary = binary
        self.keys = keys
        self.p1 = Server(binary, 1, keys, "127.0.0.1:1")
        self.p0 = Server(binary, 0, keys, self.p1.addr)

    @property
    def servers(self) -> List[str]:
        return [self.p0.addr, self.p1.addr]

    @property
    def tls(self) -> Path:
        return self.keys / "tls"

    def stop(self) -> None:
        self.p0.stop()
        self.p1.stop()


@pytest.fixture(scope="module")
def deployment(fusefss_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """Two servers on loopback with bundles for bert-tiny (1 layer) at 4 and 6 tokens and
    llama-tiny sessions (a 5-token prompt, up to 3 new tokens)."""
    keys = tmp_path_factory.mktemp("keys")
    for args in (
        ["--model", "bert-tiny", "--layers", "1", "--seq", "4", "--count", "3"],
        ["--model", "bert-tiny", "--layers", "1", "--seq", "6", "--count", "2"],
        ["--model", "llama-tiny", "--prompt-len", "5", "--max-new-tokens", "3", "--count", "2"],
    ):
        out = subprocess.run(
            [fusefss_bin, "dealer", *args, "--out", str(keys)], capture_output=True, text=True, timeout=900
        )
        assert out.returncode == 0, out.stderr
    d = Deployment(fusefss_bin, keys)
    try:
        yield d
    finally:
        d.stop()
