"""Attack test (outside review, wip/attack): migrate's wait options refuse what is not a
number of seconds with click's usage error, not a traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from skiplock._cli.main import main


@pytest.mark.parametrize("option", ["--lock-wait", "--lock-timeout"])
def test_migrate_refuses_nan_waits_with_a_usage_error(option: str) -> None:
    result = CliRunner().invoke(
        main, ["migrate", "--dsn", "postgresql://nowhere.invalid/x", option, "nan"]
    )
    assert result.exit_code == 2, result.output
    assert option in result.output
