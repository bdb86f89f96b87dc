"""The deployment files name only what exists. No Docker engine runs here, so instead of
starting the stack this reads ``docker-compose.yml``, ``Dockerfile``, ``.dockerignore`` and
``deploy/nginx.conf`` and checks every service, command, option, setting and host they
name against the project itself: renaming a setting or a command breaks a test here."""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import shlex
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Final

import pytest
import typer.main
import yaml  # type: ignore[import-untyped]
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from sqlalchemy.engine import make_url

from app.cli import app as cli_app
from app.routers import ops
from app.settings import Settings

ROOT: Final = Path(__file__).resolve().parents[1]
COMPOSE_FILE: Final = ROOT / "docker-compose.yml"
DOCKERFILE: Final = ROOT / "Dockerfile"
DOCKERIGNORE: Final = ROOT / ".dockerignore"
NGINX_CONF: Final = ROOT / "deploy" / "nginx.conf"
PYPROJECT: Final = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

CONDITIONS: Final = {"service_started", "service_healthy", "service_completed_successfully"}
SHELL_SEPARATORS: Final = {"&&", "||", ";", "|"}
#: What compose's ${VAR} / ${VAR:?message} stands for here (long enough for the token).
PLACEHOLDER: Final = "x" * 32

COMPOSE: Final[dict[str, Any]] = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
SERVICES: Final[dict[str, dict[str, Any]]] = COMPOSE["services"]


# -- reading the files --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Instruction:
    stage: str
    keyword: str
    args: str


def dockerfile() -> list[Instruction]:
    """The Dockerfile's instructions (continuation lines joined, comments dropped), each
    with the stage it belongs to."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    out: list[Instruction] = []
    stage = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = args.split()
            stage = words[2] if len(words) >= 3 and words[1].upper() == "AS" else words[0]
        out.append(Instruction(stage, keyword, args.strip()))
    return out


def _stages() -> dict[str, str | None]:
    """Stage name -> the stage it is built FROM (None for an outside image)."""
    stages: dict[str, str | None] = {}
    for ins in dockerfile():
        if ins.keyword == "FROM":
            base = ins.args.split()[0]
            stages[ins.stage] = base if base in stages else None
    return stages


def _stage_chain(stage: str) -> list[str]:
    """``stage`` and the stages it is built from, nearest first."""
    stages = _stages()
    chain = [stage]
    while (parent := stages[chain[-1]]) is not None:
        chain.append(parent)
    return chain


def _exec_form(args: str) -> list[str]:
    """A CMD/ENTRYPOINT/HEALTHCHECK argument: JSON exec form, or shell form."""
    if args.startswith("["):
        parsed: list[str] = json.loads(args)
        return parsed
    return shlex.split(args)


def _image_setting(stage: str, keyword: str) -> Instruction | None:
    """The CMD / HEALTHCHECK / ENTRYPOINT a stage ends up with (inherited from its base)."""
    for name in _stage_chain(stage):
        found = [ins for ins in dockerfile() if ins.stage == name and ins.keyword == keyword]
        if found:
            return found[-1]
    return None


def _healthcheck_argv(args: str) -> list[str] | None:
    """HEALTHCHECK [options] CMD ... -> the command, or None for HEALTHCHECK NONE."""
    words = args.split()
    if words == ["NONE"]:
        return None
    _, _, command = args.partition("CMD ")
    return _exec_form(command.strip())


def _argv(value: Any) -> list[str]:
    """A compose command, entrypoint or healthcheck test, as argv."""
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value)
    argv = [str(item) for item in value]
    if argv and argv[0] in ("CMD", "CMD-SHELL"):
        return shlex.split(argv[1]) if argv[0] == "CMD-SHELL" else argv[1:]
    return argv


def _tokens(argv: list[str]) -> list[str]:
    """argv with `sh -c "..."` style shell strings split into their words too."""
    out: list[str] = []
    for token in argv:
        if re.search(r"\s", token):
            out.extend(_tokens(shlex.split(token)))
        else:
            out.append(token)
    return out


def _commands(argv: list[str]) -> Iterator[list[str]]:
    """The simple commands in ``argv``: split at shell separators, and a shell string
    (`sh -c "a && b"`) is commands of its own."""
    current: list[str] = []
    for token in argv:
        if token in SHELL_SEPARATORS:
            if current:
                yield current
            current = []
        elif re.search(r"\s", token):
            yield from _commands(shlex.split(token))
        else:
            current.append(token)
    if current:
        yield current


def topicstore_invocations(argv: list[str]) -> Iterator[list[str]]:
    """The arguments of every `topicstore ...` command in ``argv``."""
    for command in _commands(argv):
        words = command[1:] if command[0] == "exec" else command
        if words and Path(words[0]).name == "topicstore":
            yield words[1:]


def _our_stage(service: dict[str, Any]) -> str | None:
    """The Dockerfile stage a service builds from, or None for an outside image."""
    build = service.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        return dockerfile()[-1].stage if build == "." else None
    return str(build.get("target") or dockerfile()[-1].stage)


def service_argvs() -> Iterator[tuple[str, list[str]]]:
    """(where, argv) of every command a service or the Dockerfile runs."""
    for name, service in SERVICES.items():
        command = _argv(service.get("command"))
        entrypoint = _argv(service.get("entrypoint"))
        stage = _our_stage(service)
        if stage is not None and not command:
            cmd = _image_setting(stage, "CMD")
            command = _exec_form(cmd.args) if cmd else []
        if entrypoint or command:
            yield f"compose {name}", entrypoint + command
        test = (service.get("healthcheck") or {}).get("test")
        if test and test != ["NONE"]:
            yield f"compose {name} healthcheck", _argv(test)
    for ins in dockerfile():
        if ins.keyword in ("CMD", "ENTRYPOINT"):
            yield f"Dockerfile {ins.stage} {ins.keyword}", _exec_form(ins.args)
        elif ins.keyword == "HEALTHCHECK" and (argv := _healthcheck_argv(ins.args)):
            yield f"Dockerfile {ins.stage} HEALTHCHECK", argv


INVOCATIONS: Final = [
    pytest.param(args, id=f"{where}: topicstore {' '.join(args[:1])}")
    for where, argv in service_argvs()
    for args in topicstore_invocations(argv)
]


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return {str(key): str(value) for key, value in env.items()}


def _interpolate(value: str) -> str:
    """Compose's ${VAR:-default} -> default; ${VAR}, ${VAR:?message} -> a placeholder."""

    def one(match: re.Match[str]) -> str:
        _, sep, rest = match.group(1).partition(":")
        return rest[1:] if sep and rest.startswith("-") else PLACEHOLDER

    return re.sub(r"\$\{([^}]*)\}", one, value)


