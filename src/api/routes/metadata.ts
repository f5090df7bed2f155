import type { FastifyPluginAsync } from 'fastify';
import { resourceTypes } from '../../fhir/definitions.ts';
import { isSupported, searchParametersOf, type SearchParameter } from '../../search/parameters.ts';
import type { Db } from '../../db/database.ts';
import { websocketUrl } from '../../channels/websocket/channel.ts';
import { channelTypeSystem, registeredChannels } from '../../channels/registry.ts';
import { backport } from '../../topics/backport.ts';
import { activeTopicCanonicals } from '../../topics/store.ts';
import { fhirJson } from '../errors.ts';
import { commonRefusals, fhirOperation, resource } from '../schemas.ts';

export type MetadataRoutesOptions = { db: Db; serviceBase: string; softwareVersion: string };

/**
 * GET /metadata: the CapabilityStatement. It states only what is implemented;
 * each feature that lands adds itself here. The topics are read on each
 * request: an operator adds and retires them while the service runs.
 */
export const metadataRoutes: FastifyPluginAsync<MetadataRoutesOptions> = async (app, { db, serviceBase, softwareVersion }) => {
  const capabilityStatement = {
    resourceType: 'CapabilityStatement',
    status: 'active',
    date: new Date().toISOString(),
    kind: 'instance',
    software: { name: 'fhir-webhooks', version: softwareVersion },
    implementation: { description: 'FHIR R4 webhook subscription service', url: serviceBase },
    // The Backport IG's R4 server CapabilityStatement (topic-based subscriptions).
    instantiates: [backport.serverCapabilities],
    fhirVersion: '4.0.1',
    format: ['application/fhir+json', 'application/json'],
    patchFormat: ['application/json-patch+json'],
    rest: [
      {
        // Where a websocket subscription's clients connect (the IG's websocket flow; $get-ws-binding-token answers it too).
        extension: [
          {
            url: 'http://hl7.org/fhir/StructureDefinition/capabilitystatement-websocket',
            valueUri: websocketUrl(serviceBase.replace(/\/fhir\/resources$/, '')),
          },
        ],
        mode: 'server',
        security: { description: 'Every request carries an API key in the x-api-key header.' },
        resource: [...resourceTypes]
          .sort()
          .map((type) => (type === 'Subscription' ? subscriptionCapabilities(serviceBase, []) : storedResourceCapabilities(type))),
        interaction: ['transaction', 'batch', 'history-system'].map((code) => ({ code })),
        searchParam: [
          { name: '_has', type: 'special', documentation: 'Reverse chaining, one level: _has:Type:reference:parameter=value (also in subscription criteria).' },
          { name: '_summary', type: 'token', documentation: 'count only (REST search; not in subscription criteria).' },
          { name: '_elements', type: 'token', documentation: 'Top-level elements of the matches (REST search; not in subscription criteria).' },
        ],
      },
    ],
  };
  const [server] = capabilityStatement.rest;
  /** The statement with the topics active now on its Subscription entry. */
  const withTopics = (topics: string[]) => ({
    ...capabilityStatement,
    rest: [{ ...server, resource: server!.resource.map((entry) => (entry.type === 'Subscription' ? subscriptionCapabilities(serviceBase, topics) : entry)) }],
  });

  app.get(
    '/metadata',
    {
      schema: {
        summary: 'The CapabilityStatement of this server: every type, interaction and search parameter it supports',
        ...fhirOperation('Server', 'capabilities'),
        response: { 200: resource.describe('A CapabilityStatement'), ...commonRefusals },
      },
    },
    async (_request, reply) => reply.type(fhirJson).send(withTopics(await activeTopicCanonicals(db))),
  );
};

function storedResourceCapabilities(type: string) {
  return {
    type,
    ...searchCapabilities(type),
    versioning: 'versioned-update',
    readHistory: true,
    updateCreate: true,
    conditionalCreate: true,
    conditionalUpdate: true,
    conditionalDelete: 'single',
    interaction: ['read', 'vread', 'update', 'patch', 'delete', 'history-instance', 'history-type', 'create', 'search-type'].map((code) => ({ code })),
  };
}

/** What a topic's trigger may say, for a client choosing how to write one (docs/topics.md has the whole of it). */
const topicTriggerDocumentation =
  "A topic's resourceTrigger is decided in the writing transaction by its queryCriteria and its fhirPathCriteria (both must hold when both are given). " +
  'fhirPathCriteria is compiled to SQL for this FHIRPath subset: paths over the R4 model, ofType(), is and as on choice elements, extension(url), ' +
  'where(), all(), exists(), empty(), count(), first(), last(), not(), iif(), and/or/xor/implies, = != in contains | on strings, numbers, Booleans and elements, ' +
  "= != < <= > >= on strings, numbers, dates, dateTimes and times (at their precisions; UTC where no offset is given), today() and now() at the write's transaction time, " +
  '~ !~ of single strings, Booleans, integers, dates and times, startsWith(), endsWith(), contains(), matches() (patterns PostgreSQL matches as JavaScript does), ' +
  'upper(), lower(), length(), with %current and %previous. Any other construct (quantities among them) is refused by name when the topic is added.';

