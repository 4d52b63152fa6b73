"""Django's task framework on skiplock's backend, as ``manage.py test`` runs it (on the test
database), and skiplock's jobs in Django's admin.  The enqueue side mirrors what the
framework's own database backend is held to (django-tasks-db's tests): the result of an
enqueue, ``get_result``, validation, signals, Django's transaction.  What the worker makes of
the jobs is checked with a real worker by tests/e2e/test_django_project.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.test import TestCase, TransactionTestCase, override_settings
from django.utils import timezone

from orders import background
from orders.framework import (
    InvalidTaskError,
    TaskResultDoesNotExist,
    TaskResultStatus,
    default_task_backend,
    task_backends,
    task_enqueued,
)
from skiplock.contrib.django.admin import jobs_app
from skiplock.contrib.django.models import Job
from skiplock.contrib.django.tasks_backend import SkiplockBackend

BACKEND = "skiplock.contrib.django.tasks_backend.SkiplockBackend"


class EnqueueTests(TestCase):
    def setUp(self) -> None:
        self.received: list[tuple[Any, Any]] = []

        def capture(sender: Any, task_result: Any, **kwargs: Any) -> None:
            self.received.append((sender, task_result))

        task_enqueued.connect(capture, dispatch_uid="capture", weak=False)
        self.addCleanup(task_enqueued.disconnect, dispatch_uid="capture")

    def test_the_backend_and_what_it_supports(self) -> None:
        backend = task_backends["default"]
        self.assertIsInstance(backend, SkiplockBackend)
        self.assertEqual(default_task_backend.alias, "default")
        self.assertTrue(backend.supports_get_result and backend.supports_defer)
        self.assertTrue(backend.supports_async_task and backend.supports_priority)
        self.assertEqual(list(backend.check()), [])

    def test_an_enqueued_task_is_ready_and_unfinished(self) -> None:
        for task in [background.mark_sent, background.add]:
            with self.subTest(task.name):
                self.received.clear()
                args = [1] if task is background.mark_sent else [1, 2]
                result = task.enqueue(*args)
                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertFalse(result.is_finished)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                self.assertIsNotNone(result.enqueued_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value  # noqa: B018
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, args)
                self.assertEqual(result.kwargs, {})
                self.assertEqual(result.attempts, 0)
                self.assertEqual(result.errors, [])
                self.assertEqual(self.received, [(SkiplockBackend, result)])

    async def test_aenqueue_and_aget_result(self) -> None:
        result = await background.add.aenqueue(a=2, b=3)
        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertEqual(result.kwargs, {"a": 2, "b": 3})
        self.assertEqual(await background.add.aget_result(result.id), result)

    def test_get_result_and_refresh_read_the_job(self) -> None:
        result = background.mark_sent.enqueue(7)
        self.assertEqual(background.mark_sent.get_result(result.id), result)
        self.assertEqual(default_task_backend.get_result(result.id), result)
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.READY)

    def test_missing_and_invalid_ids(self) -> None:
        for result_id in ["999999999", "abc", "-1"]:
            with self.subTest(result_id), self.assertRaises(TaskResultDoesNotExist):
                default_task_backend.get_result(result_id)

    def test_the_job_is_in_djangos_transaction(self) -> None:
        with transaction.atomic():
            kept = background.mark_sent.enqueue(1)
        try:
            with transaction.atomic():
                dropped = background.mark_sent.enqueue(2)
                raise RuntimeError("rolled back")
        except RuntimeError:
            pass
        self.assertEqual(default_task_backend.get_result(kept.id).args, [1])
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result(dropped.id)

    def test_queue_priority_and_run_after_are_the_jobs(self) -> None:
        urgent = background.urgent.enqueue(5)
        later = timezone.now() + timedelta(hours=1)
        deferred = background.mark_sent.using(run_after=later, priority=-3).enqueue(5)
        job = Job.objects.get(id=urgent.id)
        # skiplock claims the lowest priority first; the framework runs the highest first
        self.assertEqual((job.queue, job.priority, job.status), ("mail", -10, "pending"))
        job = Job.objects.get(id=deferred.id)
        self.assertEqual((job.priority, job.status, job.run_at), (3, "scheduled", later))
        self.assertEqual(default_task_backend.get_result(deferred.id).task.run_after, later)
        self.assertEqual(default_task_backend.get_result(urgent.id).task.priority, 10)

    def test_an_unknown_queue_is_refused(self) -> None:
        with self.assertRaisesMessage(InvalidTaskError, "Queue 'other' is not valid for backend"):
            background.mark_sent.using(queue_name="other").enqueue(1)

    @override_settings(TASKS={"default": {"BACKEND": BACKEND, "QUEUES": []}})
    def test_a_queue_name_skiplock_cannot_take_is_refused_at_enqueue(self) -> None:
        with self.assertRaisesMessage(InvalidTaskError, "invalid queue name"):
            background.mark_sent.using(queue_name="no spaces").enqueue(1)


class AdminTests(TransactionTestCase):
    """Read-only pages of the jobs; retry and cancel through skiplock's API (committed jobs:
    the actions run on skiplock's own connection)."""

    @classmethod
    def tearDownClass(cls) -> None:
        # The actions opened skiplock's own connection to the test database: closed before
        # the test runner drops it.
        jobs_app().close()
        super().tearDownClass()

    def setUp(self) -> None:
        self.admin = User.objects.create_superuser("root", "root@example.com", "pw")
        self.client.force_login(self.admin)

    def test_the_jobs_are_listed_and_shown_read_only(self) -> None:
        result = background.refuse.enqueue("out of stock")
        page = self.client.get("/admin/skiplock/job/")
        self.assertContains(page, "django_tasks:default (orders.background.refuse)")
        self.assertContains(page, f'href="/admin/skiplock/job/{result.id}/change/"')
        self.assertContains(page, "Retry the selected jobs")
        self.assertContains(page, '<a href="?queue=mail">mail</a>')  # the app's queues
        for query in ["?q=refuse", f"?q={result.id}", "?queue=default&status__exact=pending"]:
            with self.subTest(query):
                found = self.client.get(f"/admin/skiplock/job/{query}")
                self.assertContains(found, f'href="/admin/skiplock/job/{result.id}/change/')
        absent = self.client.get("/admin/skiplock/job/?queue=mail")
        self.assertNotContains(absent, f'href="/admin/skiplock/job/{result.id}/change/')
        page = self.client.get(f"/admin/skiplock/job/{result.id}/change/")
        self.assertContains(page, "out of stock")
        self.assertNotContains(page, 'name="_save"')  # no form to save
        self.assertEqual(self.client.get("/admin/skiplock/job/add/").status_code, 403)
        delete = self.client.get(f"/admin/skiplock/job/{result.id}/delete/")
        self.assertEqual(delete.status_code, 403)

    def test_cancel_and_retry_go_through_skiplocks_api(self) -> None:
        result = background.mark_sent.enqueue(1)
        job_id = int(result.id)
        changelist = "/admin/skiplock/job/"
        answer = self.client.post(
            changelist, {"action": "cancel_jobs", "_selected_action": [job_id]}, follow=True
        )
        self.assertContains(answer, f"Cancelled: {job_id}")
        self.assertEqual(Job.objects.get(id=job_id).status, "cancelled")
        self.assertEqual(default_task_backend.get_result(result.id).status, "FAILED")
        answer = self.client.post(
            changelist, {"action": "cancel_jobs", "_selected_action": [job_id]}, follow=True
        )
        self.assertContains(answer, f"Not cancelled (their state does not allow it): {job_id}")
        answer = self.client.post(
            changelist, {"action": "retry_jobs", "_selected_action": [job_id]}, follow=True
        )
        self.assertContains(answer, f"Retried: {job_id}")
        self.assertEqual(Job.objects.get(id=job_id).status, "pending")

    def test_a_viewer_without_the_change_permission_gets_no_action(self) -> None:
        viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
        viewer.user_permissions.add(*self.permissions("view_job"))
        self.client.force_login(viewer)
        job_id = int(background.mark_sent.enqueue(1).id)
        page = self.client.get("/admin/skiplock/job/")
        self.assertContains(page, str(job_id))
        self.assertNotContains(page, "Cancel the selected jobs")
        action = {"action": "cancel_jobs", "_selected_action": [job_id]}
        self.client.post("/admin/skiplock/job/", action)
        self.assertEqual(Job.objects.get(id=job_id).status, "pending")

    def permissions(self, codename: str) -> Any:
        from django.contrib.auth.models import Permission

        return Permission.objects.filter(content_type__app_label="skiplock", codename=codename)
