import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ClaimedBytes, type HeldBatches } from '../../../src/dispatch/events/delivery/claimed-bytes.ts';

/**
 * The bytes the sender's batches hold against DELIVERY_MAX_CLAIMED_BYTES
 * (src/dispatch/events/delivery/claimed-bytes.ts): held from a batch's claim
 * until the batch after it is asked for, or the delivery ends; what a next
 * batch may take.
 */

const seed = Number(process.env.UNIT_PROPERTY_SEED ?? '20261127');

describe('ClaimedBytes', () => {
  it("holds a delivery's batches until the next is asked for, or the delivery ends", () => {
    const bytes = new ClaimedBytes(1_000);
    const holding = bytes.hold(100);
    holding.add(200);
    holding.add(300);
    expect(bytes.left).toBe(400);
    holding.keepLast();
    expect(bytes.left).toBe(700);
    holding.keepLast();
    expect(bytes.left).toBe(700);
    holding.release();
    expect(bytes.left).toBe(1_000);
    holding.release();
    expect(bytes.left).toBe(1_000);
  });

  it('counts what a claim under way may take, until it is given back', () => {
    const bytes = new ClaimedBytes(1_000);
    const giveBack = bytes.reserve(600);
    expect(bytes.left).toBe(400);
    giveBack();
    expect(bytes.left).toBe(1_000);
  });

  it('can hold more than the bound: a claim always takes one event', () => {
    const bytes = new ClaimedBytes(1_000);
    bytes.hold(1_500);
    expect(bytes.left).toBe(-500);
    expect(bytes.shareFor(1)).toBeLessThanOrEqual(0);
  });

  it('gives a next batch what is left, at most an even share of the bound or a quarter of what is left, whichever is more', () => {
    const bytes = new ClaimedBytes(1_000);
    expect([1, 2, 4, 10, 0].map((sending) => bytes.shareFor(sending))).toEqual([1_000, 500, 250, 250, 1_000]);
    bytes.hold(800);
    expect([1, 2, 10].map((sending) => bytes.shareFor(sending))).toEqual([200, 200, 100]);
    bytes.hold(199);
    expect(bytes.shareFor(10)).toBe(1);
  });

  it('gives every byte back once the deliveries end, whatever they held meanwhile', () => {
    const operation = fc.oneof(
      fc.record({ kind: fc.constant('claim' as const), bytes: fc.integer({ min: 0, max: 5_000 }) }),
      fc.record({ kind: fc.constant('next' as const), delivery: fc.nat(), bytes: fc.integer({ min: 0, max: 5_000 }) }),
      fc.record({ kind: fc.constant('ask' as const), delivery: fc.nat() }),
      fc.record({ kind: fc.constant('end' as const), delivery: fc.nat() }),
    );
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 20_000 }), fc.array(operation, { maxLength: 60 }), (max, operations) => {
        const bytes = new ClaimedBytes(max);
        // Each delivery as the test counts it: its batches, oldest first.
        const deliveries: { holding: HeldBatches; batches: number[] }[] = [];
        const pick = (index: number) => deliveries[index % deliveries.length];
        for (const step of operations) {
          if (step.kind === 'claim') deliveries.push({ holding: bytes.hold(step.bytes), batches: [step.bytes] });
          const delivery = step.kind === 'claim' || deliveries.length === 0 ? undefined : pick(step.delivery);
          if (delivery !== undefined && step.kind === 'next') {
            delivery.holding.add(step.bytes);
            delivery.batches.push(step.bytes);
          } else if (delivery !== undefined && step.kind === 'ask') {
            delivery.holding.keepLast();
            delivery.batches.splice(0, delivery.batches.length - 1);
          } else if (delivery !== undefined && step.kind === 'end') {
            delivery.holding.release();
            delivery.batches.length = 0;
          }
          const held = deliveries.reduce((sum, { batches }) => sum + batches.reduce((a, b) => a + b, 0), 0);
          expect(bytes.left).toBe(max - held);
          expect(bytes.shareFor(deliveries.length)).toBeLessThanOrEqual(bytes.left);
        }
        for (const { holding } of deliveries) holding.release();
        expect(bytes.left).toBe(max);
      }),
      { seed, numRuns: 300 },
    );
  });
});
