from __future__ import annotations

from django.db import transaction

from orders.models import Order
from orders.tasks import send_receipt


def checkout(total_cents: int, *, fail: bool = False) -> Order:
    """The business write and its job, in one transaction."""
    with transaction.atomic():
        order = Order.objects.create(total_cents=total_cents)
        send_receipt.enqueue(order_id=order.id)
        if fail:
            raise RuntimeError("payment refused")
    return order