def _dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in dockerfile():
        if ins.keyword == "ENV":
            for word in shlex.split(ins.args):
                key, _, value = word.partition("=")
                env[key] = value
    return env


def _depends_on(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


# -- the typer app --------------------------------------------------------------------------

ROOT_COMMAND: Final = typer.main.get_command(cli_app)


def _resolve(args: list[str]) -> tuple[Any, list[str], list[str]]:
    """(command, its path, its remaining args) for ``topicstore ARGS``."""
    command: Any = ROOT_COMMAND
    path: list[str] = []
    rest = list(args)
    while getattr(command, "commands", None) is not None:
        if not rest or rest[0].startswith("-"):
            break
        name = rest.pop(0)
        if name not in command.commands:
            return None, [*path, name], rest
        command = command.commands[name]
        path.append(name)
    return command, path, rest


def _check_args(command: Any, path: list[str], args: list[str]) -> None:
    """Every option is one of the command's and gets its value; positionals fit."""
    options: dict[str, Any] = {}
    arguments = []
    for param in command.params:
        if param.param_type_name == "option":
            for opt in [*param.opts, *param.secondary_opts]:
                options[opt] = param
        else:
            arguments.append(param)
    positionals = 0
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg.startswith("--"):
            name, has_value, _ = arg.partition("=")
            assert name in options, f"`topicstore {' '.join(path)}` has no option {name}"
            param = options[name]
            if not (param.is_flag or param.count or has_value):
                assert i < len(args), f"{name} needs a value"
                i += 1
        else:
            positionals += 1
    unlimited = any(param.nargs == -1 for param in arguments)
    assert unlimited or positionals <= len(arguments), (path, args)
    required = sum(1 for param in arguments if param.required)
    assert positionals >= required, f"`topicstore {' '.join(path)}` needs {required} argument(s)"


# -- tests ----------------------------------------------------------------------------------


def test_files_parse_and_name_services() -> None:
    assert SERVICES, "docker-compose.yml defines no services"
    assert dockerfile()[0].keyword in ("FROM", "ARG")
    assert INVOCATIONS, "nothing runs topicstore"


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_has_an_image_or_a_build(name: str) -> None:
    service = SERVICES[name]
    assert "image" in service or "build" in service
    build = service.get("build")
    if isinstance(build, dict):
        assert (ROOT / build.get("context", ".") / build.get("dockerfile", "Dockerfile")).exists()
        if "target" in build:
            assert build["target"] in _stages(), f"no stage {build['target']!r} in Dockerfile"


@pytest.mark.parametrize("args", INVOCATIONS)
def test_topicstore_commands_and_options_exist(args: list[str]) -> None:
    command, path, rest = _resolve(args)
    assert command is not None, f"no command `topicstore {' '.join(path)}`"
    assert path, "topicstore without a command only prints help"
    assert getattr(command, "commands", None) is None, f"`{' '.join(path)}` needs a subcommand"
    _check_args(command, path, rest)


def test_the_image_serves_the_api_and_checks_healthz() -> None:
    cmd = _image_setting("app", "CMD")
    assert cmd is not None
    argv = _exec_form(cmd.args)
    assert argv[:2] == ["topicstore", "serve"] and "--host" in argv
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert not any(ins.keyword == "ENTRYPOINT" for ins in dockerfile())
    health = _image_setting("app", "HEALTHCHECK")
    assert health is not None
    health_argv = _healthcheck_argv(health.args)
    assert health_argv is not None
    url = re.search(r"http://127\.0\.0\.1:(\d+)(/\w+)", " ".join(health_argv))
    assert url, health.args
    assert int(url.group(1)) == int(_dockerfile_env().get("TOPICSTORE_PORT", Settings().port))
    assert url.group(2) == "/healthz"
    assert "/healthz" in {getattr(route, "path", None) for route in ops.router.routes}


def test_the_image_runs_as_a_user() -> None:
    for stage in _stages():
        user = _image_setting(stage, "USER")
        assert user is not None and user.args not in ("root", "0"), f"stage {stage} runs as root"


def test_executables_of_our_image_exist() -> None:
    """Services built from our Dockerfile run programs the project installs (the console
    script, Python, pyspark's spark-class), and Spark classes that Spark has."""
    bin_dir = Path(sys.executable).parent
    jars = list((Path(_pyspark_dir()) / "jars").glob("spark-core_*.jar"))
    classes = {name for jar in jars for name in zipfile.ZipFile(jar).namelist()}
    for name, service in SERVICES.items():
        stage = _our_stage(service)
        if stage is None:
            continue
        for where, argv in service_argvs():
            if where.split()[:2] != ["compose", name] or not argv:
                continue
            assert (bin_dir / argv[0]).exists(), f"{where}: no {argv[0]} in the image"
            if argv[0] == "spark-class":
                assert argv[1].replace(".", "/") + ".class" in classes, f"{where}: {argv[1]}"


def _pyspark_dir() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent)


