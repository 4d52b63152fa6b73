"""What a test needs from the machine (a program, root), and CI's ``SKIPLOCK_REQUIRE_*``.

Without what it needs a test skips, saying why.  Where CI installed a program it sets the
program's ``SKIPLOCK_REQUIRE_*`` variable, which turns the skip for its absence into a failure.
Root is another matter: CI runs the suite as root and the README's command as a normal user
too, with the same variables, so as a normal user a test that needs root skips ("needs root")
whatever the variable says, once it has checked (under the variable) that the program is there.
"""

from __future__ import annotations

import os
import pwd
import shutil
from collections.abc import Sequence
from typing import NoReturn

import pytest

# The folders of system programs (iptables, pgbouncer) that a normal user's PATH leaves out.
SBIN = "/usr/local/sbin:/usr/sbin:/sbin"


def find_program(name: str) -> str | None:
    """``name`` on the PATH, or in the sbin folders."""
    return shutil.which(name) or shutil.which(name, path=SBIN)


def is_root() -> bool:
    return os.geteuid() == 0


def skip_or_fail(reason: str, require_var: str | None) -> NoReturn:
    """Skips the test with ``reason``, or fails it when ``require_var`` is set."""
    if require_var and os.environ.get(require_var):
        pytest.fail(f"{require_var} is set but {reason}")
    pytest.skip(reason)


def needs(
    require_var: str | None,
    *,
    programs: Sequence[tuple[str, str]] = (),
    root_for: str | None = None,
) -> None:
    """Skips the test (or fails it, under ``require_var``) when one of ``programs`` (name, the
    package to install) is missing; then, as a normal user, skips it when ``root_for`` (what
    needs root) is given, under ``require_var`` or not."""
    for name, package in programs:
        if find_program(name) is None:
            skip_or_fail(f"no {name} program (apt-get install {package})", require_var)
    if root_for is not None and not is_root():
        user = pwd.getpwuid(os.geteuid()).pw_name
        pytest.skip(f"needs root: {root_for} (running as {user})")
