import type { TaskList } from 'graphile-worker';
import { taskFor } from '../../db/jobs.ts';
import type { DispatchContext } from '../delivery.ts';
import { deactivationAlert } from './deactivation-alert.ts';
import { deliveryLogCleanup } from './delivery-log-cleanup.ts';
import { handshake } from './handshake.ts';
import { notification } from './notification.ts';
import { reactivation } from './reactivation.ts';

/**
 * The dispatcher's graphile-worker tasks, one file each. The database enqueues
 * their jobs (a subscription's creation, the triggers on fhir.resources); each
 * checks its payload against the job contract (src/db/jobs.ts) first.
 */
export function dispatchTasks(context: DispatchContext): TaskList {
  return {
    subscription_handshake: taskFor('subscription_handshake', (payload, signal) => handshake(context, payload, signal)),
    subscription_reactivation: taskFor('subscription_reactivation', (event, signal) => reactivation(context, event, signal)),
    // The task reads its batch back as it takes the jobs waiting behind it.
    notification_delivery: taskFor('notification_delivery', (_batch, signal, jobId) => notification(context, jobId, signal)),
    deactivation_alert: taskFor('deactivation_alert', (payload) => deactivationAlert(context, payload)),
    delivery_log_cleanup: taskFor('delivery_log_cleanup', () => deliveryLogCleanup(context)),
  };
}

/** The daily cleanup of old attempt records (graphile-worker crontab). */
export const dispatchCrontab = '0 3 * * * delivery_log_cleanup';