def test_postgres_has_a_healthcheck() -> None:
    postgres = [
        name for name, s in SERVICES.items() if str(s.get("image", "")).startswith("postgres:")
    ]
    assert postgres, "no PostgreSQL service"
    for name in postgres:
        test = _argv(SERVICES[name].get("healthcheck", {}).get("test"))
        assert test and test[0] == "pg_isready", name
        assert re.match(r"postgres:1[56]", SERVICES[name]["image"])


def test_depends_on_names_services_with_valid_conditions() -> None:
    for name, service in SERVICES.items():
        for dep, condition in _depends_on(service).items():
            assert dep in SERVICES, f"{name} depends on unknown service {dep}"
            assert condition in CONDITIONS, f"{name}: {condition}"
            target = SERVICES[dep]
            if condition == "service_healthy":
                stage = _our_stage(target)
                image_check = stage is not None and _image_setting(stage, "HEALTHCHECK")
                has_check = "healthcheck" in target or (
                    image_check and _healthcheck_argv(image_check.args) is not None
                )
                assert has_check, f"{name} waits for {dep} to be healthy; it has no healthcheck"
            if condition == "service_completed_successfully":
                assert target.get("restart", "no") == "no", f"{dep} is a one-shot"


def test_the_one_shot_migration_gates_the_api() -> None:
    migrations = [
        name
        for name, s in SERVICES.items()
        if any(args[:1] == ["migrate"] for args in topicstore_invocations(_argv(s.get("command"))))
    ]
    assert len(migrations) == 1
    (migrate,) = migrations
    assert _depends_on(SERVICES[migrate]) == {"postgres": "service_healthy"}
    api = _api_services()
    assert len(api) >= 2 or any(SERVICES[n].get("deploy", {}).get("replicas", 1) >= 2 for n in api)
    for name in api:
        assert _depends_on(SERVICES[name]).get(migrate) == "service_completed_successfully"


