import { channelTypes, type ChannelType } from '../db/schema.ts';
import type { Channel } from './channel.ts';
import type { RestHookContext } from './rest-hook/calls.ts';
import { restHook } from './rest-hook/outbound.ts';
import { websocket } from './websocket/channel.ts';

/**
 * Every channel, by its channel type (webhook.subscriptions.channel_type; its
 * values are channelTypes in src/db/schema.ts): the rest of the service asks
 * here what a channel is and does, never compares channel types itself. A new
 * channel is one folder, one line here and a migration that allows its type
 * (src/channels/README.md).
 */

/** What a process that sends through every channel holds: the common context and each channel's own parts. */
export type SendContext = RestHookContext;

const channels: { [Type in ChannelType]: Channel<SendContext> } = {
  'rest-hook': restHook,
  websocket,
};

/** The channel of a subscription's channel_type. */
export function channelOf(type: ChannelType): Channel<SendContext> {
  return channels[type];
}

/** Every registered channel, in channelTypes' order. */
export const registeredChannels: readonly Channel<SendContext>[] = channelTypes.map(channelOf);

/** The channel a request's channel.type names, when one is registered by that name. */
export function channelNamed(type: unknown): Channel<SendContext> | undefined {
  return registeredChannels.find((channel) => channel.type === type);
}
