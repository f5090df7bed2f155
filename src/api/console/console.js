// The delivery console: refreshed every second, one refresh at a time; it changes nothing but on a
// Resend button (the API's $resend) or a Reactivate button (its $reactivate), which need the write
// scope. The API key stays in this tab's
// sessionStorage and goes in the x-api-key header of the console's JSON requests; every text
// from the server is set as textContent, never as HTML.
const refreshMs = 1000;
const keyItem = 'fhir-webhooks-console-key';
let selected;
/** The subscriptions whose reactivation is under way: their button waits for the answer. */
const reactivating = new Set();

const $ = (selector) => document.querySelector(selector);

class Refused extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function getJson(path) {
  const response = await fetch(path, { headers: { 'x-api-key': sessionStorage.getItem(keyItem) ?? '' } });
  const body = await response.json();
  if (!response.ok) throw new Refused(response.status, body.issue?.[0]?.details?.text ?? `HTTP ${response.status}`);
  return body;
}

function cell(text, className) {
  const td = document.createElement('td');
  td.textContent = text ?? '';
  if (className) td.className = className;
  return td;
}

function badge(text, prefix) {
  const td = document.createElement('td');
  const span = document.createElement('span');
  span.className = `status ${prefix}-${text}`;
  span.textContent = text;
  td.append(span);
  return td;
}

/** An instant as the CLI prints it: ISO 8601, UTC. */
function utc(instant) {
  return new Date(instant).toISOString();
}

/** A cell of an instant, kept on one line. */
function timeCell(instant) {
  return cell(instant === null ? '—' : utc(instant), 'time');
}

/**
 * The table's rows replaced by these, and its empty note shown when there are none. Each refresh
 * replaces the rows: the focus, on a row or a button of one, moves to the same row's new element
 * (rows are matched by data-key), so that a keyboard user does not lose their place every second.
 */
function fill(table, rows) {
  const focused = document.activeElement;
  const focusedRow = table.contains(focused) ? focused.closest('tr') : null;
  table.querySelector('tbody').replaceChildren(...rows);
  const empty = document.getElementById(`${table.id}-empty`);
  if (empty) empty.hidden = rows.length > 0;
  if (focusedRow?.dataset.key === undefined) return;
  const row = rows.find((candidate) => candidate.dataset.key === focusedRow.dataset.key);
  const target = focused === focusedRow ? row : row?.querySelector([focused.tagName, ...[...focused.classList].map((name) => `.${name}`)].join(''));
  target?.focus();
}

/** Its deactivations of the last 24 hours; more than one is marked: a flapping subscriber (its handshakes pass, its notifications fail). */
function deactivationsCell({ deactivationsLastDay, deactivationsInARow }) {
  const td = cell(String(deactivationsLastDay), deactivationsLastDay > 1 ? 'flapping' : undefined);
  if (deactivationsLastDay > 1) td.title = `Flapping: ${deactivationsInARow} deactivations in a row without a delivery`;
  return td;
}

/** Why it is in error and, for one in error, when an event may reactivate it: the next, or one after the flapping backoff. */
function reasonCell({ status, error, reactivationHeldUntil }) {
  const td = cell(error);
  if (status !== 'error') return td;
  const next = document.createElement('div');
  next.className = 'next-reactivation';
  next.textContent = reactivationHeldUntil === null ? 'The next event may reactivate it' : `An event from ${utc(reactivationHeldUntil)} on may reactivate it`;
  td.append(next);
  return td;
}

/** A row that opens a subscription's detail on a click, or on Enter or Space when it has the focus. */
function selectable(row, id) {
  row.dataset.key = id;
  row.tabIndex = 0;
  row.title = 'Show its calls';
  row.setAttribute('aria-selected', String(id === selected));
  const open = () => {
    selected = id;
    void refreshNow();
  };
  row.addEventListener('click', open);
  row.addEventListener('keydown', (event) => {
    // A key on a button in the row is the button's.
    if (event.target !== row || (event.key !== 'Enter' && event.key !== ' ')) return;
    event.preventDefault();
    open();
  });
  return row;
}

