"""The research record's inputs (docs/research-record.md): a script's git repository with a change not
committed, and an HTTP receiver standing in for `--notify`'s json:// target (conftest's `receiver`)."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import threading
from pathlib import Path

SCRIPT = """import sys, time
for e in range(1, 4):
    time.sleep(0.5)
    print(f"epoch={e} val_acc={0.5 + e / 10 + int(sys.argv[1]) / 100}", flush=True)
"""


def git_repo(folder: Path) -> Path:
    """A git repository holding train.py, committed, then changed without a commit, and an untracked file."""
    folder.mkdir()
    (folder / "train.py").write_text(SCRIPT)
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=folder, check=True)
    subprocess.run(git + ["add", "train.py"], cwd=folder, check=True)
    subprocess.run(git + ["commit", "-qm", "first"], cwd=folder, check=True)
    (folder / "train.py").write_text(SCRIPT + "# lr warm-up tried\n")
    (folder / "notes.py").write_text("x = 1\n")
    return folder


class Receiver:
    """An HTTP server on loopback that keeps every JSON body POSTed to it (apprise's json:// target)."""

    def __init__(self):
        self.messages = []
        messages = self.messages

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                messages.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"json://127.0.0.1:{self.server.server_port}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"json://127.0.0.1:{s.getsockname()[1]}/"  # nothing listens once the socket is closed
