import type { SecretBox } from './secrets.ts';

/**
 * An endpoint as it may be shown (attempt errors, alert e-mails, logs):
 * without the user and password of its URL, and with the values of its query
 * masked, where tokens are often put.
 */
export function shownEndpoint(endpoint: string): string {
  try {
    const url = new URL(endpoint);
    if (url.username !== '' || url.password !== '') {
      url.username = '***';
      url.password = url.password === '' ? '' : '***';
    }
    for (const name of [...new Set(url.searchParams.keys())]) url.searchParams.set(name, '***');
    return url.toString().replaceAll('%2A%2A%2A', '***');
  } catch {
    return '(an endpoint that is not a URL)';
  }
}

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
