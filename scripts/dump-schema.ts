/**
 * npm run db:schema: writes db/schema.sql, the service's whole current schema,
 * from a throwaway embedded PostgreSQL with every migration and function
 * applied (the same server test/db/schema.test.ts compares it on, whatever
 * DATABASE_URL says, so that the text does not depend on a server's version).
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { schemaOfFreshDatabase } from './support/fresh-schema.ts';

const file = path.resolve(import.meta.dirname, '../db/schema.sql');
await writeFile(file, await schemaOfFreshDatabase());
console.log(`wrote ${path.relative(process.cwd(), file)}`);
