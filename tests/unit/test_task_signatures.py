"""A function no job could ever call is refused when it is registered, saying why, rather
than refusing every enqueue with a message about positional arguments: the worker calls
``fn(**payload)``, or ``fn(ctx, **payload)`` for ``pass_context=True``."""

from __future__ import annotations

from typing import Any

import pytest

from skiplock import App, ConfigurationError, JobContext


def test_a_context_task_needs_a_parameter_for_the_context() -> None:
    app = App("postgresql://unused@127.0.0.1/none")
    with pytest.raises(ConfigurationError, match=r"pass_context=True.*first parameter"):

        @app.task(name="no_room", pass_context=True)
        def no_room(*, order_id: int) -> None: ...

    with pytest.raises(ConfigurationError, match=r"pass_context=True.*first parameter"):

        @app.task(name="nothing", pass_context=True)
        def nothing() -> None: ...

    assert "no_room" not in app.tasks and "nothing" not in app.tasks


def test_a_positional_only_parameter_needs_a_default() -> None:
    app = App("postgresql://unused@127.0.0.1/none")
    with pytest.raises(ConfigurationError, match="positional-only parameter 'order_id'"):

        @app.task(name="posonly")
        def posonly(order_id: int, /) -> None: ...

    with pytest.raises(ConfigurationError, match="positional-only parameter 'order_id'"):

        @app.task(name="posonly_ctx", pass_context=True)
        def posonly_ctx(ctx: JobContext, order_id: int, /) -> None: ...

    assert app.tasks == {}


def test_what_a_job_can_call_still_registers() -> None:
    app = App("postgresql://unused@127.0.0.1/none")

    @app.task(name="ctx_first", pass_context=True)
    def ctx_first(ctx: JobContext, /, *, order_id: int) -> None: ...

    @app.task(name="star", pass_context=True)
    def star(*args: Any, **kwargs: Any) -> None: ...

    @app.task(name="defaulted")
    def defaulted(copy: bool = False, /, **kwargs: Any) -> None: ...

    @app.task(name="plain")
    def plain(order_id: int) -> None: ...

    assert sorted(app.tasks) == ["ctx_first", "defaulted", "plain", "star"]
