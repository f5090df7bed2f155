/**
 * What search and subscription matching cost on a realistic table.
 *
 * 1. Search: 100,000 Appointments (8 statuses, 500 service types, a Patient
 *    and a Practitioner per appointment, starts over 2026, an identifier)
 *    plus the 20,000 Patients and 2,000 Practitioners they refer to; p50/p95
 *    of searchResources() for the usual query kinds, chains and _has
 *    included, and the plans (and index used) of two of them.
 * 2. Matching: the real notification trigger (db/migrations), timed on ONE
 *    statement inserting 20,000 Appointments inside a transaction that is
 *    rolled back (so deliveries do not blur it), against no subscription,
 *    1,000 and 10,000 `actor=Practitioner/<id>` subscriptions (with their
 *    match terms, and the 1,000 without, as before migration 0010), and a
 *    realistic mix of 100 with and without 20 chained criteria.
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
const practitionerCount = 2000;
const serviceCodes = 500;

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
const searchKinds: { label: string; token: boolean; query: () => string; type?: string }[] = [
  { label: 'status=booked', token: true, query: () => 'status=booked' },
  { label: 'status=(any of 8)', token: true, query: () => `status=${statuses[pick(statuses.length)]}` },
  { label: `service-type=${serviceSystem}\\|cN`, token: true, query: () => `service-type=${encodeURIComponent(`${serviceSystem}|c${pick(serviceCodes)}`)}` },
  {
    label: `identifier=${identifierSystem}\\|AN`,
    token: true,
    query: () => `identifier=${encodeURIComponent(`${identifierSystem}|A${1 + pick(appointmentCount)}`)}`,
  },
  { label: 'patient=Patient/pN', token: false, query: () => `patient=${patientReference(pick(patientCount))}` },
  { label: 'status=booked&_include=Appointment:patient', token: true, query: () => 'status=booked&_include=Appointment:patient' },
  {
    label: 'patient.identifier=http://example.org/mrn\\|MRNn (chain)',
    token: false,
    query: () => `patient.identifier=${encodeURIComponent(`http://example.org/mrn|MRN${1 + pick(patientCount)}`)}`,
  },
  { label: 'patient.name=FamilyN (chain, a string: no index)', token: false, query: () => `patient.name=Family${pick(997)}` },
  {
    label: `Patient?_has:Appointment:patient:identifier=${identifierSystem}\\|An`,
    token: false,
    type: 'Patient',
    query: () => `_has:Appointment:patient:identifier=${encodeURIComponent(`${identifierSystem}|A${1 + pick(appointmentCount)}`)}`,
  },
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

/** The first `count` criteria of the mix. */
function mixOf(count: number): string[] {
  return Array.from({ length: count }, (_, i) => subscriptionMix[i % subscriptionMix.length]!.criteria(i));
}

/** Chained criteria: through the Patient's identifier, and the Practitioner's name. */
function chainedOf(count: number): string[] {
  return Array.from({ length: count }, (_, k) =>
    k % 2 === 0
      ? `Appointment?patient.identifier=http://example.org/mrn|MRN${1 + ((k * 7919) % patientCount)}`
      : `Appointment?actor:Practitioner.name=Doctor${1 + ((k * 13) % practitionerCount)}`,
  );
}

const actorCriteria = (count: number) => Array.from({ length: count }, (_, k) => `Appointment?actor=Practitioner/pr${k + 1}`);

/**
 * Active subscriptions with these criteria, stored as the API stores them
 * (secrets aside, which matching never reads). Without terms: as if created
 * before migration 0010, evaluated on every row.
 */
async function storeSubscriptions(client: pg.ClientBase, criteria: readonly string[], withTerms: boolean): Promise<void> {
  await client.query('TRUNCATE webhook.subscriptions CASCADE');
  const compiled = criteria.map((text) => compileCriteria(text));
  await client.query(
    `INSERT INTO webhook.subscriptions (status, criteria, resource_type, compiled_criteria, match, match_deleted, related_match, endpoint,
       headers_encrypted, signing_secret_encrypted, secret_is_generated, reason)
     SELECT 'active', criteria, resource_type, compiled, match, match_deleted, related_match, 'https://receiver.example.org/', '\\x00', '\\x00', true, 'bench'
     FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::jsonpath[], $5::jsonpath[], $6::jsonb[])
       AS s(criteria, resource_type, compiled, match, match_deleted, related_match)`,
    [
      // The mix repeats some criteria (status=booked): told apart, as the one-live-subscription-per-criteria rule wants.
      criteria.map((text, index) => `${text} [bench ${index}]`),
      compiled.map((c) => c.resourceType),
      compiled.map((c) => JSON.stringify(withTerms ? c : { ...c, matchTerms: null })),
      compiled.map((c) => c.match),
      compiled.map((c) => c.matchDeleted),
      compiled.map((c) => (c.relatedMatch === null ? null : JSON.stringify(c.relatedMatch))),
    ],
  );
  await client.query('ANALYZE webhook.subscriptions, webhook.subscription_match_terms');
}

