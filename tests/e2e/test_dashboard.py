"""``skiplock dashboard`` as a real process: it prints the address to open, serves the pages at
it, hides the secret fields of the APP it is given, and refuses clearly to start on a schema
that is not migrated or a server that is down."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from helpers.dashboard_client import Browser
from helpers.polling import wait_for
from skiplock import App

pytestmark = pytest.mark.slow

MODULE = """
import os

from skiplock import App

app = App(os.environ["DSN"], os.environ["SCHEMA"])


@app.task(name="signup", queue="accounts", secret=["password"])
def signup(email: str, password: str) -> None:
    pass
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def environment(app: App, cwd: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
    # The module in cwd, then whatever the test run itself imports skiplock from.
    path = os.pathsep.join(p for p in (str(cwd), os.environ.get("PYTHONPATH", "")) if p)
    return {**env, "DSN": app.dsn, "SCHEMA": app.schema, "PYTHONPATH": path}


@contextmanager
def dashboard(args: list[str], env: dict[str, str], cwd: Path) -> Iterator[str]:
    """Run ``skiplock dashboard ARGS``; yields the address it printed, once it answers."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "skiplock", "dashboard", *args],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        printed = [proc.stdout.readline(), proc.stdout.readline()]
        found = re.search(r"open (http://\S+)", printed[1])
        assert found, (printed, proc.stderr.read() if proc.poll() is not None else "")
        address = found.group(1)

        def answers() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", int(address.split(":")[2][:5]))):
                    return True
            except OSError:
                assert proc.poll() is None, "did not start"
                return False

        wait_for(answers, 20, f"the dashboard to answer at {address}")
        yield address
    finally:
        proc.terminate()
        proc.communicate(timeout=20)  # and close its pipes


def test_the_printed_address_opens_the_dashboard_and_app_secrets_stay_hidden(
    app: App, tmp_path: Path
) -> None:
    (tmp_path / "accounts.py").write_text(textwrap.dedent(MODULE))
    env = environment(app, tmp_path)
    app.task(name="signup", queue="accounts")(lambda email, password: None)
    job = app.enqueue("signup", {"email": "ada@example.com", "password": "canary-s3cret"}).id
    port = free_port()
    with dashboard(["accounts:app", "--port", str(port)], env, tmp_path) as address:
        assert address.startswith(f"http://127.0.0.1:{port}/?token=")
        browser = Browser(f"http://127.0.0.1:{port}")
        queues = browser.get(address.removeprefix(browser.base))
        assert queues.status == 200 and "accounts" in queues.text
        page = browser.get(f"/jobs/{job}")
        assert "ada@example.com" in page.text and "canary-s3cret" not in page.text
        assert Browser(browser.base).get(f"/jobs/{job}").status == 401  # no token, no page

    # Without APP, the schema named on the command line; a token of one's own is kept.
    token = "my-own-token-of-some-length"
    args = ["--dsn", app.dsn, "--schema", app.schema, "--port", str(port), "--token", token]
    with dashboard(args, env, tmp_path) as address:
        assert address == f"http://127.0.0.1:{port}/?token={token}"
        browser = Browser(f"http://127.0.0.1:{port}")
        assert browser.get(f"/api/jobs/{job}?token={token}").status == 200


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--schema", "never_migrated_here"],
            "run `skiplock migrate --schema never_migrated_here`",
        ),
        (["--dsn", "postgresql://postgres@127.0.0.1:1/test"], "127.0.0.1"),
        (["--token", "short"], "at least 16 characters"),
        (["--token", " " * 16], "at least 16 characters"),
        (["no_such_module:app"], "cannot import 'no_such_module'"),
    ],
)
def test_refuses_to_start_with_one_clear_line(
    app: App, tmp_path: Path, args: list[str], message: str
) -> None:
    env = environment(app, tmp_path)
    dsn = [] if "--dsn" in args else ["--dsn", app.dsn]
    done = subprocess.run(
        [sys.executable, "-m", "skiplock", "dashboard", *args, *dsn, "--port", str(free_port())],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode in (1, 2), done
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_port_in_use_is_one_clear_error_and_port_0_picks_a_free_one(
    app: App, tmp_path: Path
) -> None:
    env = environment(app, tmp_path)
    base = ["--dsn", app.dsn, "--schema", app.schema]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "skiplock", "dashboard", *base, "--port", str(port)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 1, done
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "open http" not in done.stdout

    with dashboard([*base, "--port", "0"], env, tmp_path) as address:
        chosen = int(address.split(":")[2].split("/")[0])
        assert chosen > 0
        browser = Browser(f"http://127.0.0.1:{chosen}")
        assert browser.get(address.removeprefix(browser.base)).status == 200
