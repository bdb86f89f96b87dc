"""Every admin operation, implemented once: validation with the configured limits, the
tenant quota, the store write and the per-item results. The HTTP routes and the command
line's direct mode both call this class, so they cannot drift apart (they did once: the
CLI skipped the quota and the configured topic limit). Every change also writes its audit
rows here, in the change's own transaction (``_audit``).

Writes commit to the store first; the loader's after-commit hook applies them to the
matchers before the call returns (see ``store.Database.write``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Final

import pyarrow as pa
from pydantic import JsonValue
from sqlalchemy.orm import Session

from app.admin_reads import AdminReads, subscription_out
from app.auth import Caller
from app.bulk import (
    PLAIN,
    BulkResult,
    Items,
    Valid,
    accept_plain,
    parse_item,
    plain,
    room_keys,
    stored_keys,
    topic_keys,
)
from app.refusals import (
    BatchTooLargeError,
    ExpiredError,
    InvalidRequestError,
    NotApplicableError,
    NotFoundError,
    QuotaExceededError,
    ServiceError,
)
from app.settings import Settings
from matcher import MatcherError
from store import (
    AuditEntry,
    AuditRepository,
    Database,
    NewSubscription,
    StoreError,
    SubscriptionRepository,
    validate,
)
from store.expiry import expired, expiry_at
from store.group_commit import Announced, Job
from store.groups import GroupPolicies, check_same_group
from store.selection import Selection
from store.staging import staged_rows
from topicstore.models import Deleted, ExpiryIn, SubscriptionIn, SubscriptionOut

_NEW_FIELDS: Final = tuple(NewSubscription.__dataclass_fields__)
#: How often a writer purges audit rows past their retention (a range delete on an index).
AUDIT_PURGE_EVERY: Final = timedelta(hours=1)


def utc_now() -> datetime:
    return datetime.now(UTC)


#: Who the audit log names for what expiry removes (``sweep_expired``; an expired row
#: replaced by a create of its key): the service itself, on no tenant's behalf.
EXPIRY: Final = Caller(tenant=None, name="expiry")


class AdminOperations(AdminReads):
    """Admin operations on ``db`` under ``settings``' limits, on behalf of a ``Caller``.
    ``clock`` stamps audit rows and schedules their purge (tests pass their own). The
    reads are ``AdminReads``'."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        *,
        clock: Callable[[], datetime] = utc_now,
        room: Callable[[Iterable[tuple[str, str, str]]], None] | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self._limits = settings.limits()
        self._clock = clock
        # The serving process's RoutingTable.check_room: raises CapacityError before a
        # write its engines might not hold (the CLI's direct mode has no table to ask).
        self._room = room
        self._next_purge: datetime | None = None

    # -- writes -------------------------------------------------------------------------

    def create(self, item: SubscriptionIn, caller: Caller) -> tuple[SubscriptionOut, bool]:
        """Create one subscription; the same one again returns the stored row. The flag says
        whether a row was created. Raises the refusal (invalid input, quota, an engine's
        capacity)."""
        return self.db.writes.run(self._create(item, caller))

    async def create_async(
        self, item: SubscriptionIn, caller: Caller
    ) -> tuple[SubscriptionOut, bool]:
        """``create`` for a caller on an event loop (``GroupCommit.run_async``)."""
        return await self.db.writes.run_async(self._create(item, caller))

    def _create(self, item: SubscriptionIn, caller: Caller) -> Job[tuple[SubscriptionOut, bool]]:
        """``create``'s write, validated now."""
        new = self._new(item, caller)

        def check(session: Session) -> Callable[[], tuple[SubscriptionOut, bool]]:
            repo = SubscriptionRepository(session)
            # Only a new row counts: a repeated write still answers at the quota.
            refusal = self._refusal(repo, new)
            if refusal is None and new.group is None:
                # The common case in one statement (``SubscriptionRepository.add``).
                def add() -> tuple[SubscriptionOut, bool]:
                    row, created = repo.add(new)
                    if not created and expired(row.expires_at, self._clock()):
                        # An expired row awaiting the sweep is gone for its key: created anew.
                        if repo.remove(row.id) is not None:
                            self._audit(session, EXPIRY, "expire", {row.tenant: [row.id]})
                        row, created = repo.insert(new), True
                    if created:
                        self._audit(session, caller, "create", {row.tenant: [row.id]})
                    return subscription_out(row), created

                return add
            resolved = _with_policies(repo, [new]).resolve(new) if new.group else new
            existing = repo.find(resolved)
            # An expired row awaiting the sweep is gone for its key: created anew.
            stale = existing if existing and expired(existing.expires_at, self._clock()) else None
            if existing is not None and stale is None:
                check_same_group(resolved, existing.group)
                return lambda: (subscription_out(existing), False)
            # Only a new row counts: a repeated write still answers at the quota.
            self._check_quota(repo, {resolved.tenant: 0 if stale else 1})
            self._check_room(topic_keys([resolved]))

            def write() -> tuple[SubscriptionOut, bool]:
                if stale is not None and repo.remove(stale.id) is not None:
                    self._audit(session, EXPIRY, "expire", {stale.tenant: [stale.id]})
                row = repo.insert(resolved)
                self._audit(session, caller, "create", {row.tenant: [row.id]})
                return subscription_out(row), True

            return write

        # A plain create says its key ahead (its group can look all of theirs up at once);
        # one in a group of subscribers looks its key up after the group's policy.
        return check if new.group else Announced(check, new)

    def create_many(
        self, items: Sequence[JsonValue] | Items, caller: Caller, *, results: bool = True
    ) -> BulkResult:
        """Create many in one transaction; every item gets its own result and the valid
        ones are stored even when others fail: an item that does not fit ``SubscriptionIn``
        is one more per-item error, like an invalid pattern. Only a batch over
        ``max_batch``, over a tenant's quota or that the engines might not hold (``room``)
        is refused whole (nothing is stored then). ``results=False``: only the counts and
        the failed items' errors (an import), so no stored item is joined back to its
        row."""
        return self.prepare_many(items, caller, results=results)()

    def prepare_many(
        self, items: Sequence[JsonValue] | Items, caller: Caller, *, results: bool = True
    ) -> Callable[[], BulkResult]:
        """``create_many`` in two steps: the items are validated now, and stored when the
        returned call is made, so an import validates one batch while the store writes the
        one before. Plain items travel as columns and are checked all at once
        (``app.bulk.accept_plain``: it accepts only what the full validation would); the
        rest, one by one, skip the schema object when ``plain`` allows."""
        columns = items if isinstance(items, Items) else Items.of(items)
        max_batch = self.settings.max_batch
        if columns.size > max_batch:
            raise BatchTooLargeError(f"a batch holds at most {max_batch} items")
        result = BulkResult.of(columns.size)
        limits = self._limits
        accepted = accept_plain(columns, caller, limits)
        rest = [(index, columns.item(index, row)) for index, row in accepted.refused]
        rest += columns.others
        valid: list[tuple[int, NewSubscription]] = []
        for index, item in sorted(rest, key=lambda pair: pair[0]):
            new = plain(item, caller, limits)
            if new is None:
                try:
                    new = self._new(parse_item(item), caller)
                except (MatcherError, StoreError, ServiceError) as e:
                    result.fail(index, e.code, e.message)
                    continue
            valid.append((index, new))
        batch = Valid(accepted, valid)

        def store() -> BulkResult:
            if batch.count:
                self.db.writes.run(
                    lambda session: self._store_many(session, batch, caller, result, results)
                )
            return result

        return store

    def _store_many(
        self,
        session: Session,
        batch: Valid,
        caller: Caller,
        result: BulkResult,
        results: bool,
    ) -> Callable[[], None]:
        """The write job of ``create_many``: validated items in, their results (or, without
        ``results``, their counts) into ``result``.

        Which items are new is known only once they are staged, so the quota and the room
        are checked in the write phase; a refusal there rolls back a group, whose other
        writes then run again alone (``store.group_commit``)."""
        repo = SubscriptionRepository(session)
        records = _resolve_groups(repo, batch.records, result)
        grouped = any(new.group for _, new in records)
        plain_rows = batch.plain

        def write() -> None:
            # An expired row awaiting the sweep is gone for its key: created anew.
            keys = stored_keys(records, plain_rows)
            gone = repo.remove_expired_keys(keys, self._clock())
            self._audit(session, EXPIRY, "expire", gone)
            staged = staged_rows([new for _, new in records], [index for index, _ in records])
            added = repo.add_rows(pa.concat_tables([batch.staged, staged]), ids=results or grouped)
            # Only new rows count (a retried batch still answers); raising rolls back.
            self._check_quota(repo, dict.fromkeys(added.created, 0))
            # Each stored item in ord (= batch) order, its record when it has one (a plain
            # row has none: no group, an AMQP topic).
            order = sorted([*plain_rows.at.to_pylist(), *(index for index, _ in records)])
            news = dict(records)
            if self._room is not None:
                made = (
                    order
                    if added.items is None
                    else [index for index, (_, c) in zip(order, added.items, strict=True) if c]
                )  # without per-item results every item counts: the check errs on the safe side
                self._check_room(room_keys(made, news, plain_rows))
            self._audit(session, caller, "bulk_create", added.created)
            if added.items is None:
                result.count(added.count, len(order) - added.count)
                return
            exists = [sub_id for sub_id, created in added.items if not created]
            groups = repo.groups_of(exists) if grouped else {}
            for index, (sub_id, created) in zip(order, added.items, strict=True):
                try:
                    if not created:
                        check_same_group(news.get(index, PLAIN), groups.get(sub_id))
                except StoreError as e:
                    result.fail(index, e.code, e.message)
                    continue
                result.store(index, sub_id, created)

        return write

    def remove(self, sub_id: int, caller: Caller) -> None:
        """Delete one subscription (of the caller's tenant, unless the operator asks);
        ``NotFoundError`` when there is none."""
        _removed(sub_id, self.db.writes.run(self._remove(sub_id, caller)))

    async def remove_async(self, sub_id: int, caller: Caller) -> None:
        """``remove`` for a caller on an event loop (``GroupCommit.run_async``)."""
        _removed(sub_id, await self.db.writes.run_async(self._remove(sub_id, caller)))

    def _remove(self, sub_id: int, caller: Caller) -> Job[bool]:
        """``remove``'s write: whether there was such a row."""

        def check(session: Session) -> Callable[[], bool]:
            def write() -> bool:
                # One statement: the delete says whether there was a row (nothing written
                # otherwise, so the refusal below needs no rollback).
                row = SubscriptionRepository(session).remove(sub_id, tenant=caller.tenant)
                if row is not None:
                    self._audit(session, caller, "delete", {row.tenant: [sub_id]})
                return row is not None

            return write

        return Announced(check, sub_id)

    def remove_subscriber(self, subscriber: str, caller: Caller, tenant: str | None) -> Deleted:
        """Delete every subscription of one subscriber of the tenant, however many."""
        selection = Selection(tenant=caller.tenant_for(tenant), subscriber=subscriber)
        return self._remove_selection(selection, caller, "delete_subscriber", None)

    def remove_selection(self, caller: Caller, selection: Selection) -> Deleted:
        """Delete the tenant's subscriptions ``selection`` selects (what a listing with
        the same filters shows), at most ``max_delete``, the lowest ids first: ``more``
        says whether others remain. A selection of nothing (every row of the default
        tenant) is refused: ``selection_required``."""
        if not selection.given():
            raise InvalidRequestError(
                "name what to delete: at least one of tenant, subscriber, label, group, "
                "pattern_prefix or dialect",
                code="selection_required",
            )
        selection = replace(selection, tenant=caller.tenant_for(selection.tenant))
        return self._remove_selection(selection, caller, "delete", self.settings.max_delete)

    def _remove_selection(
        self, selection: Selection, caller: Caller, action: str, limit: int | None
    ) -> Deleted:
        """One write removing what ``selection`` (of one tenant) selects, audited once as
        ``action`` with every id. Followers apply it from the change log in slices."""

        def check(session: Session) -> Callable[[], Deleted]:
            def write() -> Deleted:
                repo = SubscriptionRepository(session)
                removed, more = repo.remove_selection(selection, limit)
                self._audit(session, caller, action, removed)
                return Deleted(deleted=removed.get(str(selection.tenant), []), more=more)

            return write

        return self.db.writes.run(check)

    def set_expiry(self, sub_id: int, change: ExpiryIn, caller: Caller) -> SubscriptionOut:
        """Set or clear (``expires_at`` null) one subscription's expiry, audited as
        ``update`` and logged as an ``add`` of the row (``set_expiry``), so every replica
        applies it. ``NotFoundError`` when there is none; ``ExpiredError`` when it has
        already expired (it stopped matching at its instant: create it again)."""
        if not change.model_fields_set:
            raise InvalidRequestError(
                "give expires_at (null clears it) or ttl", code="expiry_missing"
            )
        now = self._clock()
        try:
            instant = expiry_at(change.expires_at, change.ttl, now)
        except StoreError as e:
            raise InvalidRequestError(e.message, code=e.code) from e

        def check(session: Session) -> Callable[[], SubscriptionOut | None]:
            repo = SubscriptionRepository(session)
            row = repo.get(sub_id, tenant=caller.tenant)
            if row is None:
                return lambda: None
            if expired(row.expires_at, now):
                raise ExpiredError(
                    f"subscription {sub_id} expired at {row.expires_at}: it no longer "
                    "matches and awaits the sweep; create it again"
                )

            def write() -> SubscriptionOut | None:
                updated = repo.set_expiry(sub_id, instant, tenant=caller.tenant)
                if updated is None:
                    return None
                self._audit(session, caller, "update", {updated.tenant: [sub_id]})
                return subscription_out(updated)

            return write

        updated = self.db.writes.run(check)
        if updated is None:
            raise NotFoundError(f"no subscription {sub_id}")
        return updated

    def sweep_expired(self, limit: int) -> dict[str, list[int]]:
        """Delete at most ``limit`` subscriptions expired by now, through the write path
        (a change each, the tenants' counts moved) with one ``expire`` audit row per
        tenant they belonged to; the ids per tenant. Idempotent across replicas: writers
        are serialized, and a row another replica swept is not found again."""

        def check(session: Session) -> Callable[[], dict[str, list[int]]]:
            def write() -> dict[str, list[int]]:
                removed = SubscriptionRepository(session).remove_expired(self._clock(), limit)
                self._audit(session, EXPIRY, "expire", removed)
                return removed

            return write

        return self.db.writes.run(check)

    # -- audit --------------------------------------------------------------------------

    def _audit(
        self, session: Session, caller: Caller, action: str, ids: dict[str, list[int]]
    ) -> None:
        """One audit row per tenant whose subscriptions ``action`` changed (none when it
        changed nothing), in the change's transaction; now and then, purge the rows past
        their retention in the same transaction (writers are serialized, so one at a time
        reads and moves ``_next_purge``)."""
        now = self._clock()
        repo = AuditRepository(session)
        repo.add(
            [
                AuditEntry(
                    created_at=now,
                    tenant=tenant,
                    action=action,
                    ids=tuple(sorted(changed)),
                    caller_tenant=caller.tenant,
                    caller_name=caller.name,
                    request_id=caller.origin.request_id,
                    address=caller.origin.address,
                )
                for tenant, changed in sorted(ids.items())
                if changed
            ]
        )
        days = self.settings.audit_retention_days
        if days and (self._next_purge is None or now >= self._next_purge):
            repo.purge(now - timedelta(days=days))
            self._next_purge = now + AUDIT_PURGE_EVERY

    # -- rules --------------------------------------------------------------------------

    def _new(self, item: SubscriptionIn, caller: Caller) -> NewSubscription:
        """The validated record of ``item`` (its fields by name: a new column is a field of
        both, not an edit here)."""
        for name in _NOT_APPLICABLE[item.kind]:
            if getattr(item, name) not in (None, ""):
                raise NotApplicableError(
                    f"{name} does not apply to a {item.kind} subscription",
                    code=f"{name}_not_applicable",
                )
        values = {name: getattr(item, name) for name in _NEW_FIELDS if name != "expires_at"}
        if item.expires_at is not None or item.ttl is not None:
            try:
                values["expires_at"] = expiry_at(item.expires_at, item.ttl, self._clock())
            except StoreError as e:
                raise InvalidRequestError(e.message, code=e.code) from e
        values["tenant"] = caller.tenant_for(item.tenant)
        values["dialect"] = item.dialect or "amqp"
        if item.criteria is not None:
            values["criteria"] = tuple(item.criteria.items())
        return validate(NewSubscription(**values), self._limits)

    def _refusal(
        self, repo: SubscriptionRepository, new: NewSubscription
    ) -> ServiceError | MatcherError | None:
        """The refusal a new row ``new`` would get (the quota, the engines' room), if any;
        the group's policy is not looked at (it does not change either)."""
        try:
            self._check_quota(repo, {new.tenant: 1})
            self._check_room(topic_keys([new]))
        except (ServiceError, MatcherError) as e:
            return e
        return None

    def _check_room(self, keys: Iterable[tuple[str, str, str]]) -> None:
        """Refuse (CapacityError, 403) new topic subscriptions, given as (tenant, dialect,
        pattern), that the engines might not hold (``room``)."""
        if self._room is not None:
            self._room(keys)

    def _check_quota(self, repo: SubscriptionRepository, adding: dict[str, int]) -> None:
        """Refuse when a tenant would hold more than its quota after this write (``adding``
        more; 0 once the write's rows are in). One row per tenant (``tenant_usage``), read
        inside the write transaction, so concurrent writers cannot both slip under it."""
        quota = self.settings.tenant_quota
        for tenant, count in adding.items():
            held = repo.usage(tenant) + count
            if held > quota:
                raise QuotaExceededError(
                    f"tenant {tenant!r} would hold {held} subscriptions; its quota is {quota}"
                )