/**
 * Subscriptions have their own endpoints (the spec's): create or switch off,
 * read, search; no update, delete or history. On topics too (the Backport
 * IG): each active topic is named by an extension, and $status and $events
 * are offered. The service's own operations ($resend, $reactivate,
 * $rotate-secret) have canonical URLs under its base: no IG defines them.
 */
function subscriptionCapabilities(serviceBase: string, topics: string[]) {
  return {
    ...(topics.length === 0 ? {} : { extension: topics.map((valueCanonical) => ({ url: backport.topicCanonical, valueCanonical })) }),
    type: 'Subscription',
    supportedProfile: [backport.subscriptionProfile],
    documentation: topicTriggerDocumentation,
    versioning: 'versioned',
    readHistory: false,
    updateCreate: false,
    interaction: ['create', 'read', 'search-type'].map((code) => ({ code })),
    searchParam: [
      { name: '_tag', type: 'token' },
      { name: 'criteria', type: 'string', documentation: 'the exact criteria string' },
      { name: 'url', type: 'uri' },
      { name: 'status', type: 'token' },
      {
        name: 'custom-channel',
        definition: 'http://hl7.org/fhir/uv/subscriptions-backport/SearchParameter/Subscription-custom-channel',
        type: 'token',
        documentation: `the custom channels: ${customChannels(serviceBase)}`,
      },
    ],
    // An operation's name is its code without the '$' (invoked as $status).
    operation: [
      { name: 'status', definition: backport.statusOperation },
      { name: 'events', definition: backport.eventsOperation },
      { name: 'get-ws-binding-token', definition: backport.getWsBindingTokenOperation },
      ...['resend', 'reactivate', 'rotate-secret'].map((name) => ({ name, definition: `${serviceBase}/OperationDefinition/Subscription-${name}` })),
    ],
  };
}

/** The custom channels a subscription may use (the Backport IG's backport-channel-type codes), for a client choosing one. */
function customChannels(serviceBase: string): string {
  const system = channelTypeSystem(serviceBase.replace(/\/fhir\/resources$/, ''));
  return registeredChannels
    .filter((channel) => channel.custom !== undefined)
    .map((channel) => `${system}|${channel.type} (channel.type ${channel.custom!.r4Type}; docs/brokers.md)`)
    .join(', ');
}

function supportedParameters(type: string): SearchParameter[] {
  return [...searchParametersOf(type).values()].filter(isSupported);
}

/** What R4's CapabilityStatement cannot say in a field: modifiers, prefixes, chains, a composite's parts. */
function documentation(parameter: SearchParameter): string | undefined {
  switch (parameter.type) {
    case 'reference':
      return `:missing, :Type; chains one level (${parameter.code}.parameter, ${parameter.code}:Type.parameter)`;
    case 'composite':
      return `parts separated by $: ${parameter.roots[0]!.components.map((component) => component.code).join('$')}`;
    case 'uri':
      return ':missing, :above, :below';
    case 'number':
    case 'quantity':
      return 'prefixes eq ne gt lt ge le sa eb ap; :missing';
    case 'date':
      return 'prefixes eq ne gt lt ge le sa eb, and ap in REST search; :missing';
    case 'token':
      return ':missing, :not, :text';
    case 'string':
      return ':missing, :exact, :contains';
  }
}

/** What a search on `type` accepts: its supported parameters, and the includes that reach or leave it. */
function searchCapabilities(type: string) {
  const parameters = supportedParameters(type);
  const references = parameters.filter((parameter) => parameter.type === 'reference');
  const revIncludes = [...resourceTypes].sort().flatMap((source) =>
    supportedParameters(source)
      .filter((parameter) => parameter.type === 'reference' && parameter.targets.includes(type))
      .map(({ code }) => `${source}:${code}`),
  );
  return {
    searchParam: parameters.map((parameter) => ({ name: parameter.code, type: parameter.type, documentation: documentation(parameter) })),
    // FHIR JSON has no empty arrays: a type without references has no searchInclude.
    ...(references.length === 0 ? {} : { searchInclude: [...references.map(({ code }) => `${type}:${code}`), `${type}:*`, '*'] }),
    ...(revIncludes.length === 0 ? {} : { searchRevInclude: revIncludes }),
  };
}
