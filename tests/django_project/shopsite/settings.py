"""A minimal Django project using skiplock.contrib.django, on the database $SHOP_DATABASE_URL."""

from __future__ import annotations

import importlib.util
import os

from psycopg.conninfo import conninfo_to_dict

_params = dict(conninfo_to_dict(os.environ["SHOP_DATABASE_URL"]))
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _params.pop("dbname", ""),
        "USER": _params.pop("user", ""),
        "PASSWORD": _params.pop("password", ""),
        "HOST": _params.pop("host", ""),
        "PORT": _params.pop("port", ""),
        "OPTIONS": _params,
    }
}
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # Django 6 has the task framework built in; before, the django-tasks package is an app
    *(["django_tasks"] if importlib.util.find_spec("django.tasks") is None else []),
    "skiplock.contrib.django",
    "orders",
]
# Django's task framework on skiplock's workers (orders/background.py)
TASKS = {
    "default": {
        "BACKEND": "skiplock.contrib.django.tasks_backend.SkiplockBackend",
        "QUEUES": ["default", "mail"],
    }
}
# The admin (skiplock's jobs in it: skiplock.contrib.django.admin)
ROOT_URLCONF = "shopsite.urls"
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
SKIPLOCK_APP = "orders.tasks:app"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
SECRET_KEY = "only-for-these-tests"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]  # runserver, for the admin in a browser
