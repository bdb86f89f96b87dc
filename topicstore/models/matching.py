"""Match, batch, headers and explain bodies, and the redundancy report: what the match
API takes and answers."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from topicstore.models.admin import Dialect, ErrorBody

_KEY_DESCRIPTION: Final = (
    "Key of the 'hash' policy (a message id, a client id; at most 1,024 UTF-8 bytes): the "
    "same key reaches the same member of a group while that member stays. Default: the topic."
)


class MatchIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"topic": "stock.nasdaq.msft"},
                {"topic": "orders.eu.created", "key": "order-1234"},
            ]
        },
    )

    topic: str
    dialect: Dialect = "amqp"
    tenant: str | None = None
    key: str | None = Field(None, description=_KEY_DESCRIPTION)


class GroupChoice(BaseModel):
    """The member one group delivers to, for one topic."""

    group: str
    policy: str
    subscription: int = Field(description="The chosen member (also in 'subscriptions').")
    subscriber: str
    candidates: int = Field(description="How many members of the group matched.")


class MatchOut(BaseModel):
    """The delivered set: every ungrouped match plus one member per group; ``groups`` says
    which member each group chose (empty when no group matched)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "subscriptions": [3, 12],
                    "subscribers": ["audit", "worker-2"],
                    "groups": [
                        {
                            "group": "order-workers",
                            "policy": "round_robin",
                            "subscription": 12,
                            "subscriber": "worker-2",
                            "candidates": 3,
                        }
                    ],
                }
            ]
        }
    )

    subscriptions: list[int]
    subscribers: list[str]
    groups: list[GroupChoice] = Field(default_factory=list)


class BatchIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"topics": ["stock.nasdaq.msft", "orders.eu.created"]},
                {"topics": ["orders.eu.created"], "keys": ["order-1234"]},
            ]
        },
    )

    topics: list[str]
    dialect: Dialect = "amqp"
    tenant: str | None = None
    keys: list[str] | None = Field(
        None,
        description="One 'hash' key per topic, as many as topics (else 422 keys_mismatch; see "
        "POST /v1/match); default: the topics.",
    )


class BatchItem(BaseModel):
    subscriptions: list[int] | None = None
    subscribers: list[str] | None = None
    groups: list[GroupChoice] | None = None
    error: ErrorBody | None = None


class BatchOut(BaseModel):
    results: list[BatchItem]


class HeadersMatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    headers: dict[str, str]
    tenant: str | None = None
    key: str | None = Field(
        None, description="Key of the 'hash' policy; default: the headers as sorted JSON."
    )


class CaptureOut(BaseModel):
    token: int = Field(description="Index of the wildcard among the pattern's words.")
    wildcard: str = Field(description="The wildcard as written: *, #, + or >.")
    start: int = Field(description="Index of the first topic word it took.")
    words: list[str] = Field(description="The topic words it took (may be none for #).")


class FailureOut(BaseModel):
    position: int = Field(
        description="Index of the first topic word no prefix of the pattern gets past (the "
        "number of words when the topic ended too soon)."
    )
    reason: Literal["mismatch", "too_long", "too_short", "system_topic"]
    expected: list[str] = Field(description="Literal words the pattern could take there.")


class ExplainedMatch(BaseModel):
    id: int
    subscriber: str
    pattern: str
    captures: list[CaptureOut]


class Closest(BaseModel):
    id: int
    pattern: str
    failure: FailureOut


class Unmatched(BaseModel):
    subscriber: str
    patterns: int = Field(description="Its subscriptions in this dialect.")
    closest: Closest | None = Field(
        description="The pattern that gets furthest into the topic (most words matched; then "
        "the lowest id); null when it has no subscription in this dialect."
    )


class ExplainOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "words": ["stock", "nasdaq", "msft"],
                "matched_total": 1,
                "truncated": False,
                "matched": [
                    {
                        "id": 7,
                        "subscriber": "q1",
                        "pattern": "stock.*.msft",
                        "captures": [
                            {"token": 1, "wildcard": "*", "start": 1, "words": ["nasdaq"]}
                        ],
                    }
                ],
                "unmatched": [
                    {
                        "subscriber": "q2",
                        "patterns": 1,
                        "closest": {
                            "id": 8,
                            "pattern": "stock.nyse.#",
                            "failure": {"position": 1, "reason": "mismatch", "expected": ["nyse"]},
                        },
                    }
                ],
            }
        }
    )

    words: list[str] = Field(description="The topic's words, as the dialect splits it.")
    matched_total: int
    truncated: bool = Field(description="True when only the first (lowest-id) were explained.")
    matched: list[ExplainedMatch]
    unmatched: list[Unmatched] = Field(
        description="Subscribers named in the query that did not match."
    )


class RedundantItem(BaseModel):
    id: int
    pattern: str
    covered_by: int = Field(description="A subscription of the same subscriber covering it.")
    covered_by_pattern: str


class RedundantOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "tenant": "default",
                "subscriber": "q1",
                "dialect": "amqp",
                "patterns": 3,
                "redundant": [
                    {"id": 12, "pattern": "a.b", "covered_by": 11, "covered_by_pattern": "a.#"}
                ],
            }
        }
    )

    tenant: str
    subscriber: str
    dialect: str
    patterns: int = Field(description="The subscriber's subscriptions in this dialect.")
    redundant: list[RedundantItem]
