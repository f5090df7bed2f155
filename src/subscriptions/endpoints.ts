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
