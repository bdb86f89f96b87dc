"""Schemathesis hooks: the rules the OpenAPI document can only describe, for requests the
fuzzer generates as valid.

JSON Schema cannot state a limit in UTF-8 bytes (``maxLength`` counts characters; the
document says the limit is in bytes), one query parameter's rule that depends on another's
value (a topic valid in the ``dialect`` parameter's grammar; ``overlaps`` and ``covered_by``
exclusive, and only in a topic dialect; a group policy only with a group; the listing's
cursor by matches in two parts; a removal's selection of at least one filter), or a list
as long as another (a batch's ``keys`` and ``topics``). The descriptions say them; a
client reading the descriptions does not send a request that breaks them, so a generated
request that does is dropped. Each rule is asked of the service's own code (the grammar,
the group rule, the selection), never restated here.

Only positive cases are filtered: a negative one is refused whatever else it breaks, which
is what its check wants. ``schemathesis.toml`` loads this module for ``st run``;
``tests/app/test_openapi.py`` runs the same command against a real server."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any, Final

import schemathesis
from schemathesis import GenerationMode

from app.admin_reads import selection_of
from matcher import MatcherError, get_dialect
from matcher.groups import check_group, split_shared
from matcher.limits import Limits
from store.expiry import expiry_at
from store.records import DEFAULT_DIALECT, HEADERS_DIALECT, MAX_LABELS_BYTES
from store.selection import Selection
from topicstore.times import parse

#: The grammar alone: byte limits are checked against each value's own ``maxLength``.
_GRAMMAR_ONLY: Final = Limits(max_topic_bytes=2**31, max_pattern_bytes=2**31)


def now() -> datetime:
    return datetime.now(UTC)


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _resolve(schema: Any, document: Mapping[str, Any]) -> Any:
    while isinstance(schema, dict) and "$ref" in schema:
        target: Any = document
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        schema = target
    return schema


def _over_bytes(value: Any, schema: Any, document: Mapping[str, Any]) -> bool:
    """Whether a string in ``value`` has more UTF-8 bytes than the ``maxLength`` of a schema
    that ``schema`` gives it (every length limit of the document is one in bytes)."""
    schema = _resolve(schema, document)
    if not isinstance(schema, dict):
        return False
    if isinstance(value, str):
        return "maxLength" in schema and _size(value) > schema["maxLength"]
    branches = [*schema.get("anyOf", ()), *schema.get("oneOf", ()), *schema.get("allOf", ())]
    if any(_over_bytes(value, branch, document) for branch in branches):
        return True
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key, item in value.items():
            if _over_bytes(key, schema.get("propertyNames"), document):
                return True
            if _over_bytes(item, properties.get(key, schema.get("additionalProperties")), document):
                return True
    if isinstance(value, list):
        return any(_over_bytes(item, schema.get("items"), document) for item in value)
    return False


def _valid(check: Callable[[], object]) -> bool:
    try:
        check()
    except (MatcherError, ValueError):
        return False
    return True


def _topic_in_dialect(values: Mapping[str, Any]) -> bool:
    """A topic valid in the request's dialect (the default when none is named)."""
    topic, dialect = values.get("topic"), values.get("dialect") or DEFAULT_DIALECT
    if not isinstance(topic, str) or not isinstance(dialect, str):
        return True  # a type the schema forbids: the schema's own checks cover it
    return _valid(lambda: get_dialect(dialect).split_topic(topic, _GRAMMAR_ONLY))


def _pattern_in_dialect(pattern: Any, dialect: Any) -> bool:
    """A pattern valid in ``dialect``; in MQTT a ``$share/{group}/{filter}`` is a group name
    and a filter (``store.records`` splits it the same way)."""
    if not isinstance(pattern, str) or not isinstance(dialect, str):
        return True
    if dialect == "mqtt":
        try:
            shared = split_shared(pattern)
        except MatcherError:
            return False
        if shared is not None:
            pattern = shared[1]
    return _valid(lambda: get_dialect(dialect).parse_pattern(pattern, _GRAMMAR_ONLY))


def _one_search_in_a_topic_dialect(query: Mapping[str, Any]) -> bool:
    """The listing's ``overlaps`` and ``covered_by``: one of them, in a topic dialect, a
    pattern of that dialect."""
    searches = [name for name in ("overlaps", "covered_by") if name in query]
    if not searches:
        return True
    dialect = query.get("dialect") or DEFAULT_DIALECT
    if len(searches) > 1 or dialect == HEADERS_DIALECT:
        return False
    return _pattern_in_dialect(query[searches[0]], dialect)


