"""Run by ``manage.py test`` on Django's test database (tests/e2e/test_django_project.py)."""

from __future__ import annotations

from django.test import TestCase

from orders.models import Order
from orders.tasks import send_receipt
from orders.views import checkout
from skiplock.testing import assert_enqueued, assert_not_enqueued


class CheckoutTests(TestCase):
    def test_checkout_enqueues_a_receipt(self) -> None:
        order = checkout(1999)
        assert_enqueued(send_receipt, payload={"order_id": order.id}, count=1)

    def test_a_failed_checkout_leaves_no_order_and_no_job(self) -> None:
        with self.assertRaises(RuntimeError):
            checkout(500, fail=True)
        self.assertFalse(Order.objects.exists())
        assert_not_enqueued(send_receipt)