def _removed(sub_id: int, found: bool) -> None:
    if not found:
        raise NotFoundError(f"no subscription {sub_id}")


def _with_policies(repo: SubscriptionRepository, items: Sequence[NewSubscription]) -> GroupPolicies:
    """The rule of ``store.groups``, primed with the stored policies of the items' groups."""
    keys = {(new.tenant, new.group) for new in items if new.group is not None}
    return GroupPolicies(repo.group_policies(keys) if keys else None)


def _resolve_groups(
    repo: SubscriptionRepository, valid: list[tuple[int, NewSubscription]], result: BulkResult
) -> list[tuple[int, NewSubscription]]:
    """Each item with its group's policy; an item in conflict fails in ``result``
    (``group_policy_conflict``)."""
    if not any(new.group is not None for _, new in valid):
        return valid
    policies = _with_policies(repo, [new for _, new in valid])
    resolved: list[tuple[int, NewSubscription]] = []
    for index, new in valid:
        try:
            resolved.append((index, policies.resolve(new)))
        except StoreError as e:
            result.fail(index, e.code, e.message)
    return resolved


#: Fields each kind ignores: given anyway, they are refused (a headers subscription with a
#: pattern or an MQTT dialect once returned an existing headers row, silently).
_NOT_APPLICABLE: Final = {"headers": ("pattern", "dialect"), "topic": ("criteria", "mode")}
