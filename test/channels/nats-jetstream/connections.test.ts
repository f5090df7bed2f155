import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectionFailure } from '../../../src/channels/broker.ts';
import { NatsConnections } from '../../../src/channels/nats-jetstream/connections.ts';
import { startOwnNatsServer, type OwnNatsServer } from '../../support/nats.ts';

/**
 * A process's connections to the operator's NATS brokers
 * (src/channels/nats-jetstream/connections.ts), against a NATS server of the
 * test's own that asks for a token: the credentials as a broker's URL
 * carries them.
 */

let server: OwnNatsServer;

beforeAll(async () => {
  server = await startOwnNatsServer({ token: 's3cret' });
});
afterAll(async () => {
  await server?.close();
});

const connectionsWith = (credentials: string) =>
  new NatsConnections({ own: { type: 'nats-jetstream', url: server.url.replace('nats://', `nats://${credentials}@`), subjects: ['fhir.>'] } });

describe('NatsConnections', () => {
  it('connects with a token alone in the URL (nats://<token>@host), as NATS writes it', async () => {
    const connections = connectionsWith('s3cret');
    try {
      // What the server says of itself once connected: its largest message (no stream takes the subject to say less).
      expect(await connections.maxMessageBytes('own', 'fhir.encounters', 2_000)).toBe(1024 * 1024);
    } finally {
      await connections.close();
    }
  });

  it("fails with another token, in words that say the credentials were refused, and neither the token nor the server's address", async () => {
    const connections = connectionsWith('wrong');
    try {
      const failure = await connections.jetstream('own', 2_000).then(
        () => 'connected',
        (error: unknown) => connectionFailure(error),
      );
      expect(failure).toBe("the broker refused the service's credentials");
    } finally {
      await connections.close();
    }
  });
});
