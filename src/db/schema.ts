import type { ColumnType, Generated } from 'kysely';

/** A FHIR resource as JSON. */
export type FhirResource = { resourceType: string; id?: string; meta?: Record<string, unknown> } & Record<string, unknown>;

/** Columns the database fills in by default or by trigger. */
type AssignedByDatabase<T> = ColumnType<T, T | undefined, never>;

export interface ResourcesTable {
  resource_type: string;
  id: string;
  version_id: AssignedByDatabase<number>;
  last_updated: AssignedByDatabase<Date>;
  content: ColumnType<FhirResource, FhirResource | string, FhirResource | string>;
}

export interface ResourceHistoryTable {
  resource_type: string;
  id: string;
  version_id: number;
  last_updated: Date;
  is_deletion: boolean;
  content: FhirResource;
}

export interface ApiKeysTable {
  id: Generated<string>;
  name: string;
  key_sha256: string;
  created_at: Generated<Date>;
  revoked_at: Date | null;
}

/** The tables the service reads and writes, for Kysely. */
export interface Database {
  'fhir.resources': ResourcesTable;
  'fhir.resource_history': ResourceHistoryTable;
  'webhook.api_keys': ApiKeysTable;
}
