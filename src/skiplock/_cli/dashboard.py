"""``skiplock dashboard``: serve the web dashboard (the ``dashboard`` extra) with uvicorn."""

from __future__ import annotations

import ipaddress
import socket

import click

from skiplock._app_loader import load_app
from skiplock._cli.common import dsn_option, read_dsn_option
from skiplock._db.bounds import check_schema_name
from skiplock._db.migrations import check_migrated
from skiplock.app import App
from skiplock.errors import ConfigurationError

DEFAULT_PORT = 8089


@click.command("dashboard")
@click.argument("app_spec", metavar="[APP]", required=False, envvar="SKIPLOCK_APP")
@dsn_option
@read_dsn_option
@click.option(
    "--schema",
    envvar="SKIPLOCK_SCHEMA",
    default=None,
    help="Schema holding skiplock's tables (default: the APP's, else skiplock).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    envvar="SKIPLOCK_DASHBOARD_PORT",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Port to listen on (0: any free one, printed).",
)
@click.option(
    "--token",
    envvar="SKIPLOCK_DASHBOARD_TOKEN",
    help="The secret every request must carry (default: a new random one, printed in the "
    "address to open).",
)
@click.option("--read-only", is_flag=True, help="Show jobs and queues; change nothing.")
def command(
    app_spec: str | None,
    dsn: str | None,
    read_dsn: str | None,
    schema: str | None,
    host: str,
    port: int,
    token: str | None,
    read_only: bool,
) -> None:
    """Serve the web dashboard: queues, jobs, errors; retry, cancel, pause, resume.

    With APP (module:attribute) it hides the payload fields the app's tasks mark secret.  With
    --read-dsn its pages read from that standby, each saying how far behind it is; actions
    still go to --dsn.
    """
    try:
        import uvicorn

        from skiplock.dashboard import create_dashboard
        from skiplock.dashboard._access import check_token, new_token
    except ImportError:
        raise click.ClickException(
            "the dashboard needs its extra: pip install 'skiplock[dashboard]'"
        ) from None
    if token is not None:
        try:
            check_token(token)
        except ConfigurationError:
            raise click.BadParameter(
                "use at least 16 characters, none of them spaces or control characters",
                param_hint="--token",
            ) from None
    app = load_app(app_spec) if app_spec else App(schema=check_schema_name(schema or "skiplock"))
    if app_spec and schema and schema != app.schema:
        raise click.BadParameter(
            f"{app_spec} uses schema {app.schema!r}; drop --schema or make them agree",
            param_hint="--schema",
        )
    if dsn:
        app.use_dsn(dsn)
    if read_dsn:
        app.use_read_dsn(read_dsn)
    missing = app.sync_client.pending_migrations()  # also: the server is reachable
    app.close()
    check_migrated(app.schema, missing)
    token = token or new_token()
    try:  # bound here, so that a port in use is one clear error and port 0 can be printed
        listening = socket.create_server((host, port), family=_family(host))
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    port = listening.getsockname()[1]
    shown_host = f"[{host}]" if ":" in host else host
    click.echo(f"skiplock dashboard of schema {app.schema}{' (read-only)' if read_only else ''}")
    click.echo(f"open http://{shown_host}:{port}/?token={token}")
    if not _is_loopback(host):
        click.echo(
            f"warning: listening on {host}, beyond this machine: anyone who can reach it and "
            "learns the token can act on your jobs; prefer a reverse proxy with TLS",
            err=True,
        )
    config = uvicorn.Config(
        create_dashboard(app, token=token, read_only=read_only),
        log_level="warning",
        access_log=False,
    )
    uvicorn.Server(config).run(sockets=[listening])


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