function renderSubscriptions(subscriptions) {
  fill(
    $('#subscriptions'),
    subscriptions.map((subscription) => {
      const row = document.createElement('tr');
      row.classList.toggle('selected', subscription.id === selected);
      row.append(
        cell(subscription.id, 'code'),
        badge(subscription.status, 'status'),
        cell(subscription.subscribedTo, 'code'),
        cell(subscription.endpoint, 'code'),
        cell(String(subscription.failedCallsSinceSuccess)),
        deactivationsCell(subscription),
        subscription.lastSuccessAt === null ? cell('never') : timeCell(subscription.lastSuccessAt),
        reasonCell(subscription),
        subscription.status === 'error' ? reactivateCell(subscription.id) : cell(''),
      );
      return selectable(row, subscription.id);
    }),
  );
}

function renderDetail({ subscription, attempts, queued, websocketClients }) {
  $('#detail').hidden = false;
  $('#detail-title').textContent =
    `${subscription.subscribedTo} → ${subscription.endpoint}${subscription.topic === null ? '' : `, latest event ${subscription.topic.lastEventNumber}`}`;
  fill(
    $('#attempts'),
    attempts.map((attempt) => {
      const row = document.createElement('tr');
      row.dataset.key = attempt.id;
      row.append(
        timeCell(attempt.startedAt),
        cell(attempt.id),
        cell(attempt.kind),
        cell(attempt.eventNumber === null ? '—' : String(attempt.eventNumber)),
        cell(attempt.resource ?? '—', 'code'),
        cell(String(attempt.attempt)),
        cell(attempt.httpStatus === null ? '—' : String(attempt.httpStatus)),
        cell(`${attempt.durationMs} ms`),
        badge(attempt.outcome, 'outcome'),
        cell(attempt.error),
        cell(attempt.responseExcerpt),
        attempt.kind === 'notification' ? resendCell(subscription.id, attempt.id) : cell(''),
      );
      return row;
    }),
  );
  fill(
    $('#queued'),
    queued.map((work) => {
      const row = document.createElement('tr');
      row.append(
        cell(work.task),
        cell(String(work.items)),
        cell(String(work.waiting)),
        cell(String(work.scheduled)),
        cell(String(work.running)),
        timeCell(work.waitingSince),
        timeCell(work.nextRunAt),
      );
      return row;
    }),
  );
  // A websocket subscription's clients, whichever API process holds them; none for a rest-hook one.
  $('#websocket').hidden = websocketClients === null;
  fill(
    $('#websocket-clients'),
    (websocketClients ?? []).map((client) => {
      const row = document.createElement('tr');
      row.dataset.key = client.connection;
      row.append(timeCell(client.boundAt), cell(client.address), cell(client.connection, 'code'), cell(client.server, 'code'));
      return row;
    }),
  );
}

/** A button that sends the event of this call again (POST …/Subscription/{id}/$resend), and says what became of it. */
function resendCell(subscriptionId, attemptId) {
  const td = document.createElement('td');
  const button = document.createElement('button');
  button.type = 'button';
  button.className = 'resend';
  button.textContent = 'Resend';
  button.addEventListener('click', async () => {
    const result = $('#resend-result');
    result.textContent = 'Resending…';
    try {
      const body = await postOperation(`/fhir/resources/Subscription/${encodeURIComponent(subscriptionId)}/$resend`, {
        resourceType: 'Parameters',
        parameter: [{ name: 'attempt', valueString: attemptId }],
      });
      const resources = body.parameter.filter((parameter) => parameter.name === 'queued').map((parameter) => parameter.part.at(-1).valueReference.reference);
      result.textContent = `Queued ${resources.join(', ')}`;
    } catch (error) {
      // The subscription endpoints' refusal format (the spec's) around the reason.
      result.textContent = `Not resent: ${error.message.replace(/^ValidationError: \['(.*)'\]$/s, '$1')}`;
    }
    void refreshNow();
  });
  td.append(button);
  return td;
}

