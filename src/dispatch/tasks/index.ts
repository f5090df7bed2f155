import type { Task } from 'graphile-worker';
import type { DispatchContext } from '../subscriber.ts';
import { deactivationAlert } from './deactivation-alert.ts';
import { deliveryLogCleanup } from './delivery-log-cleanup.ts';
import { handshake } from './handshake.ts';
import { taskFor, type JobName } from '../../db/jobs.ts';
import { legacyNotification } from './legacy-notification.ts';
import { reactivation } from './reactivation.ts';
import { reactivationRequest } from './reactivation-request.ts';

/**
 * The dispatcher's graphile-worker tasks, one file each. The database and the
 * state machine enqueue their jobs (a subscription's creation, the
 * notification trigger, a deactivation); each checks its payload against the
 * job contract (src/db/jobs.ts) first. Notifications are not among them: the event
 * sender delivers them from the subscription event log (../events/). Keyed by
 * every job name, so that a job added to the contract without its task here
 * does not compile (its jobs would wait in the queue, never run).
 */
export function dispatchTasks(context: DispatchContext): { [Name in JobName]: Task } {
  return {
    subscription_handshake: taskFor('subscription_handshake', (payload, signal) => handshake(context, payload, signal)),
    subscription_reactivation: taskFor('subscription_reactivation', (event, signal) => reactivation(context, event, signal)),
    subscription_reactivation_request: taskFor('subscription_reactivation_request', (payload) => reactivationRequest(context, payload)),
    notification_delivery: taskFor('notification_delivery', (batch) => legacyNotification(context, batch)),
    deactivation_alert: taskFor('deactivation_alert', (payload) => deactivationAlert(context, payload)),
    delivery_log_cleanup: taskFor('delivery_log_cleanup', () => deliveryLogCleanup(context)),
  };
}

/** The daily cleanup of old attempt records and settled events (graphile-worker crontab). */
export const dispatchCrontab = '0 3 * * * delivery_log_cleanup';
