"""Shared subscriptions on the command line (the real ``topicstore`` process, direct mode):
``sub add --group --policy`` and ``$share/``, ``sub ls`` showing the group, ``match``
printing each group's choice and ``--key`` keeping a hash group's member."""

from __future__ import annotations

import json
from pathlib import Path

from tests.app.test_cli_errors import run_cli


def test_groups_on_the_command_line(tmp_path: Path) -> None:
    added = run_cli(
        tmp_path, "sub", "add", "w1", "jobs.*", "--group", "workers", "--policy", "hash"
    )
    assert added.returncode == 0, added.stderr
    lines = [
        {"subscriber": "w2", "pattern": "jobs.*", "group": "workers"},
        {"subscriber": "audit", "pattern": "jobs.#"},
        {"subscriber": "m1", "pattern": "$share/dash/s/+", "dialect": "mqtt"},
        {"subscriber": "w3", "pattern": "jobs.*", "group": "workers", "group_policy": "random"},
    ]
    (tmp_path / "subs.jsonl").write_text("\n".join(map(json.dumps, lines)), encoding="utf-8")
    imported = run_cli(tmp_path, "sub", "import", "subs.jsonl")
    assert imported.returncode == 1  # the last line conflicts
    assert "line 4: group_policy_conflict: " in imported.stdout
    listed = run_cli(tmp_path, "sub", "ls", "--json")
    rows = {
        r["subscriber"]: (r["pattern"], r["group"], r["group_policy"])
        for r in json.loads(listed.stdout)
    }
    assert rows == {
        "w1": ("jobs.*", "workers", "hash"),
        "w2": ("jobs.*", "workers", "hash"),
        "audit": ("jobs.#", None, None),
        "m1": ("s/+", "dash", "random"),
    }

    first = run_cli(tmp_path, "match", "jobs.a", "--key", "order-7")
    assert first.returncode == 0, first.stderr
    chosen = [name for name in first.stdout.splitlines() if name != "audit"]
    assert len(chosen) == 1 and chosen[0] in {"w1", "w2"}
    assert "matched: 2 subscriptions, 2 subscribers" in first.stderr
    assert f"group workers (hash): {chosen[0]} (subscription" in first.stderr
    assert "one of 2)" in first.stderr
    as_json = json.loads(run_cli(tmp_path, "match", "jobs.b", "--key", "order-7", "--json").stdout)
    assert [g["subscriber"] for g in as_json["groups"]] == chosen  # the same key: the same one


def test_a_csv_import_takes_group_columns(tmp_path: Path) -> None:
    """CSV columns 5 and 6 are the group and its policy; an empty one is left out (the
    group's own policy, or ``random`` for a new group); the 7th is the expiry, an 8th
    column is a bad line."""
    (tmp_path / "subs.csv").write_text(
        "subscriber,pattern,dialect,tenant,group,group_policy\n"
        "w1,jobs.*,amqp,,workers,round_robin\n"
        "w2,jobs.*,,,workers,\n"
        "w3,jobs.*,amqp,,workers,hash\n"
        "solo,jobs.#\n"
        "w4,jobs.*,amqp,,workers,round_robin,2990-01-01T00:00:00Z,extra\n",
        encoding="utf-8",
    )
    imported = run_cli(tmp_path, "sub", "import", "subs.csv")
    assert imported.returncode == 1
    assert "line 4: group_policy_conflict: " in imported.stdout
    assert "line 6: bad_columns: " in imported.stdout
    rows = {
        r["subscriber"]: (r["group"], r["group_policy"])
        for r in json.loads(run_cli(tmp_path, "sub", "ls", "--json").stdout)
    }
    assert rows == {
        "w1": ("workers", "round_robin"),
        "w2": ("workers", "round_robin"),
        "solo": (None, None),
    }
