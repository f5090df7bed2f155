/**
 * What search and subscription matching cost on a realistic table, with the
 * predicates exactly as the engine compiles them (src/search/jsonpath.ts).
 *
 * 1. Search: 100,000 Appointments (8 statuses, 500 service types, a Patient
 *    and a Practitioner per appointment, starts over 2026, an identifier)
 *    plus the Patients and Practitioners they refer to; p50/p95 of
 *    searchResources() for the usual query kinds, and the plans (and index
 *    used) of a selective token search and of a patient reference search.
 * 2. Matching: a stand-in for the future dispatcher, a statement-level AFTER
 *    INSERT trigger that matches the statement's rows against N stored
 *    compiled criteria in one set-based INSERT ... SELECT, in two join
 *    shapes (a plain join, run as a hash join with its sides chosen by the
 *    planner; and subscriptions forced outer by LATERAL ... OFFSET 0); the cost of a
 *    20,000-row bulk insert with N = 1, 100, 1000 against none, then a
 *    per-kind breakdown of what one jsonb_path_match() evaluation costs.
 *
 * Runs on DATABASE_URL's server, or on an embedded PostgreSQL, in a scratch
 * database it drops afterwards.
 *
 *   node scripts/bench-search.ts [appointments] [bulk rows] [rounds] [runs per query]
 */
import { cpus } from 'node:os';
import type pg from 'pg';
import { connectDatabase } from '../src/db/database.ts';
import { compileCriteria } from '../src/search/criteria.ts';
import { compileFilters } from '../src/search/jsonpath.ts';
import { parseSearchQuery } from '../src/search/query.ts';
import { searchResources } from '../src/search/search.ts';
import { createScratchDatabase } from './support/scratch-database.ts';
import { percentile } from './support/statistics.ts';

const appointmentCount = Number(process.argv[2] ?? 100_000);
const bulkRows = Number(process.argv[3] ?? 20_000);
const rounds = Number(process.argv[4] ?? 3);
const runs = Number(process.argv[5] ?? 200);
const warmUpRuns = 20;
const patientCount = 20_000;
const practitionerCount = 500;
const serviceCodes = 500;
const subscriptionCounts = [1, 100, 1000];

const serviceSystem = 'http://example.org/service';
const identifierSystem = 'http://example.org/appointment-id';
const statuses = ['booked', 'fulfilled', 'cancelled', 'proposed', 'pending', 'noshow', 'arrived', 'checked-in'];

// --- data --------------------------------------------------------------------

/**
 * Appointments `first`..`last` as content for INSERT INTO fhir.resources,
 * deterministic (hashes of n, no random()): status skewed the way a clinic's
 * is (35% booked, 30% fulfilled, ... 2% checked-in), one of 500 service
 * types, one of 20,000 patients and one of 500 practitioners, a 30-minute
 * slot on a day of 2026 between 08:00 and 18:00 UTC.
 */
function appointments(first: number, last: number, idPrefix: string): string {
  return `
  SELECT jsonb_build_object(
    'resourceType', 'Appointment', 'id', '${idPrefix}' || n,
    'identifier', jsonb_build_array(jsonb_build_object('system', '${identifierSystem}', 'value', 'A' || n)),
    'status', CASE WHEN h1 < 35 THEN 'booked' WHEN h1 < 65 THEN 'fulfilled' WHEN h1 < 75 THEN 'cancelled'
                   WHEN h1 < 83 THEN 'proposed' WHEN h1 < 90 THEN 'pending' WHEN h1 < 95 THEN 'noshow'
                   WHEN h1 < 98 THEN 'arrived' ELSE 'checked-in' END,
    'serviceType', jsonb_build_array(jsonb_build_object('coding', jsonb_build_array(jsonb_build_object(
      'system', '${serviceSystem}', 'code', 'c' || h2 % ${serviceCodes}, 'display', 'Service ' || h2 % ${serviceCodes})))),
    'appointmentType', jsonb_build_object('coding', jsonb_build_array(jsonb_build_object(
      'system', 'http://terminology.hl7.org/CodeSystem/v2-0276', 'code', (ARRAY['ROUTINE', 'FOLLOWUP', 'CHECKUP', 'WALKIN'])[1 + h3 % 4]))),
    'description', 'Appointment ' || n,
    'start', to_char(slot, 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
    'end', to_char(slot + interval '30 minutes', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
    'minutesDuration', 30,
    'created', to_char(slot - interval '14 days', 'YYYY-MM-DD'),
    'participant', jsonb_build_array(
      jsonb_build_object('actor', jsonb_build_object('reference', 'Patient/p' || 1 + h4 % ${patientCount}, 'display', 'Patient ' || 1 + h4 % ${patientCount}),
                         'required', 'required', 'status', 'accepted'),
      jsonb_build_object('actor', jsonb_build_object('reference', 'Practitioner/pr' || 1 + h5 % ${practitionerCount}),
                         'required', 'required', 'status', 'accepted'))) AS content
  FROM (SELECT n, abs(hashint4(n)) % 100 AS h1, abs(hashint4(n + 1000003)) AS h2, abs(hashint4(n + 2000003)) AS h3,
               abs(hashint4(n + 3000017)) AS h4, abs(hashint4(n + 4000037)) AS h5,
               timestamp '2026-01-01 08:00' + abs(hashint4(n + 5000011)) % 365 * interval '1 day'
                                            + abs(hashint4(n + 6000011)) % 40 * interval '15 minutes' AS slot
        FROM generate_series(${first}, ${last}) n) g`;
}