/** Where a button's request goes: the FHIR API, with the key; its answer, or the refusal's reason (a Refused). */
async function postOperation(path, body) {
  const response = await fetch(path, {
    method: 'POST',
    headers: { 'x-api-key': sessionStorage.getItem(keyItem) ?? '', ...(body === undefined ? {} : { 'content-type': 'application/fhir+json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const answer = await response.json();
  if (!response.ok) throw new Refused(response.status, answer.issue?.[0]?.details?.text ?? `HTTP ${response.status}`);
  return answer;
}

/**
 * A subscription in error, its receiver fixed: a button that sends the reactivation handshake now
 * (POST …/Subscription/{id}/$reactivate), waits for it, and says what became of it.
 */
function reactivateCell(subscriptionId) {
  const td = document.createElement('td');
  const button = document.createElement('button');
  button.type = 'button';
  button.className = 'reactivate';
  button.disabled = reactivating.has(subscriptionId);
  button.textContent = button.disabled ? 'Reactivating…' : 'Reactivate';
  button.title = 'Send the reactivation handshake now: on 2xx it is active';
  button.addEventListener('click', async (event) => {
    // The row's own click selects it; this one only reactivates.
    event.stopPropagation();
    const result = $('#reactivate-result');
    reactivating.add(subscriptionId);
    button.disabled = true;
    button.textContent = 'Reactivating…';
    result.textContent = `Reactivating ${subscriptionId}…`;
    try {
      const subscription = await postOperation(`/fhir/resources/Subscription/${encodeURIComponent(subscriptionId)}/$reactivate`);
      result.textContent = `Reactivated ${subscription.id}: it is ${subscription.status}`;
    } catch (error) {
      result.textContent = `Not reactivated: ${error.message}`;
    } finally {
      reactivating.delete(subscriptionId);
    }
    void refreshNow();
  });
  td.append(button);
  return td;
}

async function refresh() {
  try {
    renderSubscriptions(await getJson('/console/api/subscriptions'));
    const shown = selected;
    if (shown !== undefined) {
      const detail = await getJson(`/console/api/subscriptions/${encodeURIComponent(shown)}`);
      // Another subscription was clicked meanwhile: its own refresh shows it.
      if (shown === selected) renderDetail(detail);
    }
    $('#refreshed').textContent = `updated ${utc(new Date())}`;
  } catch (error) {
    // The key was revoked meanwhile: ask for one again.
    if (error instanceof Refused && error.status === 401) {
      sessionStorage.removeItem(keyItem);
      location.reload();
      return;
    }
    $('#refreshed').textContent = `not updated: ${error.message}`;
  }
}

// One refresh at a time: the next starts a second after the last one ended, or at once on a click.
let timer;
let running = Promise.resolve();
function refreshNow() {
  clearTimeout(timer);
  running = running.then(refresh).then(() => {
    clearTimeout(timer);
    timer = setTimeout(refreshNow, refreshMs);
  });
  return running;
}

function showBoard() {
  $('#login').hidden = true;
  $('#board').hidden = false;
  $('#forget').hidden = false;
  void refreshNow();
}

$('#login').addEventListener('submit', async (event) => {
  event.preventDefault();
  sessionStorage.setItem(keyItem, $('#key').value);
  try {
    await getJson('/console/api/subscriptions');
    showBoard();
  } catch (error) {
    sessionStorage.removeItem(keyItem);
    $('#login-error').textContent = error.message;
  }
});

$('#forget').addEventListener('click', () => {
  sessionStorage.removeItem(keyItem);
  location.reload();
});

if (sessionStorage.getItem(keyItem)) showBoard();
else $('#login').hidden = false;
