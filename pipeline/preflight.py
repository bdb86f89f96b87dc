"""What ``topicstore route`` checks and reads before it starts Spark's JVM: the paths it
reads and writes, the Java that Spark would run, and the subscriptions (from the store, or
through a running service's API). Starting the JVM takes 5-10 s and a mistake found by
Spark ends in its own wording or a Java stack trace; found here, it costs a moment and one
line with an exit status (docs/cli.md).

Loads neither Spark nor the JVM; the store, pyarrow and the client only when it reads the
subscriptions.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from pipeline.errors import PipelineError

if TYPE_CHECKING:
    import pyarrow as pa

#: Exit statuses of the command line (docs/cli.md): refused, usage or configuration, and
#: the store or the service unavailable.
REFUSED: Final = 1
USAGE: Final = 2
UNAVAILABLE: Final = 3

#: The oldest Java that Spark 4 runs on.
MIN_JAVA: Final = 17
#: ``java -version`` answers in a fraction of a second; a Java that takes longer is broken.
JAVA_VERSION_TIMEOUT_S: Final = 20.0
#: What to do when a running service holds the store (DuckDB lets one process open it).
HELD_HINT: Final = (
    "read the subscriptions through that service: route --api URL (its token: "
    "TOPICSTORE_ADMIN_TOKEN), or export them first: topicstore export subs.parquet, then "
    "route --subscriptions subs.parquet"
)
#: What to do when the store named is not one (most often: not the service's).
NO_STORE_HINT: Final = (
    "--database-url (TOPICSTORE_DATABASE_URL) names the store; or read the subscriptions "
    "through a running service: route --api URL (its token: TOPICSTORE_ADMIN_TOKEN), or "
    "from an export: route --subscriptions FILE"
)

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_JAVA_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


class PreflightError(PipelineError):
    """A route that cannot start. ``status``: the command line's exit status; ``hint``:
    what to do about it, when there is more to say than the message."""

    def __init__(
        self, code: str, message: str, *, status: int = USAGE, hint: str | None = None
    ) -> None:
        super().__init__(code, message)
        self.status = status
        self.hint = hint


def _exists(path: str) -> bool:
    """Whether Spark would find something at ``path``: a file or directory, or a glob
    pattern with a match. A URL (hdfs://, s3a://) is Spark's to check."""
    if _SCHEME.match(path):
        return True
    if glob.has_magic(path):
        return bool(glob.glob(path))
    return os.path.exists(path)


def check_paths(messages: str, subscriptions: str | None, out: Path) -> None:
    """``path_not_found`` for an input that is not there; ``invalid_output`` for an
    output directory that cannot be made (it is made with its missing parents: the
    nearest one that exists must be a directory this user may write)."""
    for option, path in (("--messages", messages), ("--subscriptions", subscriptions)):
        if path is not None and not _exists(path):
            raise PreflightError(
                "path_not_found", f"{option}: no such file or directory: {os.path.abspath(path)}"
            )
    if out.exists() and not out.is_dir():
        raise PreflightError("invalid_output", f"--out: {out.resolve()} is not a directory")
    parent = out.absolute()
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise PreflightError(
            "invalid_output", f"--out: cannot make {out.absolute()}: {parent} is not writable"
        )


def java_binary(environ: Mapping[str, str]) -> str:
    """The Java that Spark's launcher (``spark-class``) runs: ``$JAVA_HOME/bin/java``
    when JAVA_HOME is set, else ``java`` on the PATH; ``java_not_found`` for neither."""
    java_home = environ.get("JAVA_HOME")
    if java_home:
        java = os.path.join(java_home, "bin", "java")
        if not os.path.isfile(java):
            raise PreflightError(
                "java_not_found",
                f"JAVA_HOME is {java_home}, which has no bin/java: Spark needs Java "
                f"{MIN_JAVA} or newer (point JAVA_HOME at one, or unset it to use the PATH's)",
            )
        return java
    found = shutil.which("java", path=environ.get("PATH", os.defpath))
    if found is None:
        raise PreflightError(
            "java_not_found",
            f"no java on the PATH and JAVA_HOME is not set: Spark needs Java {MIN_JAVA} or "
            "newer (e.g. apt-get install openjdk-17-jre-headless)",
        )
    return found


def check_java(environ: Mapping[str, str]) -> str:
    """Run ``java -version`` of the Java Spark would start (``java_binary``) and return
    its first line; ``java_unusable`` when it does not run, fails, or is older than
    ``MIN_JAVA``."""
    java = java_binary(environ)
    try:
        done = subprocess.run(
            [java, "-version"],
            env=dict(environ),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=JAVA_VERSION_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PreflightError("java_unusable", f"{java} -version: {e}") from e
    said = (done.stderr + done.stdout).strip()
    first = said.splitlines()[0] if said else f"exit status {done.returncode}"
    if done.returncode != 0:
        raise PreflightError("java_unusable", f"{java} -version failed: {first}")
    version = _JAVA_VERSION.search(said)
    if version is not None:
        major = int(version[1]) if version[1] != "1" else int(version[2] or 0)  # 1.8 is 8
        if major < MIN_JAVA:
            raise PreflightError(
                "java_unusable", f"{java} is Java {major}: Spark needs Java {MIN_JAVA} or newer"
            )
    return first


def store_subscriptions(database_url: str) -> tuple[pa.Table, int]:
    """Every subscription of the store, read now, with the change-log sequence number they
    reflect: a store that another process holds (a running service on its DuckDB file),
    never migrated, or not answering is refused here, with what to do instead."""
    import sqlalchemy as sa

    from pipeline.io import store_subscriptions as read
    from store import DatabaseLockedError, NoSchemaError, StoreError

    try:
        return read(database_url)
    except DatabaseLockedError as e:
        raise PreflightError(e.code, e.message, status=UNAVAILABLE, hint=HELD_HINT) from e
    except NoSchemaError as e:
        raise PreflightError(e.code, e.message, hint=NO_STORE_HINT) from e
    except StoreError as e:  # an unsupported URL
        raise PreflightError(e.code, e.message) from e
    except sa.exc.OperationalError as e:  # PostgreSQL not answering
        message = str(e.orig).strip().splitlines()[0] if str(e.orig).strip() else str(e)
        raise PreflightError("store_unavailable", message, status=UNAVAILABLE) from e


def service_subscriptions(api: str, token: str | None) -> pa.Table:
    """Every subscription the service at ``api`` exports to ``token`` (the operator's:
    every tenant; a tenant's: its own), through the Python client."""
    import httpx
    import pyarrow.parquet as pq

    from topicstore.client import ApiError, Client

    with tempfile.TemporaryDirectory(prefix="topicstore-route-") as folder:
        path = Path(folder) / "subscriptions.parquet"
        try:
            with Client(api, token) as client:
                client.export_subscriptions(path)
        except httpx.TransportError as e:
            raise PreflightError(
                "service_unavailable", f"cannot reach {api}: {e}", status=UNAVAILABLE
            ) from e
        except ApiError as e:
            status = UNAVAILABLE if e.status == 503 else REFUSED
            hint = "give the service's token in TOPICSTORE_ADMIN_TOKEN" if e.status == 401 else None
            raise PreflightError(e.code, e.message, status=status, hint=hint) from e
        return pq.read_table(path, memory_map=False)