const patients = `
  INSERT INTO fhir.resources (content)
  SELECT jsonb_build_object('resourceType', 'Patient', 'id', 'p' || n, 'active', true,
    'identifier', jsonb_build_array(jsonb_build_object('system', 'http://example.org/mrn', 'value', 'MRN' || n)),
    'name', jsonb_build_array(jsonb_build_object('family', 'Family' || n % 997, 'given', jsonb_build_array('Given' || n % 313))),
    'gender', (ARRAY['male', 'female'])[1 + n % 2], 'birthDate', to_char(date '1940-01-01' + n * 37 % 25000, 'YYYY-MM-DD'))
  FROM generate_series(1, ${patientCount}) n`;

const practitioners = `
  INSERT INTO fhir.resources (content)
  SELECT jsonb_build_object('resourceType', 'Practitioner', 'id', 'pr' || n, 'active', true,
    'name', jsonb_build_array(jsonb_build_object('family', 'Doctor' || n, 'prefix', jsonb_build_array('Dr'))))
  FROM generate_series(1, ${practitionerCount}) n`;

/**
 * The relative reference of an existing Patient (`Patient/p1` .. `Patient/p${patientCount}`)
 * or Practitioner (`Practitioner/pr1` .. `Practitioner/pr${practitionerCount}`) for any integer:
 * the engine matches relative references exactly, so criteria must name ids the data holds.
 */
const patientReference = (n: number) => `Patient/p${1 + (((n % patientCount) + patientCount) % patientCount)}`;
const practitionerReference = (n: number) => `Practitioner/pr${1 + (((n % practitionerCount) + practitionerCount) % practitionerCount)}`;

// --- search ------------------------------------------------------------------

