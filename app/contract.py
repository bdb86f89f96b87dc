"""The constraints the service enforces, stated in its OpenAPI document.

The request models stay lenient on purpose (the service checks names, patterns and topics
itself, once, in ``store.records.validate`` and the matchers, and answers with the code of
the broken rule); this module writes those rules into the generated document, so a client
or a fuzzer reading it knows them: non-empty subscriber, no control characters in names
and patterns, no NUL anywhere, the batch limits, which fields each kind of subscription
takes, the header limits.

Two rules JSON Schema cannot state are said in the fields' descriptions: a limit in UTF-8
bytes (``maxLength`` counts characters, so it is stated as well but is the looser bound)
and a dialect's grammar (a topic or pattern valid in the request's dialect, e.g. NATS
refuses an empty topic and empty tokens). They are not custom ``format``s: a fuzzer cannot
tell a value of an unknown format from one that is not, and would call every value a
violation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, get_args

import orjson
from fastapi import FastAPI
from fastapi.routing import APIRoute

from app.settings import Settings
from matcher import DIALECTS
from matcher.grammar import unseen_characters_class
from matcher.groups import MAX_GROUP_BYTES, MAX_KEY_BYTES, Policy
from matcher.headers import HeaderLimits
from store.records import (
    CONTROL_CHARACTERS,
    DEFAULT_DIALECT,
    MAX_LABELS_BYTES,
    MAX_LABELS_DEPTH,
    MAX_NAME_BYTES,
    MODES,
)

NO_NUL: Final = "^[^\\u0000]*$"
#: Names and patterns: ``store.records``' own character rule.
NO_CONTROLS: Final = f"^[^{CONTROL_CHARACTERS}]*$"

RULES: Final = {
    "name": f"1 to {MAX_NAME_BYTES} UTF-8 bytes, no control character, no whitespace and no "
    "format character (Unicode category Cf, e.g. U+202E; those past U+FFFF are not in the "
    "pattern)",
    "topic": "a topic (routing key) valid in the request's dialect, at most "
    "TOPICSTORE_MAX_TOPIC_BYTES UTF-8 bytes, without NUL (amqp: any, the empty one too; "
    "mqtt: not empty, no + or #; nats: not empty, no empty token, no whitespace)",
    "pattern": "a pattern valid in the subscription's dialect, at most "
    "TOPICSTORE_MAX_TOPIC_BYTES UTF-8 bytes, no control character but tab; with "
    "TOPICSTORE_MAX_HASH_WILDCARDS set, at most that many # words",
}


def _text(max_length: int, pattern: str, rule: str | None = None, **more: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "maxLength": max_length, "pattern": pattern}
    if rule is not None:
        schema["description"] = RULES[rule]
    return {**schema, **more}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _dialects(empty_allowed: bool) -> list[str]:
    """The topic dialects in which the empty topic and the empty pattern are valid (amqp),
    or those in which they are not."""
    return [name for name, d in DIALECTS.items() if d.empty_topic_allowed is empty_allowed]


def _one_of(names: list[str]) -> str:
    return " or ".join(names)


def _title(names: list[str], model: str) -> str:
    return "".join(name.title() for name in names) + model


def _group_fields() -> dict[str, Any]:
    """``group`` and ``group_policy`` as ``matcher.groups.check_group`` and
    ``check_policy`` read them; the cross-field rules are in the descriptions."""
    group = _text(
        MAX_GROUP_BYTES,
        f"^[^\\u0000-\\u0020\\u007f/+#{unseen_characters_class()}]*$",
        minLength=1,
        description=f"Shared subscription: one member per group receives each match. 1 to "
        f"{MAX_GROUP_BYTES} UTF-8 bytes, no '/', '+', '#', whitespace, control or format "
        "character. An MQTT filter '$share/{group}/{filter}' sets it too; a group field "
        "naming another group is refused (group_mismatch).",
    )
    policy = {
        "enum": list(get_args(Policy)),
        "description": "How the group's member is chosen; only with a group "
        "(policy_without_group). Omitted: the group's current policy, or 'random' for a new "
        "group; another one than the group's is refused (409 group_policy_conflict).",
    }
    return {"group": _nullable(group), "group_policy": _nullable(policy)}


def _subscription_in(settings: Settings) -> dict[str, Any]:
    """``SubscriptionIn`` as the service reads it: a topic subscription or a headers one,
    each with only its own fields; the topic ones split by whether the dialect takes the
    empty pattern."""
    limits = HeaderLimits()
    lenient, strict = _dialects(True), _dialects(False)
    assert DEFAULT_DIALECT in lenient  # an omitted dialect may go with an omitted pattern
    # A subscriber name: the controls' rule and the names' (``store.records.validate``).
    names = f"^[^{CONTROL_CHARACTERS}{unseen_characters_class()}]*$"
    name = _text(MAX_NAME_BYTES, names, "name", minLength=1)
    common = {
        "subscriber": name,
        "tenant": _nullable(_text(MAX_NAME_BYTES, NO_CONTROLS)),
        "labels": _nullable({"$ref": "#/components/schemas/Labels"}),
        **_group_fields(),
    }
    topic_fields = {
        **common,
        "kind": {"const": "topic"},
        "pattern": _text(settings.max_topic_bytes, NO_CONTROLS, "pattern"),
        "criteria": {"type": "null"},
        "mode": {"type": "null"},
    }
    empty_pattern = {
        "type": "object",
        "title": _title(lenient, "SubscriptionIn"),
        "description": f"dialect {_one_of(lenient)} ({DEFAULT_DIALECT} is the default): the "
        "empty pattern is valid too.",
        "additionalProperties": False,
        "required": ["subscriber"],
        "properties": {**topic_fields, "dialect": _nullable({"enum": lenient})},
    }
    pattern_required = {
        "type": "object",
        "title": _title(strict, "SubscriptionIn"),
        "description": f"dialect {_one_of(strict)}: a pattern is required (not empty).",
        "additionalProperties": False,
        "required": ["subscriber", "dialect", "pattern"],
        "properties": {
            **topic_fields,
            "pattern": {**topic_fields["pattern"], "minLength": 1},
            "dialect": {"enum": strict},
        },
    }
    headers = {
        "type": "object",
        "title": "HeadersSubscriptionIn",
        "additionalProperties": False,
        "required": ["subscriber", "kind", "criteria", "mode"],
        "properties": {
            **common,
            "kind": {"const": "headers"},
            "criteria": {
                "type": "object",
                "minProperties": 1,
                "maxProperties": limits.max_criteria,
                "propertyNames": _text(limits.max_field_bytes, NO_NUL),
                "additionalProperties": _nullable(_text(limits.max_value_bytes, NO_NUL)),
            },
            "mode": {"enum": list(MODES)},
            "pattern": {"const": ""},
            "dialect": {"type": "null"},
        },
    }
    return {
        "oneOf": [empty_pattern, pattern_required, headers],
        "description": "A topic subscription (pattern, dialect) or a headers one (kind "
        "'headers', criteria, mode); a field of the other kind is refused.",
    }


def _match_in(generated: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """``MatchIn`` split by whether the dialect takes the empty topic (amqp's empty routing
    key is a topic of no words): the rest of each dialect's grammar is in the topic's
    description."""
    lenient, strict = _dialects(True), _dialects(False)
    assert generated["properties"]["dialect"]["default"] in lenient
    topic = _text(settings.max_topic_bytes, NO_NUL, "topic")
    base = {k: v for k, v in generated.items() if k not in ("title", "examples")}
    empty_topic = {
        **base,
        "title": _title(lenient, "MatchIn"),
        "properties": {
            **base["properties"],
            "topic": topic,
            "dialect": {**base["properties"]["dialect"], "enum": lenient},
        },
    }
    topic_required = {
        **base,
        "title": _title(strict, "MatchIn"),
        "required": [*base["required"], "dialect"],
        "properties": {
            **base["properties"],
            "topic": {**topic, "minLength": 1},
            "dialect": {"type": "string", "enum": strict},
        },
    }
    return {
        "oneOf": [empty_topic, topic_required],
        "title": generated["title"],
        "description": f"The empty topic is valid in {_one_of(lenient)} (the default) only.",
        "examples": generated.get("examples", []),
    }


def _labels() -> dict[str, Any]:
    """Labels: a JSON object whose strings (keys too) hold no NUL, nested at most
    ``MAX_LABELS_DEPTH`` levels (unrolled: JSON Schema has no depth bound), at most
    ``MAX_LABELS_BYTES`` of JSON (not statable; said in the description)."""
    scalars: list[dict[str, Any]] = [
        {"type": "string", "pattern": NO_NUL},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "null"},
    ]
    # The deepest level may hold scalars and empty containers only.
    value: dict[str, Any] = {
        "anyOf": [
            *scalars,
            {"type": "array", "maxItems": 0},
            {"type": "object", "maxProperties": 0},
        ]
    }
    for _ in range(MAX_LABELS_DEPTH - 1):
        value = {
            "anyOf": [
                *scalars,
                {"type": "array", "items": value},
                {
                    "type": "object",
                    "propertyNames": {"pattern": NO_NUL},
                    "additionalProperties": value,
                },
            ]
        }
    return {
        "type": "object",
        "propertyNames": {"pattern": NO_NUL},
        "additionalProperties": value,
        "description": f"Free-form, at most {MAX_LABELS_DEPTH} levels deep and "
        f"{MAX_LABELS_BYTES} bytes of JSON.",
    }


#: Query and path parameters by name: what the service enforces on them. No string
#: parameter holds NUL: the URL check refuses one anywhere (400 ``nul_byte``), so every
#: free-text parameter is listed here.
_PARAMETERS: Final[dict[str, Callable[[Settings], dict[str, Any]]]] = {
    "tenant": lambda s: _text(MAX_NAME_BYTES, NO_NUL),
    "subscriber": lambda s: _text(MAX_NAME_BYTES, NO_NUL),
    "pattern_prefix": lambda s: _text(MAX_NAME_BYTES, NO_NUL),
    "topic": lambda s: _text(s.max_topic_bytes, NO_NUL, "topic"),
    # The listing's searches: a pattern of the request's dialect (its grammar and the byte
    # limit are in the route's description, which is kept).
    "overlaps": lambda s: _text(s.max_topic_bytes, NO_NUL),
    "covered_by": lambda s: _text(s.max_topic_bytes, NO_NUL),
    # A group's hash key: at most MAX_KEY_BYTES UTF-8 bytes, checked whether or not a group
    # matches (``app.delivery.hash_key``).
    "key": lambda s: _text(MAX_KEY_BYTES, NO_NUL),
    # The listing's group and label filters (the label: KEY=VALUE with a key; its length
    # bound is the route's own).
    "group": lambda s: _text(MAX_GROUP_BYTES, NO_NUL),
    "label": lambda s: {"type": "string", "pattern": "^[^=\\u0000]+=[^\\u0000]*$"},
}
#: Operations anyone may call, where the operator's token adds per-tenant figures.
OPTIONAL_TOKEN: Final = ("/readyz", "/metrics")


def state_constraints(document: dict[str, Any], settings: Settings) -> None:
    """Write the service's rules into ``document`` (FastAPI's generated OpenAPI)."""
    schemas = document["components"]["schemas"]
    schemas["SubscriptionIn"] = _subscription_in(settings)
    schemas["Labels"] = _labels()
    batch = settings.max_batch
    schemas["BulkIn"]["properties"]["items"]["maxItems"] = batch
    schemas["BulkIn"]["properties"]["items"]["items"] = {
        "anyOf": [{"$ref": "#/components/schemas/SubscriptionIn"}, {}],
        "description": "Each a SubscriptionIn; one that is not gets its own error result.",
    }
    for model, field in (("MatchIn", "key"), ("HeadersMatchIn", "key"), ("BatchIn", "keys")):
        declared = schemas[model]["properties"][field]
        key = _text(MAX_KEY_BYTES, NO_NUL)
        value = {"type": "array", "items": key} if field == "keys" else key
        schemas[model]["properties"][field] = {
            "anyOf": [value, {"type": "null"}],
            **_kept(declared),
        }
    schemas["MatchIn"] = _match_in(schemas["MatchIn"], settings)
    schemas["BatchIn"]["properties"]["topics"]["maxItems"] = batch
    limits = HeaderLimits()
    schemas["HeadersMatchIn"]["properties"]["headers"] = {
        "type": "object",
        "maxProperties": limits.max_fields,
        "propertyNames": _text(limits.max_field_bytes, NO_NUL),
        "additionalProperties": _text(limits.max_value_bytes, NO_NUL),
    }
    for path in OPTIONAL_TOKEN:
        # An empty requirement: the token is optional (OpenAPI 3's way to say so).
        document["paths"][path]["get"]["security"] = [{"HTTPBearer": []}, {}]
    for operations in document["paths"].values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                parameter["schema"] = _not_null(parameter["schema"])
                rule = _PARAMETERS.get(parameter["name"])
                schema = parameter["schema"]
                if rule is None or "enum" in str(schema):
                    continue
                if schema.get("type") == "array":  # repeatable: the rule holds for each
                    schema["items"] = _merged(rule(settings), schema.get("items", {}))
                else:
                    parameter["schema"] = _merged(rule(settings), schema)


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter is absent or a value: ``X | None`` in Python is just ``X`` in a URL (a
    "null" alternative would tell a client it may send something for it)."""
    options = [o for o in schema.get("anyOf", []) if o != {"type": "null"}]
    if len(options) != 1 or len(options) == len(schema.get("anyOf", [])):
        return schema
    return {**options[0], **_kept(schema)}


