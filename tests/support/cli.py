"""The `outbox` command as operators and CI run it: a real process, its exit code and output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

OUTBOX = str(Path(sys.executable).parent / "outbox")


def run(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([OUTBOX, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ) if env is None else env)
