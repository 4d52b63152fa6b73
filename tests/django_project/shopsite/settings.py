"""A minimal Django project using skiplock.contrib.django, on the database $SHOP_DATABASE_URL."""

from __future__ import annotations

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
INSTALLED_APPS = ["skiplock.contrib.django", "orders"]
SKIPLOCK_APP = "orders.tasks:app"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
SECRET_KEY = "only-for-these-tests"
