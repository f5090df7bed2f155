import { shownEndpoint } from '../channels/channel.ts';
import type { SecretBox } from './secrets.ts';

/** Whether an endpoint carries credentials: a user, a password or a query (what shownEndpoint masks). */
function carriesCredentials(endpoint: string): boolean {
  const url = URL.parse(endpoint);
  return url === null || url.username !== '' || url.password !== '' || url.search !== '';
}

/** The endpoint as webhook.subscriptions.endpoint holds it: shown, when it carries credentials (migration 0015). */
export function storedEndpoint(endpoint: string): string {
  return carriesCredentials(endpoint) ? shownEndpoint(endpoint) : endpoint;
}

/** The endpoint's columns: as shown, and the whole of it encrypted when it carries credentials. */
export function endpointColumns(endpoint: string, box: SecretBox): { endpoint: string; endpoint_encrypted: Buffer | null } {
  return carriesCredentials(endpoint) ? { endpoint: shownEndpoint(endpoint), endpoint_encrypted: box.seal(endpoint) } : { endpoint, endpoint_encrypted: null };
}

/** The whole endpoint, from its columns. */
export function wholeEndpoint(row: { endpoint: string; endpoint_encrypted: Buffer | null }, box: SecretBox): string {
  return row.endpoint_encrypted === null ? row.endpoint : box.open(row.endpoint_encrypted);
}
