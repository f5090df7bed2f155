/**
 * The bare sender (rows/ceilings.ts's receiver ceiling), a process of its own
 * so that it shares no event loop with the bench: reads a BareSending as JSON
 * on stdin, POSTs every body to the endpoint with the headers and signatures
 * the rest-hook channel puts on a delivery, over the channel's agent, with as
 * many calls in flight as the dispatcher makes to one subscription
 * (DELIVERY_PARALLEL_CALLS), and writes a BareSent as JSON on stdout. Nothing
 * else a delivery does: no claim, no build, no record.
 */
import { text } from 'node:stream/consumers';
import { request } from 'undici';
import { createRestHookCalls } from '../../../src/channels/rest-hook/calls.ts';
import { messageId, outboundHeaders } from '../../../src/channels/rest-hook/outbound.ts';
import { loadConfig } from '../../../src/config/index.ts';

/** What to send: the subscription's endpoint, its channel.header items and signing secret, and the bodies (JSON text, as the channel sends them). */
export type BareSending = { endpoint: string; channelHeaders: string[]; secret: string; bodies: string[] };
/** What it took: the seconds from the first call to the last answer, with the calls in flight. */
export type BareSent = { seconds: number; parallelCalls: number };

const sending = JSON.parse(await text(process.stdin)) as BareSending;
// The environment the dispatcher processes get: the same delivery settings, so the same agent and calls in flight.
const { delivery } = loadConfig();
const { calls, close } = createRestHookCalls(delivery, undefined);
const bodies = sending.bodies.map((body) => Buffer.from(body));
let next = 0;
const started = performance.now();
await Promise.all(
  Array.from({ length: delivery.parallelCalls }, async () => {
    while (next < bodies.length) {
      const index = next++;
      const body = bodies[index]!;
      const standard = delivery.standardSignatures ? { messageId: messageId('bare-sender', String(index)) } : undefined;
      const headers = outboundHeaders(sending.channelHeaders, body, { current: sending.secret, previous: undefined }, undefined, standard);
      const response = await request(sending.endpoint, { method: 'POST', body, headers: headers.flat(), dispatcher: calls.dispatcher });
      await response.body.dump();
      if (response.statusCode !== 200) throw new Error(`the receiver answered ${response.statusCode}`);
    }
  }),
);
const seconds = (performance.now() - started) / 1000;
await close();
process.stdout.write(JSON.stringify({ seconds, parallelCalls: delivery.parallelCalls } satisfies BareSent));
