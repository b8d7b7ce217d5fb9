"""``zarrchive upload`` of a Zarr with a big file, as a child process, interrupted by SIGINT
(what Ctrl-C in a terminal sends) between two parts of the big file, through a
:class:`~tests.helpers.part_gate.PartGate` that counts what reached S3 (issue 35).

The archive's multipart threshold is :data:`PART` (its smallest, S3's smallest part): the
big file is :data:`BIG_PARTS` parts of it, the last one shorter.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.multipart import MIB, big_bytes, write_tree
from tests.helpers.part_gate import PartGate, part_gate

#: The archive's multipart threshold in these tests, and so the part size.
PART = 5 * MIB
BIG_PARTS = 5
BIG_PATH = "big/0"
FILES: dict[str, bytes] = {
    ".zgroup": b'{"zarr_format": 2}',
    "big/.zarray": b"{}",
    BIG_PATH: big_bytes((BIG_PARTS - 1) * PART + MIB, seed=35),
    "small/0": b"small zero",
    "small/1": b"small one",
}
#: Parts the first run gets through before the gate holds the next.
LET_THROUGH = 2
#: What the interrupted client says as soon as it has stopped starting transfers.
FINISHING = "interrupted: finishing the transfers under way"


def part_length(number: int) -> int:
    size = len(FILES[BIG_PATH])
    return min(PART, size - (number - 1) * PART)


def default_sigint() -> None:
    """In the child: SIGINT raises KeyboardInterrupt, whatever the test run inherited (a
    run in the background ignores SIGINT, and Python then installs no handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass
class Child:
    """A CLI command in a child process, its stderr read line by line as it comes."""

    process: subprocess.Popen[str]
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    stderr: list[str] = field(default_factory=list)

    def read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def ended(self) -> str | None:
        """None while it runs; else its exit code and stderr."""
        code = self.process.poll()
        if code is None:
            return None
        return f"exit {code}: {self.finish()[1]}"

    def find_line(self, start: str, timeout: float = 120) -> str | None:
        """The first stderr line that holds *start*; None if the process ends, or
        *timeout* seconds pass, first."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if line is None:
                self.lines.put(None)  # (for finish)
                return None
            self.stderr.append(line)
            if start in line:
                return line

    def finish(self, timeout: float = 120) -> tuple[int, list[str]]:
        """Wait for the exit: its code and every stderr line."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"still running after {timeout:.0f} s: {self.stderr}") from None
        while (line := self.lines.get(timeout=timeout)) is not None:
            self.stderr.append(line)
        return code, self.stderr


def cli_env(client_env: Mapping[str, str], proxy: str) -> dict[str, str]:
    """The environment of a client command whose every request goes through *proxy*."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(client_env)
    env.update(HTTP_PROXY=proxy, HTTPS_PROXY=proxy, PYTHONUNBUFFERED="1")
    return env


def start_cli(env: Mapping[str, str], *args: str) -> Child:
    process = subprocess.Popen(
        [sys.executable, "-m", "zarrchive.cli", *args],
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    child = Child(process)
    threading.Thread(target=child.read, daemon=True).start()
    return child


def run_cli(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zarrchive.cli", *args],
        env=dict(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


@dataclass(frozen=True)
class Interrupted:
    """What the interrupted run left: its exit code and stderr, the parts the gate saw
    answered, and the big file's S3 upload (staging key and upload id, from the part URLs)."""

    code: int
    stderr: list[str]
    #: whether it said, after Ctrl-C, that it was finishing the transfers under way
    said_finishing: bool
    parts_sent: list[int]
    key: str
    upload_id: str


def upload_args(local: Path, dandiset: str) -> list[str]:
    return ["upload", str(local), "--dandiset", dandiset]


def interrupt_upload(local: Path, dandiset: str, client_env: Mapping[str, str]) -> Interrupted:
    """Write :data:`FILES` at *local*, upload them with one transfer at a time, and send
    SIGINT while the gate holds the big file's part after the first :data:`LET_THROUGH`;
    release the gate once the client says it is finishing (it has then stopped starting
    parts; a client that never says so is released after the wait's deadline), and wait
    for the exit."""
    write_tree(local, FILES)
    gate: PartGate
    with part_gate(let_through=LET_THROUGH) as gate:
        child = start_cli(
            cli_env(client_env, gate.url), *upload_args(local, dandiset), "--jobs", "1"
        )
        try:
            gate.wait_held(child.ended)
            child.process.send_signal(signal.SIGINT)
            said = child.find_line(FINISHING) is not None
            gate.release()
            code, stderr = child.finish()
        finally:
            if child.process.poll() is None:
                child.process.kill()
        parts = gate.parts
    assert parts, f"no part reached S3: {stderr}"
    return Interrupted(
        code, stderr, said, [p.number for p in parts], parts[0].key, parts[0].upload_id
    )


def parts_in_s3(s3: Any, bucket: str, key: str, upload_id: str) -> dict[int, int] | None:
    """``{part number: size}`` S3 holds of the upload (boto3's ListParts); None when S3 has
    no such upload (aborted or completed)."""
    from botocore.exceptions import ClientError

    try:
        page = s3.list_parts(Bucket=bucket, Key=key, UploadId=upload_id)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchUpload", "404", "NoSuchKey"):
            return None
        raise
    return {int(p["PartNumber"]): int(p["Size"]) for p in page.get("Parts", [])}
