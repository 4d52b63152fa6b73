"""Tasks of Django's task framework (django.tasks on Django 6, the django-tasks package before),
run by skiplock's backend (TASKS in shopsite/settings.py) and its worker (manage.py skiplock
worker)."""

from __future__ import annotations

from typing import Any

from orders.framework import TaskContext, task
from orders.models import Order


@task()
def mark_sent(order_id: int) -> int:
    return Order.objects.filter(id=order_id).update(receipt_sent=True)


@task(priority=10, queue_name="mail")
def urgent(order_id: int) -> int:
    return order_id


@task()
def refuse(reason: str) -> None:
    raise ValueError(reason)


@task()
async def add(a: int, b: int) -> int:
    return a + b


@task(takes_context=True)
def whoami(context: TaskContext) -> list[Any]:
    return [context.attempt, context.task_result.id, context.task_result.status]


@task()
def unstorable() -> Any:
    return object()


@task()
def leave() -> None:
    raise SystemExit("leaving")
