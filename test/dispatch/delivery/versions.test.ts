import { describe, expect, it } from 'vitest';
import { versionsOf, type Versions } from '../../../src/dispatch/events/delivery/versions.ts';
import { eventKey } from '../../../src/db/jobs.ts';
import { claimedEvent } from './claimed-events.ts';

/** Each batch keeps only the versions of its own events (src/dispatch/events/delivery/versions.ts, versionsOf), the same objects. */

const version = (id: number) => ({ content: { resourceType: 'Patient', id: String(id) }, lastUpdated: new Date(id) });

describe('versionsOf', () => {
  it("keeps the versions of the batch's events, out of those loaded for the sender's whole claim", () => {
    const loaded: Versions = new Map([1, 2, 3].map((id) => [eventKey(claimedEvent(id)), version(id)]));
    const mine = versionsOf([claimedEvent(3), claimedEvent(1), claimedEvent(3)], loaded);
    expect([...mine.keys()]).toEqual(['Patient/3/_history/1', 'Patient/1/_history/1']);
    expect(mine.get('Patient/1/_history/1')).toBe(loaded.get('Patient/1/_history/1'));
  });

  it('leaves out a version that is gone', () => {
    const loaded: Versions = new Map([[eventKey(claimedEvent(1)), version(1)]]);
    expect([...versionsOf([claimedEvent(1), claimedEvent(2)], loaded).keys()]).toEqual(['Patient/1/_history/1']);
  });
});
