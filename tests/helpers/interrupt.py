"""Interrupting a stage mid-run, as a preempted job is: what the resume tests share."""

import signal
import subprocess
import time
from pathlib import Path


def kill_after_lines(proc: subprocess.Popen, path: Path, lines: int, timeout: float, poll: float) -> None:
    """SIGKILL ``proc`` once ``path`` holds ``lines`` lines (or stop watching after ``timeout`` s), then
    reap it; the caller checks that it was killed rather than done."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if path.is_file() and path.read_bytes().count(b"\n") >= lines:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(poll)