def _api_services() -> list[str]:
    return [
        name
        for name in SERVICES
        if any(
            args[:1] == ["serve"]
            for where, argv in service_argvs()
            if where == f"compose {name}"
            for args in topicstore_invocations(argv)
        )
    ]


def _settings_env() -> set[str]:
    prefix = Settings.model_config.get("env_prefix", "")
    return {f"{prefix}{name}".upper() for name in Settings.model_fields}


def test_every_topicstore_variable_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    known = _settings_env()
    named: dict[str, str] = dict(_dockerfile_env())
    for service in SERVICES.values():
        named |= _environment(service)
    ours = {key: value for key, value in named.items() if key.upper().startswith("TOPICSTORE_")}
    assert ours, "no TOPICSTORE_* variable set anywhere"
    unknown = sorted(set(map(str.upper, ours)) - known)
    assert not unknown, f"not settings of app.settings.Settings: {unknown}"
    # and each value parses as that setting
    for key in list(os.environ):
        if key.upper().startswith("TOPICSTORE_"):
            monkeypatch.delenv(key)
    for service_env in [_dockerfile_env(), *(_environment(s) for s in SERVICES.values())]:
        with monkeypatch.context() as m:
            for key, value in service_env.items():
                if key.upper().startswith("TOPICSTORE_"):
                    m.setenv(key, _interpolate(value))
            Settings(_env_file=None)


def test_admin_token_comes_from_the_environment() -> None:
    for name in _api_services():
        token = _environment(SERVICES[name]).get("TOPICSTORE_ADMIN_TOKEN", "")
        assert re.fullmatch(r"\$\{TOPICSTORE_ADMIN_TOKEN:\?[^}]+\}", token), (name, token)


def test_database_url_points_at_the_postgres_service() -> None:
    for name, service in SERVICES.items():
        raw = _environment(service).get("TOPICSTORE_DATABASE_URL")
        if raw is None:
            continue
        url = make_url(_interpolate(raw))
        assert url.drivername == "postgresql+psycopg", name
        assert url.host in SERVICES, f"{name}: database host {url.host} is not a service"
        postgres = _environment(SERVICES[url.host])
        assert url.port == 5432
        assert url.username == postgres["POSTGRES_USER"]
        assert url.password == _interpolate(postgres["POSTGRES_PASSWORD"])
        assert url.database == postgres["POSTGRES_DB"]


def _upstreams() -> dict[str, list[tuple[str, int]]]:
    text = re.sub(r"#.*", "", NGINX_CONF.read_text(encoding="utf-8"))
    out = {}
    for name, body in re.findall(r"upstream\s+(\S+)\s*\{([^}]*)\}", text):
        out[name] = [(h, int(p)) for h, p in re.findall(r"server\s+([\w.-]+):(\d+)", body)]
    return out


def _serve_port(name: str) -> int:
    for where, argv in service_argvs():
        if where != f"compose {name}":
            continue
        for args in topicstore_invocations(argv):
            if "--port" in args:
                return int(args[args.index("--port") + 1])
    env = _dockerfile_env() | _environment(SERVICES[name])
    return int(env.get("TOPICSTORE_PORT", Settings().port))


