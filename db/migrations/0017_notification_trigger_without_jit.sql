-- Up Migration

-- A statement writing more than 100 rows spent over a second in the
-- notification trigger, even with no subscription at all: the planner's
-- estimates for the trigger's query (a transition table of unknown size joined
-- with the terms and candidates) run to millions of rows, past jit_above_cost,
-- so PostgreSQL compiled the query with LLVM first — 1.2 s of inlining,
-- optimization and emission to run a query that takes under a millisecond.
-- Found by `npm run cli -- load` (811 resources/s; EXPLAIN ANALYZE of one
-- 1,000-row insert: "JIT … Total 1185 ms"). The trigger runs once per
-- statement and never long enough for JIT to pay off: it runs without it.
-- (A later CREATE OR REPLACE of the function must repeat this setting.)

ALTER FUNCTION webhook.enqueue_notifications() SET jit = off;

-- Down Migration

ALTER FUNCTION webhook.enqueue_notifications() RESET jit;
