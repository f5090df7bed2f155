/**
 * What the server uses of the processes' registry and of the event log,
 * which live above the channels (src/dispatch/): the API process gives them
 * (src/api/app.ts).
 */
export type DispatchParts = {
  /**
   * Registers the server in webhook.worker_pools as `serverId` (kind
   * websocket-server), running `beat` at each of its beats, until stop()
   * (src/dispatch/liveness.ts).
   */
  register(serverId: string, beat: () => Promise<void>): Promise<{ stop(): Promise<void> }>;
  /** LISTENs on a connection of its own (not through a transaction-mode pooler) to `channel`, until close() (src/dispatch/events/sender.ts). */
  listen(channel: string, applicationName: string, notified: (payload?: string) => void, stopping: () => boolean): { close(): Promise<void> };
  /** The number of a subscription's latest event, its missed events numbered first (src/db/sql/number-missed-events.ts). */
  numberMissedEvents(subscriptionId: string): Promise<number>;
};