def test_nginx_balances_over_the_api_replicas() -> None:
    upstreams = _upstreams()
    assert upstreams, "deploy/nginx.conf has no upstream"
    text = NGINX_CONF.read_text(encoding="utf-8")
    for proxied in re.findall(r"proxy_pass\s+http://([\w.-]+)", text):
        assert proxied in upstreams, f"proxy_pass to unknown upstream {proxied}"
    api = set(_api_services())
    for servers in upstreams.values():
        assert len(servers) >= 2
        for host, port in servers:
            assert host in SERVICES, f"upstream host {host} is not a compose service"
            assert host in api, f"{host} does not run topicstore serve"
            assert port == _serve_port(host), f"{host} listens on {_serve_port(host)}, not {port}"
    mounts = [
        volume
        for s in SERVICES.values()
        if str(s.get("image", "")).startswith("nginx")
        for volume in s.get("volumes", [])
    ]
    assert any(str(v).startswith("./deploy/nginx.conf:") for v in mounts), mounts


def test_spark_urls_name_the_master_service() -> None:
    masters = {
        name: int(argv[argv.index("--port") + 1]) if "--port" in argv else 7077
        for where, argv in service_argvs()
        if "org.apache.spark.deploy.master.Master" in argv
        for name in [where.split()[1]]
    }
    assert masters, "no Spark master"
    workers = [w for w, argv in service_argvs() if "org.apache.spark.deploy.worker.Worker" in argv]
    assert workers, "no Spark worker"
    urls = [
        token
        for where, argv in service_argvs()
        if where.startswith("compose")
        for token in _tokens(argv)
        if token.startswith("spark://")
    ]
    assert len(urls) >= 2  # the worker's and the route job's
    for url in urls:
        host, _, port = url.removeprefix("spark://").partition(":")
        assert host in masters, f"{url}: {host} is not the master service"
        assert int(port) == masters[host]


def test_dockerignore_keeps_what_pip_install_needs() -> None:
    patterns = [
        line.strip().lstrip("/")
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    includes = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    needed = ["pyproject.toml", PYPROJECT["project"]["readme"]]
    needed += [pattern.rstrip("*") for pattern in includes]
    for path in needed:
        for pattern in patterns:
            bare = pattern.removeprefix("**/")
            assert not fnmatch.fnmatch(path, pattern) and not fnmatch.fnmatch(path, bare), (
                f".dockerignore's {pattern!r} drops {path}, which `pip install .` needs"
            )


# -- the image installs what the service imports ---------------------------------------------


def _third_party_imports(packages: list[str]) -> set[str]:
    ours = {
        pattern.rstrip("*")
        for pattern in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    found: set[str] = set()
    for package in packages:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    return {name for name in found if name not in ours and name not in sys.stdlib_module_names}


def _installed_closure(requirements: list[str]) -> set[str]:
    """Distributions ``requirements`` bring in, transitively (as installed here)."""
    seen: set[str] = set()
    todo = [(Requirement(r), "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        todo.extend((Requirement(sub), wanted) for sub in requires for wanted in ["", *req.extras])
    return seen


#: Imported only for optional features, from an extra the image does not install: the
#: charts of `topicstore bench` and `topicstore analytics --chart` (the `bench` extra).
OPTIONAL_IMPORTS: Final = {"matplotlib": "bench"}


def test_pip_install_brings_everything_the_service_imports() -> None:
    """The image runs `pip install .`: every package the service, the store and the
    pipeline import must come with [project.dependencies], or be a known optional one."""
    imported = _third_party_imports(["app", "loader", "store", "matcher", "migrations", "pipeline"])
    provided = _installed_closure(PYPROJECT["project"]["dependencies"])
    by_module = metadata.packages_distributions()
    missing = {
        module
        for module in imported
        if not {canonicalize_name(d) for d in by_module.get(module, [module])} & provided
    }
    unexpected = sorted(missing - set(OPTIONAL_IMPORTS))
    assert not unexpected, f"imported but not brought in by [project.dependencies]: {unexpected}"
    extras = PYPROJECT["project"]["optional-dependencies"]
    for module, extra in OPTIONAL_IMPORTS.items():
        assert {canonicalize_name(d) for d in by_module.get(module, [module])} & (
            _installed_closure(extras[extra])
        ), f"{module} is not in the {extra} extra"
