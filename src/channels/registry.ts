import type { Config } from '../config/index.ts';
import { channelTypes, type ChannelType } from '../db/schema.ts';
import type { Channel, ChannelContext, ProcessParts } from './channel.ts';
import { createRestHookCalls, type RestHookContext } from './rest-hook/calls.ts';
import { restHook } from './rest-hook/outbound.ts';
import { websocket } from './websocket/channel.ts';
import { natsJetStream, openNatsParts, type NatsContext } from './nats-jetstream/channel.ts';
import { openRabbitParts, rabbitmq, type RabbitContext } from './rabbitmq/channel.ts';

/**
 * Every channel, by its channel type (webhook.subscriptions.channel_type; its
 * values are channelTypes in src/db/schema.ts): the rest of the service asks
 * here what a channel is and does, never compares channel types itself. A new
 * channel is one folder, its lines here and a migration that allows its type
 * (src/channels/README.md).
 */

/** What a process that sends through every channel holds: the common context and each channel's own parts. */
export type SendContext = RestHookContext & NatsContext & RabbitContext;

/** Each channel's own parts: what SendContext holds beyond the common context and the settings. */
export type SendParts = Omit<SendContext, keyof ChannelContext | 'metrics'>;

/** The parts every channel sends with, made once by a process that sends (src/dispatch/subscriber.ts), and closed with it. */
export function openSendParts(delivery: Config['delivery'], oauth: Config['oauth']): ProcessParts<SendParts> {
  const restHookCalls = createRestHookCalls(delivery, oauth);
  const nats = openNatsParts(delivery);
  const rabbit = openRabbitParts(delivery);
  return {
    parts: { ...restHookCalls.calls, ...nats.parts, ...rabbit.parts },
    close: async () => {
      await Promise.all([restHookCalls.close(), nats.close(), rabbit.close()]);
    },
  };
}

const channels: { [Type in ChannelType]: Channel<SendContext> } = {
  'rest-hook': restHook,
  websocket,
  'nats-jetstream': natsJetStream,
  rabbitmq,
};

/** The channel of a subscription's channel_type. */
export function channelOf(type: ChannelType): Channel<SendContext> {
  return channels[type];
}

/** Every registered channel, in channelTypes' order. */
export const registeredChannels: readonly Channel<SendContext>[] = channelTypes.map(channelOf);

/** The channel a request's channel.type names, when one is registered by that name (R4's codes: not a custom channel). */
export function channelNamed(type: unknown): Channel<SendContext> | undefined {
  return registeredChannels.find((channel) => channel.type === type && channel.custom === undefined);
}

/** The Backport IG's extension on Subscription.channel.type that names a channel R4 has no code for. */
export const backportChannelType = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition/backport-channel-type';

/** The system of the service's own channel-type codes (backport-channel-type's valueCoding), named under its base. */
export function channelTypeSystem(baseUrl: string): string {
  return `${baseUrl}/fhir/resources/CodeSystem/channel-type`;
}

/**
 * The channel a request's Subscription.channel asks for: a custom channel
 * when channel._type carries backport-channel-type with a code of the
 * service's system (and channel.type is that channel's R4 type), else the
 * channel its type names. Undefined when none is registered so.
 */
export function requestedChannel(element: unknown, baseUrl: string): Channel<SendContext> | undefined {
  const { type, _type: typeElement } = (typeof element === 'object' && element !== null ? element : {}) as { type?: unknown; _type?: { extension?: unknown } };
  const extensions = Array.isArray(typeElement?.extension)
    ? (typeElement.extension as { url?: unknown; valueCoding?: { system?: unknown; code?: unknown } }[])
    : [];
  const coding = extensions.find((item) => item?.url === backportChannelType)?.valueCoding;
  if (coding === undefined) return channelNamed(type);
  return registeredChannels.find((channel) => channel.custom !== undefined && coding.system === channelTypeSystem(baseUrl) && coding.code === channel.type);
}

/** A channel's Subscription.channel type as R4 writes it: its own code, or for a custom channel the R4 type and the extension. */
export function channelTypeElement(type: ChannelType, baseUrl: string): { type: string; _type?: { extension: unknown[] } } {
  const channel = channelOf(type);
  if (channel.custom === undefined) return { type };
  return {
    type: channel.custom.r4Type,
    _type: { extension: [{ url: backportChannelType, valueCoding: { system: channelTypeSystem(baseUrl), code: type } }] },
  };
}