/** A tiny seeded PRNG (mulberry32), so every run asks the same questions. */
function prng(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const random = prng(42);
const pick = (count: number) => Math.floor(random() * count);

/** The search kinds; `token` marks those the token-search target (p95 < 20 ms) applies to. */
const searchKinds: { label: string; token: boolean; query: () => string }[] = [
  { label: 'status=booked', token: true, query: () => 'status=booked' },
  { label: 'status=(any of 8)', token: true, query: () => `status=${statuses[pick(statuses.length)]}` },
  { label: `service-type=${serviceSystem}\\|cN`, token: true, query: () => `service-type=${encodeURIComponent(`${serviceSystem}|c${pick(serviceCodes)}`)}` },
  { label: `identifier=${identifierSystem}\\|AN`, token: true, query: () => `identifier=${encodeURIComponent(`${identifierSystem}|A${1 + pick(appointmentCount)}`)}` },
  { label: 'patient=Patient/pN', token: false, query: () => `patient=${patientReference(pick(patientCount))}` },
  { label: 'status=booked&_include=Appointment:patient', token: true, query: () => 'status=booked&_include=Appointment:patient' },
];

type Figure = { label: string; token: boolean; p50: number; p95: number; rows: number };

function median(values: number[]): number {
  return percentile(values, 0.5);
}

const ms = (value: number) => (value >= 100 ? value.toFixed(0) : value.toFixed(value >= 10 ? 1 : 2));

// --- matching ----------------------------------------------------------------

/**
 * The i-th subscription of a mix weighted the way a webhook service's are:
 * mostly narrow (one patient, one practitioner, one service type), a few
 * broad ones (a status, a date range) and, one in twenty, everything of the
 * type with or without an _include. Values differ between subscriptions;
 * references name existing Patients and Practitioners only.
 */
type Template = { kind: string; criteria: (k: number) => string };

const month = (k: number) => `2026-${String(1 + (k % 12)).padStart(2, '0')}`;

const subscriptionMix: Template[] = [
  { kind: 'status=booked', criteria: () => 'Appointment?status=booked' },
  { kind: 'patient', criteria: (k) => `Appointment?patient=${patientReference(k * 7919)}` },
  { kind: 'service-type', criteria: (k) => `Appointment?service-type=${serviceSystem}|c${(k * 37) % serviceCodes}` },
  { kind: 'practitioner', criteria: (k) => `Appointment?practitioner=${practitionerReference(k * 13)}` },
  { kind: 'patient', criteria: (k) => `Appointment?patient=${patientReference(k * 7919 + 1)}` },
  { kind: 'status=cancelled,noshow', criteria: () => 'Appointment?status=cancelled,noshow' },
  { kind: 'date=geYYYY-MM-DD', criteria: (k) => `Appointment?date=ge${month(k)}-01` },
  { kind: 'patient', criteria: (k) => `Appointment?patient=${patientReference(k * 7919 + 2)}` },
  { kind: 'service-type&status', criteria: (k) => `Appointment?service-type=${serviceSystem}|c${(k * 41 + 3) % serviceCodes}&status=booked` },
  { kind: 'practitioner', criteria: (k) => `Appointment?practitioner=${practitionerReference(k * 13 + 7)}` },
  { kind: '(no filter)', criteria: () => 'Appointment' },
  { kind: 'patient', criteria: (k) => `Appointment?patient=${patientReference(k * 7919 + 3)}` },
  { kind: 'identifier', criteria: (k) => `Appointment?identifier=${identifierSystem}|A${1 + ((k * 101) % bulkRows)}` },
  { kind: 'patient&status', criteria: (k) => `Appointment?patient=${patientReference(k * 7919 + 4)}&status=booked` },
  { kind: '_include only', criteria: () => 'Appointment?_include=Appointment:patient' },
  { kind: 'service-type', criteria: (k) => `Appointment?service-type=${serviceSystem}|c${(k * 37 + 11) % serviceCodes}` },
  { kind: 'actor', criteria: (k) => `Appointment?actor=${practitionerReference(k * 17 + 5)}` },
  { kind: 'patient', criteria: (k) => `Appointment?patient=${patientReference(k * 7919 + 5)}` },
  { kind: 'date=lt&status', criteria: (k) => `Appointment?date=lt${month(k)}-15&status=booked` },
  { kind: 'appointment-type', criteria: (k) => `Appointment?appointment-type=${['ROUTINE', 'FOLLOWUP', 'CHECKUP', 'WALKIN'][k % 4]}` },
];

type Subscription = { id: number; kind: string; criteria: string; resourceType: string; match: string | null };

/** The first `count` subscriptions of the mix, as compiled by the engine. */
function subscriptionsOf(count: number): Subscription[] {
  return Array.from({ length: count }, (_, i) => {
    const template = subscriptionMix[i % subscriptionMix.length]!;
    const criteria = template.criteria(i);
    const compiled = compileCriteria(criteria);
    return { id: i + 1, kind: template.kind, criteria, resourceType: compiled.resourceType, match: compiled.match };
  });
}

/** The dispatcher stand-in, as briefed: one set-based INSERT ... SELECT, join order left to the planner. */
const matchingTrigger = `
  CREATE FUNCTION bench_match_rows() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    INSERT INTO bench_matches
    SELECT s.id, r.id, r.version_id
      FROM new_rows r JOIN bench_subscriptions s ON s.resource_type = r.resource_type
     WHERE s.match IS NULL OR jsonb_path_match(r.content, s.match);
    RETURN NULL;
  END
  $$`;

/** The same, with the subscriptions forced to be the outer loop (OFFSET 0 keeps the LATERAL subquery from being flattened). */
const matchingTriggerBySubscription = `
  CREATE FUNCTION bench_match_rows_by_subscription() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    INSERT INTO bench_matches
    SELECT s.id, m.id, m.version_id
      FROM bench_subscriptions s
     CROSS JOIN LATERAL (SELECT r.id, r.version_id FROM new_rows r
                          WHERE r.resource_type = s.resource_type
                            AND (s.match IS NULL OR jsonb_path_match(r.content, s.match))
                         OFFSET 0) m;
    RETURN NULL;
  END
  $$`;

async function fillSubscriptions(client: pg.ClientBase, table: string, subscriptions: Omit<Subscription, 'criteria'>[]): Promise<void> {
  await client.query(`TRUNCATE ${table}`);
  await client.query(
    `INSERT INTO ${table} (id, kind, resource_type, match)
     SELECT * FROM unnest($1::int[], $2::text[], $3::text[], $4::jsonpath[])`,
    [subscriptions.map((s) => s.id), subscriptions.map((s) => s.kind), subscriptions.map((s) => s.resourceType), subscriptions.map((s) => s.match)],
  );
  await client.query(`ANALYZE ${table}`);
}

async function timed(client: pg.ClientBase, statement: string): Promise<number> {
  const started = performance.now();
  await client.query(statement);
  return performance.now() - started;
}

// --- main --------------------------------------------------------------------

/** The two join shapes of the matching trigger. */
type Shape = 'plain join' | 'subscriptions outer';
const shapeLabels: Record<Shape, string> = {
  'plain join': 'plain join (hash join, sides chosen by the planner)',
  'subscriptions outer': 'subscriptions forced outer (LATERAL ... OFFSET 0)',
};
const shapeFunctions: Record<Shape, string> = {
  'plain join': 'bench_match_rows',
  'subscriptions outer': 'bench_match_rows_by_subscription',
};

/** Which side of the trigger's join is the outer loop, read from its plan: a hash join probes with its outer side and hashes the other. */
function outerLoopOf(plan: string | undefined): string {
  if (plan === undefined) return '(plan not logged)';
  const hashed = /->\s+Hash\s+\([^\n]*\n\s*->\s+(Named Tuplestore Scan|Seq Scan on bench_subscriptions)/.exec(plan)?.[1];
  if (plan.includes('Hash Join') && hashed) return hashed === 'Named Tuplestore Scan' ? 'hash join: subscriptions outer, rows hashed' : 'hash join: rows outer, subscriptions hashed';
  if (/Nested Loop[^\n]*\n\s*->\s+Seq Scan on bench_subscriptions/.test(plan)) return 'nested loop: subscriptions outer';
  if (/Nested Loop[^\n]*\n\s*->\s+Named Tuplestore Scan/.test(plan)) return 'nested loop: rows outer';
  return '(see plan)';
}

type MatchingResult = { label: string; count: number; shape: Shape | null; time: number; matches: number; plan?: string };

async function main(): Promise<void> {
  const scratch = await createScratchDatabase();
  const database = connectDatabase(scratch.url, (error) => console.error(error));
  const { pool, db } = database;
  const summary: [string, string][] = [];
  try {
    const version = (await pool.query<{ server_version: string }>('SHOW server_version')).rows[0]!.server_version;
    const jit = (await pool.query<{ jit: string }>('SHOW jit')).rows[0]!.jit;
    const machine = `${cpus().length} cores (${cpus()[0]?.model.trim() ?? 'unknown CPU'})`;
    console.log(`PostgreSQL ${version} (jit ${jit}), ${machine}\n`);

    // ---------------------------------------------------------------- load
    const started = performance.now();
    await pool.query(patients);
    await pool.query(practitioners);
    for (let first = 1; first <= appointmentCount; first += 20_000) {
      const last = Math.min(appointmentCount, first + 19_999);
      await pool.query(`INSERT INTO fhir.resources (content) SELECT content FROM (${appointments(first, last, 'appt-')}) a`);
    }
    await pool.query('VACUUM ANALYZE fhir.resources');
    console.log(
      `Loaded ${patientCount} Patients, ${practitionerCount} Practitioners, ${appointmentCount} Appointments ` +
        `in ${((performance.now() - started) / 1000).toFixed(1)} s (then VACUUM ANALYZE)`,
    );

    // Every reference the subscription mix names must exist: the engine matches relative references exactly.
    const named = [...new Set(subscriptionsOf(Math.max(...subscriptionCounts)).flatMap((s) => s.criteria.match(/(?:Patient|Practitioner)\/[A-Za-z0-9.-]+/g) ?? []))];
    const found = await pool.query<{ count: string }>(
      `SELECT count(*) FROM fhir.resources WHERE resource_type IN ('Patient', 'Practitioner') AND resource_type || '/' || id = ANY($1::text[])`,
      [named],
    );
    if (Number(found.rows[0]!.count) !== named.length) throw new Error(`The subscription mix names ${named.length} references, only ${found.rows[0]!.count} exist`);
    console.log(`The subscription mix names ${named.length} distinct Patient/Practitioner references, all of them existing.\n`);

    // ---------------------------------------------------------------- 1. search
    console.log(`## 1. Search on ${appointmentCount} Appointments (searchResources, _count 20; ${warmUpRuns} warm-up + ${runs} timed runs each)\n`);
    console.log('| query | p50 | p95 | matches on page (mean) |');
    console.log('|---|---:|---:|---:|');
    const figures: Figure[] = [];
    for (const kind of searchKinds) {
      const times: number[] = [];
      let rows = 0;
      for (let run = 0; run < warmUpRuns + runs; run++) {
        const rawQuery = kind.query();
        const begin = performance.now();
        const page = await searchResources(db, parseSearchQuery('Appointment', rawQuery));
        const elapsed = performance.now() - begin;
        if (run >= warmUpRuns) {
          times.push(elapsed);
          rows += page.matches.length;
        }
      }
      const figure = { label: kind.label, token: kind.token, p50: percentile(times, 0.5), p95: percentile(times, 0.95), rows: rows / runs };
      figures.push(figure);
      console.log(`| \`${figure.label}\` | ${ms(figure.p50)} ms | ${ms(figure.p95)} ms | ${figure.rows.toFixed(1)} |`);
      summary.push([`search \`${figure.label}\` p50 / p95`, `${ms(figure.p50)} / ${ms(figure.p95)} ms`]);
    }

    // The statement searchResources() runs for a first page sorted by _lastUpdated, with the same parameters.
    const explain = async (title: string, rawQuery: string): Promise<string> => {
      const predicate = compileFilters(parseSearchQuery('Appointment', rawQuery).filters)!;
      const plan = await pool.query<{ 'QUERY PLAN': string }>(
        `EXPLAIN (ANALYZE, BUFFERS) SELECT content FROM fhir.resources
          WHERE resource_type = $1 AND content @@ $2::jsonpath AND true ORDER BY last_updated, id LIMIT $3`,
        ['Appointment', predicate, 21],
      );
      const text = plan.rows.map((row) => row['QUERY PLAN']).join('\n');
      const gin = text.includes('resources_content');
      const byDate = text.includes('resources_by_type_and_last_updated');
      const used = gin && byDate ? 'both indexes' : gin ? 'GIN index resources_content' : byDate ? '(resource_type, last_updated, id) index' : 'no index (sequential scan)';
      console.log(`\n${title}: \`Appointment?${rawQuery}\`, predicate \`${predicate}\`\n\n\`\`\`\n${text}\n\`\`\`\n→ uses ${used}`);
      return used;
    };
    const tokenPlan = await explain('EXPLAIN (ANALYZE, BUFFERS) of the selective token search', `service-type=${encodeURIComponent(`${serviceSystem}|c42`)}`);
    summary.push(['index used by `service-type=…|c42`', tokenPlan]);
    const patientPlan = await explain('EXPLAIN (ANALYZE, BUFFERS) of the patient reference search', 'patient=Patient/p26');
    summary.push(['index used by `patient=Patient/p26`', patientPlan]);

    // ---------------------------------------------------------------- 2. matching
    const client = await pool.connect();
    let results: MatchingResult[];
    try {
      results = await matching(client, summary);
    } finally {
      client.release();
    }

    // ---------------------------------------------------------------- targets
    const tokenFigures = figures.filter((figure) => figure.token);
    const worstToken = tokenFigures.reduce((worst, figure) => (figure.p95 > worst.p95 ? figure : worst));
    summary.push([
      'target: token search p95 < 20 ms',
      `${worstToken.p95 < 20 ? 'met' : 'NOT met'} (worst of ${tokenFigures.length} token searches: \`${worstToken.label}\` ${ms(worstToken.p95)} ms)`,
    ]);
    const baseline = results.find((result) => result.count === 0)!.time;
    for (const shape of Object.keys(shapeLabels) as Shape[]) {
      const result = results.find((candidate) => candidate.count === 100 && candidate.shape === shape);
      if (!result) continue;
      const ratio = result.time / baseline;
      summary.push([
        `target: N = 100 within 3× of no matching, ${shapeLabels[shape]}`,
        `${ratio <= 3 ? 'met' : 'NOT met'} (${ratio.toFixed(2)}×: ${result.time.toFixed(0)} ms against ${baseline.toFixed(0)} ms)`,
      ]);
    }

    // ---------------------------------------------------------------- summary
    console.log(`\n## Summary (PostgreSQL ${version}, jit ${jit}; ${machine})\n`);
    console.log('| figure | value |');
    console.log('|---|---:|');
    for (const [label, value] of summary) console.log(`| ${label} | ${value} |`);
  } finally {
    await database.close();
    await scratch.drop();
  }
}

async function matching(client: pg.PoolClient, summary: [string, string][]): Promise<MatchingResult[]> {
  console.log(`\n## 2. Matching ${bulkRows} inserted Appointments (ONE statement) against N subscriptions\n`);
  await client.query('TRUNCATE fhir.resources, fhir.resource_history');
  await client.query('CREATE TABLE bench_subscriptions (id int PRIMARY KEY, kind text NOT NULL, resource_type text NOT NULL, match jsonpath)');
  await client.query('CREATE TABLE bench_matches (subscription_id int NOT NULL, resource_id text NOT NULL, version_id int NOT NULL)');
  await client.query(matchingTrigger);
  await client.query(matchingTriggerBySubscription);
  const triggers = await client.query<{ tgname: string }>(
    `SELECT tgname FROM pg_trigger WHERE tgrelid = 'fhir.resources'::regclass AND NOT tgisinternal ORDER BY tgname`,
  );
  console.log(`Triggers already on fhir.resources (part of every figure): ${triggers.rows.map((row) => row.tgname).join(', ')}`);
  const insert = `INSERT INTO fhir.resources (content) SELECT content FROM (${appointments(1, bulkRows, 'load-')}) a`;

  // The plan the trigger's INSERT ... SELECT gets, logged by auto_explain during each warm-up round.
  const plans: string[] = [];
  const onNotice = (notice: { message?: string }) => {
    if (notice.message?.includes('bench_matches')) plans.push(notice.message);
  };
  const autoExplain = await client.query(`LOAD 'auto_explain'`).then(
    () => true,
    () => false,
  );

  const mix = subscriptionsOf(Math.max(...subscriptionCounts));
  const kinds = new Map<string, number>();
  for (const subscription of mix) kinds.set(subscription.kind, (kinds.get(subscription.kind) ?? 0) + 1);
  console.log(`Subscription mix (N = ${mix.length}; the first N are used for smaller N): ` +
    [...kinds].map(([kind, count]) => `${kind} ${count}`).join(', '));

  const configurations: { count: number; shape: Shape | null }[] = [
    { count: 0, shape: null },
    ...(Object.keys(shapeLabels) as Shape[]).flatMap((shape) => subscriptionCounts.map((count) => ({ count, shape }))),
  ];
  const results: MatchingResult[] = [];
  for (const { count, shape } of configurations) {
    await client.query('DROP TRIGGER IF EXISTS bench_match ON fhir.resources');
    if (shape !== null) {
      await fillSubscriptions(client, 'bench_subscriptions', subscriptionsOf(count));
      await client.query(`CREATE TRIGGER bench_match AFTER INSERT ON fhir.resources REFERENCING NEW TABLE AS new_rows
                          FOR EACH STATEMENT EXECUTE FUNCTION ${shapeFunctions[shape]}()`);
    }
    const times: number[] = [];
    let matches = 0;
    let plan: string | undefined;
    // Round 0 warms up (and logs the trigger's plan); rounds 1..rounds are timed.
    for (let round = 0; round <= rounds; round++) {
      await client.query('TRUNCATE fhir.resources, fhir.resource_history, bench_matches');
      const logPlan = round === 0 && autoExplain && shape !== null;
      if (logPlan) {
        plans.length = 0;
        client.on('notice', onNotice);
        await client.query(`SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on; SET client_min_messages = log`);
      }
      const time = await timed(client, insert);
      if (logPlan) {
        await client.query(`SET auto_explain.log_min_duration = -1; SET client_min_messages = notice`);
        client.off('notice', onNotice);
        plan = plans[0];
      }
      if (round > 0) times.push(time);
      matches = Number((await client.query<{ count: string }>('SELECT count(*) FROM bench_matches')).rows[0]!.count);
    }
    const label = shape === null ? 'no matching trigger' : `N = ${count}, ${shapeLabels[shape]}`;
    results.push({ label, count, shape, time: median(times), matches, ...(plan === undefined ? {} : { plan }) });
    console.log(`  ${label}: ${times.map((t) => `${t.toFixed(0)} ms`).join(', ')}`);
  }

  // Both shapes must find the same matches.
  for (const count of subscriptionCounts) {
    const [first, second] = results.filter((result) => result.count === count);
    if (first && second && first.matches !== second.matches) {
      console.log(`(WARNING: N = ${count}: ${first.matches} matches with the ${first.shape}, ${second.matches} with the ${second.shape})`);
    }
  }

  const baseline = results[0]!.time;
  console.log(`\nBulk insert of ${bulkRows} Appointments, median of ${rounds} rounds after a warm-up round:\n`);
  console.log('| subscriptions | join shape | outer loop (from the plan) | insert | ratio to no matching | matches written | extra per row per subscription |');
  console.log('|---|---|---|---:|---:|---:|---:|');
  for (const result of results) {
    const extra = ((result.time - baseline) * 1000) / (bulkRows * (result.count || 1));
    const perEvaluation = result.count === 0 ? '' : extra <= 0 ? '≈ 0 (within noise)' : `${extra.toFixed(2)} µs`;
    const ratio = `${(result.time / baseline).toFixed(2)}x`;
    console.log(
      `| ${result.count === 0 ? 'none (no trigger)' : `N = ${result.count}`} | ${result.shape === null ? '' : shapeLabels[result.shape]} | ` +
        `${result.shape === null ? '' : outerLoopOf(result.plan)} | ` +
        `${result.time.toFixed(0)} ms | ${ratio} | ${result.matches} | ${perEvaluation} |`,
    );
    const outer = result.shape === 'plain join' ? `; ${outerLoopOf(result.plan)}` : '';
    summary.push([`bulk insert ${bulkRows} rows, ${result.label}`, `${result.time.toFixed(0)} ms (${ratio}, ${result.matches} matches${outer})`]);
  }
  for (const result of results) {
    if (result.plan) console.log(`\nPlan of the trigger's INSERT ... SELECT for ${result.label} (auto_explain):\n\`\`\`\n${result.plan.replace(/^duration: [^\n]*\n/, '')}\n\`\`\``);
  }

  await breakdown(client, summary);
  return results;
}

/**
 * Where the time goes: one jsonb_path_match() evaluation per kind of
 * criteria, measured on a sample of stored rows against 100 subscriptions of
 * that kind (distinct values), with the rows as the outer loop (as a hash
 * join on resource_type runs it) and with the subscriptions as the outer loop
 * (as the LATERAL ... OFFSET 0 trigger runs it).
 */
async function breakdown(client: pg.PoolClient, summary: [string, string][]): Promise<void> {
  const sampleRows = 2000;
  const perKind = 100;
  console.log(`\n### Breakdown: cost of one jsonb_path_match() evaluation (${sampleRows} stored rows × ${perKind} subscriptions of one kind)\n`);
  await client.query(`CREATE TABLE bench_sample AS SELECT resource_type, id, version_id, content FROM fhir.resources ORDER BY id LIMIT ${sampleRows}`);
  await client.query('ANALYZE bench_sample');
  await client.query('CREATE TABLE bench_kind (id int PRIMARY KEY, kind text NOT NULL, resource_type text NOT NULL, match jsonpath)');
  await client.query('SET jit = off');

  const rowsOuter = `SELECT count(*) FROM bench_sample r JOIN bench_kind s ON s.resource_type = r.resource_type
                     WHERE s.match IS NULL OR jsonb_path_match(r.content, s.match)`;
  const subscriptionsOuter = `SELECT count(*) FROM bench_kind s CROSS JOIN LATERAL (
                                SELECT 1 FROM bench_sample r WHERE r.resource_type = s.resource_type
                                   AND (s.match IS NULL OR jsonb_path_match(r.content, s.match)) OFFSET 0) m`;
  const perEvaluation = (time: number, evaluations: number) => (time * 1000) / evaluations;

  console.log(
    'Rows outer: each row meets every subscription in turn (hash join on resource_type, merge and nested-loop joins disabled). ' +
      'Subscriptions outer: one subscription meets every row in turn. Time of count(*) over the join, no INSERT, jit off.\n',
  );
  console.log('| criteria kind (example) | predicate length | rows outer (hash join) | subscriptions outer | matches |');
  console.log('|---|---:|---:|---:|---:|');
  const seen = new Set<string>();
  const templates = subscriptionMix.filter((template) => !seen.has(template.kind) && seen.add(template.kind));
  const costs: { kind: string; rowsOuter: number; subscriptionsOuter: number }[] = [];
  for (const template of templates) {
    const subscriptions = Array.from({ length: perKind }, (_, k) => {
      const compiled = compileCriteria(template.criteria(k));
      return { id: k + 1, kind: template.kind, resourceType: compiled.resourceType, match: compiled.match };
    });
    await fillSubscriptions(client, 'bench_kind', subscriptions);
    await client.query('SET enable_mergejoin = off; SET enable_nestloop = off');
    const plan = (await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${rowsOuter}`)).rows.map((row) => row['QUERY PLAN']).join('\n');
    if (!/Hash Join[\s\S]*Seq Scan on bench_sample[\s\S]*Hash[\s\S]*bench_kind/.test(plan)) console.log(`(unexpected plan for rows-outer:\n${plan})`);
    await client.query(rowsOuter);
    const outerRows = await timed(client, rowsOuter);
    await client.query('RESET enable_mergejoin; RESET enable_nestloop');
    await client.query(subscriptionsOuter);
    const outerSubscriptions = await timed(client, subscriptionsOuter);
    const matches = (await client.query<{ count: string }>(subscriptionsOuter)).rows[0]!.count;
    const evaluations = sampleRows * perKind;
    const cost = { kind: template.kind, rowsOuter: perEvaluation(outerRows, evaluations), subscriptionsOuter: perEvaluation(outerSubscriptions, evaluations) };
    costs.push(cost);
    const example = template.criteria(0).replace(/^Appointment\??/, '') || '(none)';
    console.log(`| ${template.kind} (\`${example}\`) | ${subscriptions[0]!.match?.length ?? 0} | ${cost.rowsOuter.toFixed(2)} µs | ${cost.subscriptionsOuter.toFixed(2)} µs | ${matches} |`);
  }
  for (const cost of costs) summary.push([`one evaluation, ${cost.kind} (rows outer / subscriptions outer)`, `${cost.rowsOuter.toFixed(2)} / ${cost.subscriptionsOuter.toFixed(2)} µs`]);

  // The whole 1000-subscription mix both ways, evaluation only (count, no INSERT).
  await fillSubscriptions(client, 'bench_kind', subscriptionsOf(1000));
  await client.query('SET enable_mergejoin = off; SET enable_nestloop = off');
  await client.query(rowsOuter);
  const mixRowsOuter = await timed(client, rowsOuter);
  await client.query('RESET enable_mergejoin; RESET enable_nestloop');
  await client.query(subscriptionsOuter);
  const mixSubscriptionsOuter = await timed(client, subscriptionsOuter);
  const mixEvaluations = sampleRows * 1000;
  console.log(`\nThe 1000-subscription mix, evaluation only (count(*), no INSERT), ${sampleRows} rows: rows outer ${mixRowsOuter.toFixed(0)} ms ` +
    `(${perEvaluation(mixRowsOuter, mixEvaluations).toFixed(2)} µs/evaluation), subscriptions outer ${mixSubscriptionsOuter.toFixed(0)} ms ` +
    `(${perEvaluation(mixSubscriptionsOuter, mixEvaluations).toFixed(2)} µs/evaluation)`);
  summary.push(['N = 1000 mix, evaluation only, per evaluation (rows outer / subscriptions outer)',
    `${perEvaluation(mixRowsOuter, mixEvaluations).toFixed(2)} / ${perEvaluation(mixSubscriptionsOuter, mixEvaluations).toFixed(2)} µs`]);
  await client.query('RESET jit');
}

await main();
