import { describe, expect, it } from 'vitest';
import { closedAtFileEnd, stackWith } from '../support/dispatch-stack.ts';
import { waitFor } from '../support/receiver.ts';
import { subscribe, untilStatus } from '../support/subscriptions.ts';

const { receiver } = closedAtFileEnd();

describe('order per resource under concurrent updates and retries', () => {
  const stack = stackWith(() => ({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', DELIVERY_RETRY_DELAYS_MS: '30,30,30', DELIVERY_MAX_FAILURES: '6' }));

  it("no subscriber receives a version of a resource after a newer one, and each resource's last version arrives", async () => {
    const { t } = stack.current();
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Task?status=requested', endpoint.url);
    await untilStatus(t, id, 'active');
    // One call in four fails (retryable), so retries come after later versions.
    let calls = 0;
    endpoint.answer = () => ({ status: ++calls % 4 === 0 ? 503 : 200 });

    const resources = ['t1', 't2', 't3', 't4', 't5'];
    for (const resource of resources) await t.fhir('PUT', `/Task/${resource}`, { resourceType: 'Task', id: resource, status: 'requested', intent: 'order' });
    // Five writers update each resource ten times, concurrently.
    await Promise.all(
      Array.from({ length: 5 }, async (_, writer) => {
        for (let round = 0; round < 10; round++) {
          for (const resource of resources) {
            await t.fhir('PUT', `/Task/${resource}`, {
              resourceType: 'Task',
              id: resource,
              status: 'requested',
              intent: 'order',
              description: `writer ${writer} round ${round}`,
            });
          }
        }
      }),
    );
    const { rows } = await t.database.pool.query<{ id: string; version: string }>(
      `SELECT id, content -> 'meta' ->> 'versionId' AS version FROM fhir.resources WHERE resource_type = 'Task'`,
    );
    const last = new Map(rows.map((row) => [row.id, Number(row.version)]));
    const received = () =>
      endpoint.calls.flatMap((call) =>
        call.json.resourceType === 'Task' ? [{ id: call.json.id as string, version: Number((call.json.meta as { versionId: string }).versionId) }] : [],
      );
    await waitFor(
      () => (resources.every((resource) => received().some((call) => call.id === resource && call.version === last.get(resource))) ? true : undefined),
      30_000,
      'every last version',
    );

    for (const resource of resources) {
      const versions = received()
        .filter((call) => call.id === resource)
        .map((call) => call.version);
      for (let index = 1; index < versions.length; index++) {
        expect(versions[index], `${resource}: ${versions.join(', ')}`).toBeGreaterThanOrEqual(versions[index - 1]!);
      }
    }
    expect(calls).toBeGreaterThan(20);
  });
});
