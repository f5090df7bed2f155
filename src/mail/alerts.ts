import { createTransport } from 'nodemailer';
import type { Logger } from 'pino';
import { shownEndpoint } from '../channels/channel.ts';

/**
 * What the contacts of a subscription that delivery failures moved to `error`
 * are told. It has no channel headers or signing secret, and must not get any:
 * all of it is mailed, or logged.
 */
export type DeactivationAlert = {
  subscriptionId: string;
  criteria: string;
  endpoint: string;
  /** The subscription's contact e-mails. */
  recipients: string[];
  /** Of the last failed attempt; undefined when no HTTP response came. */
  httpStatus: number | undefined;
  errorMessage: string;
  undeliveredResourceUrl: string | undefined;
  /** Of the latest deactivation this alert tells of. */
  deactivatedAt: string;
  /** The deactivations it tells of: 1, or those since the previous alert when they came within ALERT_EMAIL_INTERVAL_SECONDS of it. */
  deactivations: number;
  /** When the subscription's previous alert was sent (or logged); undefined for its first. */
  previousAlertAt: string | undefined;
};

export type AlertMailer = {
  /** 'sent' once the SMTP server took the message (an SMTP failure throws); 'logged' when it went to the log instead. */
  send(alert: DeactivationAlert): Promise<'sent' | 'logged'>;
  close(): void;
};

/** Mails alerts through smtpUrl; without it, writes them to the log at warn. */
export function createAlertMailer(mail: { smtpUrl: string | undefined; from: string }, logger: Logger): AlertMailer {
  if (mail.smtpUrl === undefined) {
    return { send: async (alert) => logAlert(logger, alert, 'no SMTP_URL, alert logged instead of mailed'), close: () => undefined };
  }
  const transport = createTransport(mail.smtpUrl);
  return {
    async send(alert) {
      // nodemailer refuses a message without recipients, and retrying the job would not give it any.
      if (alert.recipients.length === 0) return logAlert(logger, alert, 'subscription has no contact e-mail, alert logged instead of mailed');
      const info = await transport.sendMail({ from: mail.from, to: alert.recipients, subject: alertSubject(alert), text: alertText(alert) });
      // Some recipients took it: a retry would mail them again, so the refused ones are only logged.
      if (info.rejected.length > 0) logger.warn({ subscriptionId: alert.subscriptionId, rejected: info.rejected }, 'alert e-mail refused for some recipients');
      return 'sent';
    },
    close: () => transport.close(),
  };
}

function logAlert(logger: Logger, alert: DeactivationAlert, message: string): 'logged' {
  logger.warn({ alert: alertFields(alert) }, `webhook subscription deactivated: ${message}`);
  return 'logged';
}

/** The alert's fields picked by name, so that a wider object passed as an alert (a subscription row) cannot log its headers. */
function alertFields(alert: DeactivationAlert): DeactivationAlert {
  const { subscriptionId, criteria, endpoint, recipients, httpStatus, errorMessage, undeliveredResourceUrl, deactivatedAt, deactivations, previousAlertAt } =
    alert;
  return { subscriptionId, criteria, endpoint, recipients, httpStatus, errorMessage, undeliveredResourceUrl, deactivatedAt, deactivations, previousAlertAt };
}

function alertSubject(alert: DeactivationAlert): string {
  return alert.deactivations === 1 ? `Webhook deactivated: ${alert.criteria}` : `Webhook deactivated ${alert.deactivations} times: ${alert.criteria}`;
}

/** What happened, in the first line: one deactivation, or how many since the previous alert. */
function alertLead(alert: DeactivationAlert): string {
  if (alert.deactivations === 1) return 'Deliveries to the endpoint of this webhook subscription kept failing, so it was deactivated (status error).';
  return (
    `Deliveries to the endpoint of this webhook subscription keep failing: it was deactivated (status error) ${alert.deactivations} times since the previous alert` +
    `${alert.previousAlertAt === undefined ? '' : ` (${alert.previousAlertAt})`}, each time after a new event reactivated it. ` +
    'Its contacts get one alert per interval, not one per deactivation; the facts below are of the latest.'
  );
}

/** Plain text, one line per paragraph: mail clients wrap it to their width. */
function alertText(alert: DeactivationAlert): string {
  const facts: [string, string][] = [
    ['Subscription', alert.subscriptionId],
    ['Criteria', alert.criteria],
    ['Endpoint', shownEndpoint(alert.endpoint)],
    ['HTTP status', alert.httpStatus === undefined ? 'no HTTP response' : String(alert.httpStatus)],
    ['Error', alert.errorMessage],
    ['Undelivered resource', alert.undeliveredResourceUrl ?? 'none recorded'],
    ['Deactivated at', alert.deactivatedAt],
    ...(alert.deactivations === 1
      ? []
      : [['Deactivations', `${alert.deactivations} since ${alert.previousAlertAt ?? 'the previous alert'}`] satisfies [string, string]]),
  ];
  return [
    alertLead(alert),
    '',
    // One line per fact, even for an error message quoting a multi-line answer of the endpoint.
    ...facts.map(([label, value]) => `${`${label}:`.padEnd(22)}${value.replace(/\s*[\r\n]+\s*/g, ' ')}`),
    '',
    "To reactivate it, make the endpoint answer again; nothing needs changing on our side. The next event matching the criteria makes the service send the handshake again: a 2xx answer makes the subscription active and that event is delivered. Or, once the endpoint is fixed, have it reactivated now: the subscription's $reactivate operation (write scope), or `subscriptions reactivate <id>` for an operator. Events missed meanwhile are not resent, the undelivered resource included.",
    '',
    'To move to another endpoint instead, create a new subscription for the same criteria: a subscription in error does not hold its criteria, and only requested or active ones can be switched off.',
    '',
  ].join('\n');
}