def _group_rules(body: Mapping[str, Any]) -> bool:
    """The group's described rules: its name (format characters past U+FFFF too), a policy
    only with a group, and an MQTT ``$share/{group}/...`` naming the group field's group."""
    group, dialect = body.get("group"), body.get("dialect")
    if isinstance(group, str) and not _valid(lambda: check_group(group)):
        return False
    pattern = body.get("pattern")
    shared = None
    if dialect == "mqtt" and body.get("kind", "topic") == "topic" and isinstance(pattern, str):
        try:
            shared = split_shared(pattern)
        except MatcherError:
            return True  # the pattern's own rule drops it
    if shared is not None and isinstance(group, str) and group != shared[0]:
        return False
    return body.get("group_policy") is None or group is not None or shared is not None


def _listing(query: Mapping[str, Any]) -> bool:
    """The listing's searches (``_one_search_in_a_topic_dialect``), and its order: with
    ``sort=matches`` no search, and ``after`` with ``after_matches`` or neither; without
    it no ``after_matches``."""
    if query.get("sort") == "matches":
        searched = "overlaps" in query or "covered_by" in query
        if searched or ("after" in query) != ("after_matches" in query):
            return False
    elif "after_matches" in query:
        return False
    return _one_search_in_a_topic_dialect(query)


def _selection(query: Mapping[str, Any]) -> bool:
    """A removal's selection: at least one filter that selects (``Selection.given``)."""
    filters = {f.name: query.get(f.name) for f in fields(Selection)}
    if not all(value is None or isinstance(value, str) for value in filters.values()):
        return True  # a type the schema forbids: the schema's own checks cover it
    return bool(selection_of(**filters).given())


def _subscription(body: Any) -> bool:
    """A topic subscription's pattern valid in its dialect; labels within their JSON size;
    the group's rules."""
    if not isinstance(body, dict):
        return True
    if not _group_rules(body):
        return False
    labels = body.get("labels")
    if isinstance(labels, dict) and _size(json.dumps(labels, ensure_ascii=False)) > (
        MAX_LABELS_BYTES
    ):
        return False
    if body.get("kind", "topic") != "topic":
        return True
    return _pattern_in_dialect(body.get("pattern", ""), body.get("dialect") or DEFAULT_DIALECT)


def _expiry(body: Any) -> bool:
    """An expiry the store takes now (``store.expiry.expiry_at``: after now, at most ten
    years ahead, not both forms); an instant, if any, as the schema's pattern reads it."""
    if not isinstance(body, dict):
        return True
    at, ttl = body.get("expires_at"), body.get("ttl")
    if at is not None and ttl is not None:
        return False  # expiry_conflict
    try:
        instant = None if at is None else parse(at)
    except ValueError:
        return True  # a form the schema refuses: its own checks cover it
    return _valid(lambda: expiry_at(instant, None, now()))


def _keys_match_topics(body: Any) -> bool:
    if not isinstance(body, dict):
        return True
    topics, keys = body.get("topics"), body.get("keys")
    return not (isinstance(topics, list) and isinstance(keys, list) and len(keys) != len(topics))


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


#: The described rules of each operation that has some, on its query or its body.
_QUERY_RULES: Final[dict[str, Callable[[Mapping[str, Any]], bool]]] = {
    "GET /v1/match": _topic_in_dialect,
    "GET /v1/match/explain": _topic_in_dialect,
    "GET /v1/subscriptions": _listing,
    "DELETE /v1/subscriptions": _selection,
}
_BODY_RULES: Final[dict[str, Callable[[Any], bool]]] = {
    "POST /v1/match": lambda body: _topic_in_dialect(_dict(body)),
    "POST /v1/subscriptions": lambda body: _subscription(body) and _expiry(body),
    "PATCH /v1/subscriptions/{sub_id}": _expiry,
    "POST /v1/match/batch": _keys_match_topics,
}


def within_the_described_rules(case: Any) -> bool:
    """Whether ``case`` keeps the rules the document describes but cannot state."""
    operation = case.operation
    label = operation.label
    document = operation.schema.raw_schema
    definition = operation.definition.raw
    for parameter in definition.get("parameters", ()):
        location = {"query": case.query, "path": case.path_parameters}.get(parameter["in"])
        value = _dict(location).get(parameter["name"])
        values = value if isinstance(value, list) else [value]
        schema = parameter.get("schema", {})
        item_schema = schema.get("items", {}) if isinstance(value, list) else schema
        if any(_over_bytes(one, item_schema, document) for one in values if one is not None):
            return False
    body_schema = (
        definition.get("requestBody", {}).get("content", {}).get("application/json", {})
    ).get("schema")
    if body_schema is not None and _over_bytes(case.body, body_schema, document):
        return False
    query_rule = _QUERY_RULES.get(label)
    if query_rule is not None and not query_rule(_dict(case.query)):
        return False
    body_rule = _BODY_RULES.get(label)
    return body_rule is None or body_rule(case.body)


@schemathesis.hook
def filter_case(context: Any, case: Any) -> bool:
    meta = case.meta
    if meta is not None and meta.generation.mode is not GenerationMode.POSITIVE:
        return True
    return within_the_described_rules(case)
