"""``zarrchive serve`` starts and stops cleanly, the embedded SeaweedFS included (review #25
"Also" and #26 item 5).

uvicorn re-raised the SIGTERM it had caught after its own shutdown, so ``serve`` died
without stopping SeaweedFS, which got only its parent-death signal and often hung in its
volume server's shutdown: ``weed`` was left behind in about half the runs.  Here the
server is started and stopped several times (SIGTERM and SIGINT), with uploads in between
that must all still be there, and no ``weed`` may be left in its process tree; a second
Ctrl-C stops at once, also under ``make serve`` without make's error line.

Times are bounded generously (the machine is shared): the figures the issue asks for (a
stop within 3 s, a restart ready within 10 s, at rest) are printed for the record.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.helpers.serve_child import ServeChild, create_user, upload_chunk

from zarrchive.storage.embedded import embedded_s3_host

REPO = Path(__file__).resolve().parents[2]
#: Generous bounds for a loaded machine (the issue's figures are for one at rest).
READY_WITHIN = 180.0
STOPPED_WITHIN = 90.0
START_STEPS = (
    # on a loopback address of its own: another site than the pages (issue #35 item 6)
    f"embedded S3 (SeaweedFS) listening on http://{embedded_s3_host('127.0.0.1', None)}:",
    "migrated in",
    "API listening on http://127.0.0.1:",
)


#: One start and stop per signal; the second start is a restart on the first one's data.
SIGNALS = [signal.SIGTERM, signal.SIGINT]


@pytest.fixture
def child(tmp_path: Path) -> Iterator[ServeChild]:
    served = ServeChild(tmp_path / "data", tmp_path / "serve.log")
    try:
        yield served
    finally:
        served.cleanup()


def test_start_and_stop_repeatedly_leave_no_weed(child: ServeChild) -> None:
    token, dandiset = "", None
    uploaded: dict[str, bytes] = {}
    for run, sig in enumerate(SIGNALS):
        log_start = len(child.output())
        ready = child.start(timeout=READY_WITHIN)
        assert len(child.weed_pids) == 1, child.weed_pids
        if not token:
            token = create_user(child, "alice")
        # what earlier runs uploaded is all there, readable anonymously through S3
        for public_url, body in uploaded.items():
            assert httpx.get(public_url, timeout=30).content == body, public_url
        body = f"run {run} {uuid.uuid4()}".encode()
        dandiset, public_url = upload_chunk(child.url, token, dandiset, body)
        uploaded[public_url] = body
        began = time.monotonic()
        child.signal(sig)
        code = child.wait(STOPPED_WITHIN)
        stopped = time.monotonic() - began
        output = child.output()[log_start:]
        assert child.weed_left(timeout=60) == [], output  # generous: a loaded machine
        assert code == 0, output
        for step in START_STEPS:
            assert step in output, (step, output)
        assert f"{signal.Signals(sig).name}: stopping" in output and "stopped in" in output
        print(f"run {run}: ready in {ready:.1f} s, stopped by {sig!r} in {stopped:.1f} s")
    assert len(uploaded) == len(SIGNALS)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("presses", [1, 2])
def test_make_serve_stops_on_ctrl_c_without_an_error_line(child: ServeChild, presses: int) -> None:
    stamp = REPO / ".venv" / ".installed-stamp"
    if not stamp.exists():
        pytest.skip("the repository's .venv is not built by make install")
    # -o: make does not check or redo the install, it serves
    child.start(["make", "--no-print-directory", "-C", str(REPO), "-o", str(stamp), "serve"])
    assert len(child.weed_pids) == 1
    # an upload first: SeaweedFS used to hang in its shutdown after uploads
    upload_chunk(child.url, create_user(child, f"user{presses}"), None, b"before Ctrl-C")
    began = time.monotonic()
    for _ in range(presses):
        child.signal_group(signal.SIGINT)  # what Ctrl-C in the terminal does
        time.sleep(0.2)
    try:
        child.wait(STOPPED_WITHIN)
    except subprocess.TimeoutExpired:
        pytest.fail(f"make serve did not stop:\n{child.output()}")
    print(f"make serve stopped by {presses} Ctrl-C in {time.monotonic() - began:.1f} s")
    output = child.output()
    assert "make: ***" not in output and "Error" not in output, output
    assert "Traceback" not in output, output
    assert child.weed_left(timeout=60) == [], output  # generous: a loaded machine
