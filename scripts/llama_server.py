"""A llama-server child process for the measuring scripts (llama-kv-error.py,
record-llama-references.py): start one on a free loopback port, wait for /health, POST JSON.
Only the Python standard library is used."""

import json
import socket
import subprocess
import sys
import time
import urllib.request


def post(port, path, body):
    """POSTs `body` as JSON to the server on `port`; its JSON answer."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as r:
        return json.loads(r.read())


def version(bin_dir):
    """`llama-server --version` on one line: what the recorded references name."""
    r = subprocess.run([f"{bin_dir}/llama-server", "--version"], capture_output=True, text=True)
    return " ".join((r.stdout + r.stderr).split())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(bin_dir, model, args, cwd=None):
    """Starts `llama-server -m model args…` on a free port; (process, port) once /health answers.
    Exits the script with the command line if the server dies or never answers."""
    port = free_port()
    cmd = [f"{bin_dir}/llama-server", "-m", model, "--port", str(port), "--no-webui", *args]
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, port
        except Exception:
            if proc.poll() is not None:
                sys.exit(f"llama-server exited with {proc.returncode}: {' '.join(cmd)}")
        time.sleep(0.5)
    proc.kill()
    sys.exit(f"llama-server did not start: {' '.join(cmd)}")
