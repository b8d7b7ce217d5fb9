"""Send one request body to a server again and again, one request at a time, from a
process of its own (so that the sender's work does not slow a test's own measurements).

    python -m tests.helpers.hostile_sender URL PATH BODY_FILE REQUESTS SECONDS [TOKEN]

prints ``ready`` once connected, then POSTs the file's bytes (``application/json``)
REQUESTS times, :data:`PAUSE` seconds apart, stopping early once SECONDS have passed;
then prints one JSON line: per request ``[start, end, status, detail]`` (``start`` and
``end`` by ``time.monotonic()``, which all processes of the machine share).
:func:`hostile_sender` starts it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
#: Seconds between two requests: one at a time, as one client sends them.
PAUSE = 0.1


@dataclass(frozen=True)
class Sent:
    start: float
    end: float
    status: int
    detail: str


def hostile_sender(
    url: str, path: str, body_file: Path, requests: int, seconds: float, token: str | None
) -> subprocess.Popen[str]:
    """The sender's process, started; read its ``ready`` line before measuring, then
    :func:`read_sent` once it has exited."""
    command = [sys.executable, "-m", "tests.helpers.hostile_sender", url, path]
    command += [str(body_file), str(requests), str(seconds), *([token] if token else [])]
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)


def read_sent(output: str) -> list[Sent]:
    return [Sent(float(s), float(e), int(c), str(d)) for s, e, c, d in json.loads(output)]


def main(
    url: str, path: str, body_file: str, requests: str, seconds: str, token: str | None = None
) -> None:
    body = Path(body_file).read_bytes()
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"token {token}"
    sent: list[tuple[float, float, int, str]] = []
    with httpx.Client(base_url=url, timeout=120) as client:
        client.get("/server-info")  # connected
        print("ready", flush=True)
        deadline = time.monotonic() + float(seconds)
        for _ in range(int(requests)):
            start = time.monotonic()
            response = client.post(path, content=body, headers=headers)
            answer = response.json()
            detail = str(answer.get("detail") if isinstance(answer, dict) else answer)[:300]
            sent.append((start, time.monotonic(), response.status_code, detail))
            if time.monotonic() >= deadline:
                break
            time.sleep(PAUSE)
    print(json.dumps(sent), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
