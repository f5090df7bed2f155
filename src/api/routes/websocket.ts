import websocketPlugin from '@fastify/websocket';
import type { FastifyInstance } from 'fastify';
import { websocketPath } from '../../channels/websocket/channel.ts';
import { FhirError } from '../../fhir/outcome.ts';
import type { WebsocketServer } from '../../channels/websocket/server.ts';

export type WebsocketRoutesOptions = {
  server: WebsocketServer;
  /** WEBSOCKET_MAX_MESSAGE_BYTES: a longer message closes the connection (1009). */
  maxMessageBytes: number;
};

/**
 * The websocket channel's endpoint on the API's port (@fastify/websocket):
 * GET WEBSOCKET_PATH upgraded, without an API key (a browser's WebSocket
 * cannot send one): the client authenticates with its bind-with-token
 * message (src/channels/websocket/server.ts).
 *
 * Registered on the app itself, not in a plugin of its own: Node hands every
 * request that asks for an upgrade (to any route, with any Upgrade header) to
 * the plugin's 'upgrade' listener and stops timing it out, and the plugin's
 * hook that closes such a request's connection once it is answered must
 * cover every route. Encapsulated, it covered this one only: a request to
 * another route was answered and its connection kept open for ever, a body
 * trickled past the request timeout.
 */
export async function registerWebsocketRoutes(app: FastifyInstance, { server, maxMessageBytes }: WebsocketRoutesOptions): Promise<void> {
  await app.register(websocketPlugin, {
    options: { maxPayload: maxMessageBytes },
    // ws closes the connection itself (1009 for a message over maxPayload; a reset socket is gone).
    errorHandler: (error, socket) => server.failed(socket, error),
    // The clients are told the service is stopping (1001), then the ws server closes.
    preClose: async () => {
      await server.close();
      await new Promise<void>((resolve) => app.websocketServer.close(() => resolve()));
    },
  });
  app.route({
    method: 'GET',
    url: websocketPath,
    schema: { hide: true },
    // A plain GET (no upgrade): told where it is, as every refusal is, in an OperationOutcome.
    handler: async () => {
      throw new FhirError(
        426,
        'not-supported',
        `${websocketPath} is the websocket channel's endpoint: connect with a websocket client, then send bind-with-token <token> (a token from $get-ws-binding-token)`,
      );
    },
    wsHandler: (socket, request) => server.accept(socket, request.ip),
  });
}
