import { createServer, type Server } from 'node:http';
import type { Metrics } from './metrics.ts';

/** What Prometheus scrapes: the registry in its text format. */
export async function exposition(metrics: Metrics): Promise<{ contentType: string; body: string }> {
  return { contentType: metrics.registry.contentType, body: await metrics.registry.metrics() };
}

/**
 * /metrics on a port of its own (METRICS_PORT), for a worker process, which
 * has no HTTP API, or to keep the metrics off the API's port. No API key:
 * expose the port only to the scraper.
 */
export async function serveMetrics(metrics: Metrics, host: string, port: number): Promise<{ address: string; close: () => Promise<void> }> {
  const server: Server = createServer((request, response) => {
    if (request.url?.split('?')[0] !== '/metrics' || (request.method !== 'GET' && request.method !== 'HEAD')) {
      response.writeHead(404, { 'content-type': 'text/plain' }).end('Not found: the metrics are at /metrics\n');
      return;
    }
    exposition(metrics).then(
      ({ contentType, body }) => response.writeHead(200, { 'content-type': contentType }).end(request.method === 'HEAD' ? undefined : body),
      (error: unknown) =>
        response
          .writeHead(503, { 'content-type': 'text/plain' })
          .end(`The metrics could not be read: ${error instanceof Error ? error.message : String(error)}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const { port: listening } = server.address() as { port: number };
  return {
    address: `http://${host.includes(':') ? `[${host}]` : host}:${listening}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