def _merged(rule: dict[str, Any], declared: dict[str, Any]) -> dict[str, Any]:
    """``rule`` with the declared schema's title, description and default; of two length
    bounds (the rule's, the route's ``max_length``) the tighter, as both are enforced."""
    merged = {**rule, **_kept(declared)}
    bounds = [s["maxLength"] for s in (rule, declared) if "maxLength" in s]
    if bounds:
        merged["maxLength"] = min(bounds)
    return merged


def _kept(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k in ("title", "description", "default")}


#: Documents built in this process, by what they depend on (``_key``), as JSON.
_built: dict[tuple[object, ...], bytes] = {}


def _key(app: FastAPI, settings: Settings) -> tuple[object, ...]:
    """What an app's document depends on: its routes (the same code, so the same models,
    for the same paths and methods; an included router by identity, as the module-level
    routers are) and the settings ``state_constraints`` states. A route of another kind
    counts by identity: that app's document is then built for it alone."""
    routes = tuple(
        (route.path, tuple(sorted(getattr(route, "methods", None) or ())))
        if isinstance(route, APIRoute)
        else id(getattr(route, "original_router", route))
        for route in app.routes
    )
    return (app.title, app.version, routes, settings.max_topic_bytes, settings.max_batch)


def install(app: FastAPI, settings: Settings) -> None:
    """Make ``app.openapi()`` return the document with the rules stated. It is built once
    per process for apps that share its ``_key`` (building it costs more than the rest of
    an app's start, and tests build hundreds of apps); each app gets its own copy."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            key = _key(app, settings)
            built = _built.get(key)
            if built is None:
                document = generate()
                state_constraints(document, settings)
                built = _built[key] = orjson.dumps(document)
            app.openapi_schema = orjson.loads(built)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
