-- The pipeline's tables. Two local transactions and no distributed one:
-- the producer writes orders + outbox, the consumer writes inbox + effects
-- + projection. Everything deliverycheck checks after a run is read back
-- from here (see FinalRead).

-- The aggregate: one row per order, its version bumped by every change.
CREATE TABLE IF NOT EXISTS orders (
    id         text PRIMARY KEY,
    version    bigint NOT NULL,
    status     text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The outbox, shaped like Debezium's outbox event router convention (id,
-- aggregatetype, aggregateid, type, payload) plus the event's source, the
-- aggregate version it carries, and the relay's published marker. seq is
-- the relay's polling order; it is assigned at insert, not at commit, which
-- is exactly what the high-water-mark relay gets wrong. An event is its
-- (source, id), as in CloudEvents: two sources may use the same id.
CREATE TABLE IF NOT EXISTS outbox (
    seq           bigserial PRIMARY KEY,
    id            text NOT NULL,
    aggregatetype text NOT NULL,
    aggregateid   text NOT NULL,
    type          text NOT NULL,
    payload       text NOT NULL,
    source        text NOT NULL,
    version       bigint NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    published_at  timestamptz,
    -- The W3C traceparent of the producer's span, which the relay
    -- continues (observability.traces); NULL for a row written without
    -- one (a team's transaction that does not bind :traceparent).
    traceparent   text,
    UNIQUE (id, source)
);
-- A database set up before the column existed.
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS traceparent text;
CREATE INDEX IF NOT EXISTS outbox_unpublished ON outbox (seq) WHERE published_at IS NULL;

-- The inbox: one row per event a subscription has taken in. The unique
-- constraint, scoped per consumer, is what turns redelivery into a no-op.
CREATE TABLE IF NOT EXISTS inbox (
    consumer    text NOT NULL,
    source      text NOT NULL,
    event_id    text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, source, event_id)
);

-- The check-then-act variant's inbox: the same columns with no unique
-- constraint, so two concurrent deliveries can both pass the SELECT.
CREATE TABLE IF NOT EXISTS inbox_unchecked (
    consumer    text NOT NULL,
    source      text NOT NULL,
    event_id    text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);

-- The inbox of the known-bad variants keyed by something other than the
-- event's (source, id): inbox-by-id by the id alone, inbox-by-trace by the
-- traceparent's trace id. Unique per consumer like the real one, so what
-- they wrongly treat as one event they really do apply once.
CREATE TABLE IF NOT EXISTS inbox_keyed (
    consumer    text NOT NULL,
    dedupe_key  text NOT NULL,
    source      text NOT NULL,
    event_id    text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, dedupe_key)
);

-- The effect ledger: append-only, deliberately without a unique
-- constraint, so a duplicate effect is visible here and never hidden by
-- the database.
CREATE TABLE IF NOT EXISTS effects (
    seq         bigserial PRIMARY KEY,
    consumer    text NOT NULL,
    source      text NOT NULL,
    event_id    text NOT NULL,
    aggregateid text NOT NULL,
    version     bigint NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- Each consumer's view of each aggregate: the last version it applied.
-- The version guard compares against it.
CREATE TABLE IF NOT EXISTS projection (
    consumer    text NOT NULL,
    aggregateid text NOT NULL,
    version     bigint NOT NULL,
    PRIMARY KEY (consumer, aggregateid)
);

-- Poison events, with why and after how many attempts they were given up.
CREATE TABLE IF NOT EXISTS dead_letters (
    seq         bigserial PRIMARY KEY,
    consumer    text NOT NULL,
    source      text NOT NULL,
    event_id    text NOT NULL,
    aggregateid text NOT NULL,
    version     bigint NOT NULL,
    reason      text NOT NULL,
    attempts    int NOT NULL,
    metadata    text NOT NULL,
    at          timestamptz NOT NULL DEFAULT now()
);

-- Each relay's last poll that found nothing to publish. The drain waits
-- until every relay has had one after the producers stopped: only then has
-- the relay, by its own logic, nothing left to do (a relay stuck retrying a
-- broken broker never gets there, and the drain reports it did not finish).
CREATE TABLE IF NOT EXISTS relay_idle (
    process   text PRIMARY KEY,
    polled_at timestamptz NOT NULL
);
