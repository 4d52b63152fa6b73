"""No django.setup() here: manage.py (and manage.py skiplock worker) has set Django up."""

from __future__ import annotations

from orders.models import Order
from skiplock.contrib.django import DjangoApp

app = DjangoApp()


@app.task(queue="mail")
def send_receipt(order_id: int) -> None:
    Order.objects.filter(id=order_id).update(receipt_sent=True)
