import type { Logger } from 'pino';
import { WebSocket } from 'ws';
import type { WebsocketLimits } from '../../config/index.ts';
import { operationOutcome } from '../../fhir/outcome.ts';
import type { Metrics, WebsocketCloseReason, WebsocketFrameType } from '../../metrics/metrics.ts';
import type { Client } from './client.ts';
import { closeReason, refusalIssueType, type Refusal } from './messages.ts';

export type Sending = ReturnType<typeof createSending>;

/** What the server writes to its clients, and how it ends them, counted in the metrics. */
export function createSending({
  limits,
  metrics,
  logger,
}: {
  limits: Pick<WebsocketLimits, 'sendBufferBytes'>;
  metrics: Metrics;
  logger: Pick<Logger, 'warn'>;
}) {
  /**
   * Writes a frame, unless the client's unsent bytes already pass the bound: it does not read, and is cut off.
   * A notification or refusal is counted by its type; a pong (no type) is not a notification.
   */
  const send = (client: Client, text: string, type: WebsocketFrameType | undefined) => {
    if (client.endedBy !== undefined || client.socket.readyState !== WebSocket.OPEN) return;
    if (client.socket.bufferedAmount > limits.sendBufferBytes) {
      logger.warn(
        { connection: client.id, address: client.address, bufferedBytes: client.socket.bufferedAmount },
        'cut off a websocket client that does not read its notifications',
      );
      end(client, 'slow-client');
      client.socket.terminate();
      return;
    }
    client.socket.send(text);
    if (type !== undefined) metrics.websocketFrameSent(type);
  };

  const end = (client: Client, reason: WebsocketCloseReason) => {
    if (client.endedBy !== undefined) return;
    client.endedBy = reason;
    metrics.websocketClosed(reason);
  };

  /** An error frame (an OperationOutcome saying why), then the close: nothing else is sent. */
  const refuse = (client: Client, { reason, code, text }: Refusal) => {
    if (client.endedBy !== undefined) return;
    send(client, JSON.stringify(operationOutcome(refusalIssueType(reason), text)), 'error');
    end(client, reason);
    client.socket.close(code, closeReason(text));
  };

  /** An informational OperationOutcome frame: the client is told, and stays connected. */
  const tell = (client: Client, text: string) => send(client, JSON.stringify(operationOutcome('informational', text, 'information')), 'error');

  return { send, end, refuse, tell };
}
