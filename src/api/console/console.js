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

function fill(table, rows) {
  table.querySelector('tbody').replaceChildren(...rows);
}

function renderSubscriptions(subscriptions) {
  $('#no-subscriptions').hidden = subscriptions.length > 0;
  fill(
    $('#subscriptions'),
    subscriptions.map((subscription) => {
      const row = document.createElement('tr');
      row.dataset.id = subscription.id;
      row.classList.toggle('selected', subscription.id === selected);
      row.append(
        cell(subscription.id, 'code'),
        badge(subscription.status, 'status'),
        cell(subscription.subscribedTo, 'code'),
        cell(subscription.endpoint, 'code'),
        cell(String(subscription.failedCallsSinceSuccess)),
        cell(subscription.lastSuccessAt === null ? 'never' : utc(subscription.lastSuccessAt)),
        cell(subscription.error),
        subscription.status === 'error' ? reactivateCell(subscription.id) : cell(''),
      );
      row.title = 'Show its calls';
      row.addEventListener('click', () => {
        selected = subscription.id;
        void refreshNow();
      });
      return row;
    }),
  );
}

function renderDetail({ subscription, attempts, queued }) {
  $('#detail').hidden = false;
  $('#detail-title').textContent = `${subscription.subscribedTo} → ${subscription.endpoint}${subscription.topic === null ? '' : `, latest event ${subscription.topic.lastEventNumber}`}`;
  fill(
    $('#attempts'),
    attempts.map((attempt) => {
      const row = document.createElement('tr');
      row.append(
        cell(utc(attempt.startedAt)),
        cell(attempt.kind),
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
      const time = (value) => (value === null ? '—' : utc(value));
      row.append(cell(work.task), cell(String(work.items)), cell(String(work.waiting)), cell(String(work.scheduled)), cell(String(work.running)), cell(time(work.waitingSince)), cell(time(work.nextRunAt)));
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
