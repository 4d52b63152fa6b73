"""``@app.periodic(...)`` stacked on ``@app.task(...)``, in either order: one task, with the
options ``@app.task`` gave it, on the schedule ``@app.periodic`` gave it."""

from __future__ import annotations

import pytest

from skiplock import App
from skiplock.errors import ConfigurationError


def new_app() -> App:
    return App("postgresql://nobody@127.0.0.1:1/never_connected")


def test_periodic_above_task_schedules_the_task_with_its_options() -> None:
    app = new_app()

    @app.periodic(every=60.0, payload={"region": "eu"})
    @app.task(queue="mail", max_attempts=2, name="shop.refresh")
    def refresh(region: str) -> None: ...

    assert app.tasks == {refresh.name: refresh}
    assert refresh.name == "shop.refresh"
    assert (refresh.queue, refresh.settings.options.max_attempts) == ("mail", 2)
    periodic = app.periodic_tasks[refresh.name]
    assert (periodic.task, periodic.schedule.every, periodic.payload) == (
        refresh.name,
        60.0,
        {"region": "eu"},
    )


def test_task_above_periodic_gives_the_scheduled_task_its_options() -> None:
    app = new_app()

    @app.task(queue="mail", max_attempts=2)
    @app.periodic(cron="*/5 * * * *", name="shop.refresh")
    def refresh() -> None: ...

    assert app.tasks == {"shop.refresh": refresh}
    assert (refresh.queue, refresh.settings.options.max_attempts) == ("mail", 2)
    assert app.periodic_tasks[refresh.name].task == refresh.name


def test_task_options_in_both_decorators_are_refused() -> None:
    app = new_app()
    with pytest.raises(TypeError, match="give them once"):

        @app.periodic(every=60.0, queue="reports")
        @app.task(queue="mail", name="shop.refresh")
        def refresh() -> None: ...

    with pytest.raises(TypeError, match="give them once"):

        @app.task(queue="mail")
        @app.periodic(every=60.0, queue="reports", name="shop.refresh_too")
        def refresh_too() -> None: ...


def test_a_task_registered_twice_or_on_another_app_is_refused() -> None:
    app, other = new_app(), new_app()

    @app.task(name="shop.plain")
    def plain() -> None: ...

    with pytest.raises(TypeError, match="already a task"):
        app.task(queue="mail")(plain)
    with pytest.raises(TypeError, match="another App"):
        other.periodic(every=60.0)(plain)
    app.periodic(every=60.0)(plain)
    with pytest.raises(ConfigurationError, match="already runs on a schedule"):
        app.periodic(every=30.0)(plain)
