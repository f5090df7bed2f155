/**
 * A notification checked as a conformance tester checks it against the FHIR
 * Subscriptions R5 Backport IG (STU 1.1) on R4: written from the IG's rules
 * (its notifications, payloads and backport-subscription-status-r4 pages),
 * not from the service's code. Returns the problems found (none: conformant).
 */

/** JSON as a tester reads it: of any shape, every path tried. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the point is to read what was received, whatever it is
export type Json = Record<string, any>;

export type Expected = {
  subscriptionId: string;
  type: 'handshake' | 'heartbeat' | 'event-notification' | 'query-status' | 'query-event';
  status?: string;
  content: 'empty' | 'id-only' | 'full-resource';
};

const statusProfile = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition/backport-subscription-status-r4';
const statusParameters = new Set(['subscription', 'topic', 'status', 'type', 'events-since-subscription-start', 'notification-event', 'error']);

export function notificationProblems(bundle: Json, expected: Expected): string[] {
  const problems: string[] = [];
  const problem = (text: string) => problems.push(text);
  if (bundle.resourceType !== 'Bundle') return ['not a Bundle'];
  if (bundle.type !== 'history') problem(`Bundle.type is ${bundle.type}, not history`);
  const entries: Json[] = bundle.entry ?? [];
  if (entries.length === 0) return [...problems, 'no entries'];
  // bdl-3 and bdl-4: every entry of a history Bundle has a request and a response.
  entries.forEach((entry, index) => {
    if (entry.request?.method === undefined || entry.request?.url === undefined) problem(`entry ${index} has no request (method and url)`);
    if (entry.response?.status === undefined) problem(`entry ${index} has no response.status`);
  });
  const [first, ...rest] = entries;
  if (!String(first!.request?.url ?? '').endsWith(`Subscription/${expected.subscriptionId}/$status`))
    problem(`the first entry's request.url is ${first!.request?.url}`);
  const status: Json | undefined = first!.resource;
  if (status?.resourceType !== 'Parameters') return [...problems, 'the first entry is not a Parameters'];
  problems.push(...statusProblems(status, expected));

  const parameters: Json[] = status.parameter ?? [];
  const events = parameters.filter((parameter) => parameter.name === 'notification-event');
  const parts = (event: Json, name: string): Json[] => (event.part ?? []).filter((part: Json) => part.name === name);
  if (expected.type === 'event-notification' && events.length === 0) problem('no notification-event');
  if (expected.content === 'empty') {
    if (rest.length > 0) problem(`empty content with ${rest.length} entries besides the status`);
    for (const event of events)
      if (parts(event, 'focus').length + parts(event, 'additional-context').length > 0) problem('empty content with a focus or additional-context');
    if (parameters.some((parameter) => parameter.name === 'topic')) problem('empty content names the topic (SHOULD NOT)');
  }
  if (expected.content === 'id-only') {
    for (const event of events) if (parts(event, 'focus').length !== 1) problem('an id-only event without a focus');
    for (const entry of rest) {
      if (entry.resource !== undefined) problem(`id-only entry ${entry.fullUrl} carries a resource`);
      if (!entry.fullUrl) problem('an id-only entry without fullUrl');
    }
  }
  if (expected.content === 'full-resource') {
    if (expected.type === 'event-notification' && !parameters.some((parameter) => parameter.name === 'topic'))
      problem('full-resource without the topic (SHOULD)');
    const resolves = (reference: string) =>
      reference.startsWith('urn:')
        ? rest.some((entry) => entry.fullUrl === reference)
        : rest.some((entry) => entry.resource !== undefined && reference.includes(`${entry.resource.resourceType}/${entry.resource.id}`));
    for (const event of events) {
      const focus = parts(event, 'focus');
      if (focus.length !== 1) problem('a full-resource event without a focus');
      for (const part of [...focus, ...parts(event, 'additional-context')]) {
        if (!resolves(part.valueReference?.reference ?? '')) problem(`${part.name} ${part.valueReference?.reference} resolves to no entry's resource`);
      }
    }
  }
  return problems;
}

/** The status Parameters against the backport-subscription-status-r4 profile's elements and types. */
export function statusProblems(status: Json, expected: Expected): string[] {
  const problems: string[] = [];
  const problem = (text: string) => problems.push(text);
  if (!(status.meta?.profile ?? []).includes(statusProfile)) problem('the status does not claim its profile');
  const parameters: Json[] = status.parameter ?? [];
  for (const parameter of parameters) if (!statusParameters.has(parameter.name)) problem(`unknown parameter ${parameter.name}`);
  const one = (name: string) => {
    const found = parameters.filter((parameter) => parameter.name === name);
    if (found.length > 1) problem(`${name} more than once`);
    return found[0];
  };
  const subscription = one('subscription');
  if (subscription?.valueReference?.reference?.split('/').at(-1) !== expected.subscriptionId) problem(`subscription is ${JSON.stringify(subscription)}`);
  const topic = one('topic');
  if (topic !== undefined && typeof topic.valueCanonical !== 'string') problem('topic is not a valueCanonical');
  if (one('type')?.valueCode !== expected.type) problem(`type is ${JSON.stringify(one('type'))}, not ${expected.type}`);
  const statusCode = one('status')?.valueCode;
  if (!['requested', 'active', 'error', 'off'].includes(statusCode)) problem(`status is ${statusCode}`);
  if (expected.status !== undefined && statusCode !== expected.status) problem(`status is ${statusCode}, not ${expected.status}`);
  const since = one('events-since-subscription-start');
  if (since !== undefined && !/^\d+$/.test(since.valueString ?? '')) problem('events-since-subscription-start is not a valueString of digits');
  for (const event of parameters.filter((parameter) => parameter.name === 'notification-event')) {
    const parts: Json[] = event.part ?? [];
    const numbers = parts.filter((part) => part.name === 'event-number');
    if (numbers.length !== 1 || !/^\d+$/.test(numbers[0]!.valueString ?? '')) problem('a notification-event without one event-number valueString');
    for (const part of parts) {
      if (part.name === 'timestamp' && Number.isNaN(Date.parse(part.valueInstant))) problem('timestamp is not a valueInstant');
      if ((part.name === 'focus' || part.name === 'additional-context') && typeof part.valueReference?.reference !== 'string')
        problem(`${part.name} is not a valueReference`);
      if (!['event-number', 'timestamp', 'focus', 'additional-context'].includes(part.name)) problem(`unknown notification-event part ${part.name}`);
    }
  }
  return problems;
}

/** The event numbers a status tells, in its order. */
export function eventNumbers(bundle: Json): number[] {
  const status: Json = bundle.entry?.[0]?.resource ?? {};
  return (status.parameter ?? [])
    .filter((parameter: Json) => parameter.name === 'notification-event')
    .map((event: Json) => Number(event.part.find((part: Json) => part.name === 'event-number').valueString));
}

/** A status parameter's value (its value[x], whichever it is). */
export function statusValue(bundle: Json, name: string): unknown {
  const parameter = (bundle.entry?.[0]?.resource?.parameter ?? []).find((item: Json) => item.name === name);
  if (parameter === undefined) return undefined;
  const key = Object.keys(parameter).find((candidate) => candidate.startsWith('value'));
  return key === undefined ? undefined : parameter[key];
}