async function timed(client: pg.ClientBase, statement: string): Promise<number> {
  const started = performance.now();
  await client.query(statement);
  return performance.now() - started;
}

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
    const named = [...new Set(mixOf(subscriptionMix.length * 50).flatMap((criteria) => criteria.match(/(?:Patient|Practitioner)\/[A-Za-z0-9.-]+/g) ?? []))];
    const found = await pool.query<{ count: string }>(
      `SELECT count(*) FROM fhir.resources WHERE resource_type IN ('Patient', 'Practitioner') AND resource_type || '/' || id = ANY($1::text[])`,
      [named],
    );
    if (Number(found.rows[0]!.count) !== named.length)
      throw new Error(`The subscription mix names ${named.length} references, only ${found.rows[0]!.count} exist`);
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
        const page = await searchResources(db, parseSearchQuery(kind.type ?? 'Appointment', rawQuery));
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
      const used =
        gin && byDate
          ? 'both indexes'
          : gin
            ? 'GIN index resources_content'
            : byDate
              ? '(resource_type, last_updated, id) index'
              : 'no index (sequential scan)';
      console.log(`\n${title}: \`Appointment?${rawQuery}\`, predicate \`${predicate}\`\n\n\`\`\`\n${text}\n\`\`\`\n→ uses ${used}`);
      return used;
    };
    const tokenPlan = await explain('EXPLAIN (ANALYZE, BUFFERS) of the selective token search', `service-type=${encodeURIComponent(`${serviceSystem}|c42`)}`);
    summary.push(['index used by `service-type=…|c42`', tokenPlan]);
    const patientPlan = await explain('EXPLAIN (ANALYZE, BUFFERS) of the patient reference search', 'patient=Patient/p26');
    summary.push(['index used by `patient=Patient/p26`', patientPlan]);

    // ---------------------------------------------------------------- 2. matching
    const client = await pool.connect();
    try {
      await matching(client, summary);
    } finally {
      client.release();
    }

    const tokenFigures = figures.filter((figure) => figure.token);
    const worstToken = tokenFigures.reduce((worst, figure) => (figure.p95 > worst.p95 ? figure : worst));
    summary.push([
      'target: token search p95 < 20 ms',
      `${worstToken.p95 < 20 ? 'met' : 'NOT met'} (worst of ${tokenFigures.length} token searches: \`${worstToken.label}\` ${ms(worstToken.p95)} ms)`,
    ]);
    const chainFigure = figures.find((figure) => figure.label.startsWith('patient.identifier'))!;
    summary.push(['target: chained search p95 ≤ 20 ms', `${chainFigure.p95 <= 20 ? 'met' : 'NOT met'} (\`${chainFigure.label}\` ${ms(chainFigure.p95)} ms)`]);

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

/**
 * The real notification trigger, timed on one INSERT of `bulkRows`
 * Appointments (each naming one of the practitioners) in a transaction rolled
 * back afterwards; median of `rounds` after a warm-up.
 */
async function matching(client: pg.PoolClient, summary: [string, string][]): Promise<void> {
  console.log(`\n## 2. Matching ${bulkRows} inserted Appointments (ONE statement, the real trigger, rolled back) against N subscriptions\n`);
  const insert = `INSERT INTO fhir.resources (content) SELECT content FROM (${appointments(1, bulkRows, 'load-')}) a`;
  const configurations: { label: string; criteria: string[]; withTerms: boolean }[] = [
    { label: 'none', criteria: [], withTerms: true },
    { label: '1,000 actor=Practitioner/<id>', criteria: actorCriteria(1000), withTerms: true },
    { label: '1,000 actor=Practitioner/<id>, without match terms (row by row, as before 0010)', criteria: actorCriteria(1000), withTerms: false },
    { label: '10,000 actor=Practitioner/<id>', criteria: actorCriteria(10_000), withTerms: true },
    { label: '100 of the mix', criteria: mixOf(100), withTerms: true },
    { label: '100: 80 of the mix and 20 chained', criteria: [...mixOf(80), ...chainedOf(20)], withTerms: true },
  ];
  const results: { label: string; time: number; events: number }[] = [];
  for (const { label, criteria, withTerms } of configurations) {
    await storeSubscriptions(client, criteria, withTerms);
    const times: number[] = [];
    let events = 0;
    for (let round = 0; round <= rounds; round++) {
      await client.query('BEGIN');
      const time = await timed(client, insert);
      events = Number((await client.query<{ events: string }>('SELECT count(*) AS events FROM webhook.subscription_events')).rows[0]!.events);
      await client.query('ROLLBACK');
      if (round > 0) times.push(time);
    }
    results.push({ label, time: median(times), events });
    console.log(`  ${label}: ${times.map((t) => `${t.toFixed(0)} ms`).join(', ')} (${events} events)`);
  }
  await client.query('TRUNCATE webhook.subscriptions CASCADE');

  const baseline = results[0]!.time;
  console.log(`\nInsert of ${bulkRows} Appointments, median of ${rounds} rounds after a warm-up round:\n`);
  console.log('| subscriptions | insert | ratio to none | events enqueued |');
  console.log('|---|---:|---:|---:|');
  for (const result of results) {
    const ratio = result.time / baseline;
    console.log(`| ${result.label} | ${result.time.toFixed(0)} ms | ${ratio.toFixed(2)}× | ${result.events} |`);
    summary.push([`insert ${bulkRows} rows, ${result.label}`, `${result.time.toFixed(0)} ms (${ratio.toFixed(2)}×, ${result.events} events)`]);
  }
  const ratioOf = (label: string) => results.find((result) => result.label === label)!.time / baseline;
  const targets: [string, string, number][] = [
    ['1,000 actor subscriptions ≤ 3×', '1,000 actor=Practitioner/<id>', 3],
    ['10,000 actor subscriptions ≤ 5×', '10,000 actor=Practitioner/<id>', 5],
    ['100 subscriptions, 20 chained, ≤ 3×', '100: 80 of the mix and 20 chained', 3],
  ];
  for (const [target, label, bound] of targets) {
    const ratio = ratioOf(label);
    summary.push([`target: ${target}`, `${ratio <= bound ? 'met' : 'NOT met'} (${ratio.toFixed(2)}×)`]);
  }
}

await main();
