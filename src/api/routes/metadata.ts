import type { FastifyPluginAsync } from 'fastify';
import { resourceTypes } from '../../fhir/definitions.ts';
import { fhirJson } from '../errors.ts';

export type MetadataRoutesOptions = { serviceBase: string; softwareVersion: string };

/**
 * GET /metadata: the CapabilityStatement. It states only what is implemented;
 * each feature that lands adds itself here.
 */
export const metadataRoutes: FastifyPluginAsync<MetadataRoutesOptions> = async (app, { serviceBase, softwareVersion }) => {
  const capabilityStatement = {
    resourceType: 'CapabilityStatement',
    status: 'active',
    date: new Date().toISOString(),
    kind: 'instance',
    software: { name: 'fhir-webhooks', version: softwareVersion },
    implementation: { description: 'FHIR R4 webhook subscription service', url: serviceBase },
    fhirVersion: '4.0.1',
    format: ['application/fhir+json', 'application/json'],
    rest: [
      {
        mode: 'server',
        security: { description: 'Every request carries an API key in the x-api-key header.' },
        resource: [...resourceTypes].sort().map((type) => ({
          type,
          versioning: 'versioned-update',
          readHistory: true,
          updateCreate: true,
          conditionalCreate: false,
          conditionalUpdate: false,
          conditionalDelete: 'not-supported',
          interaction: ['read', 'vread', 'update', 'delete', 'history-instance', 'create'].map((code) => ({ code })),
        })),
        interaction: [{ code: 'transaction' }, { code: 'batch' }],
      },
    ],
  };

  app.get('/metadata', { schema: { summary: 'The CapabilityStatement of this server' } }, async (_request, reply) =>
    reply.type(fhirJson).send(capabilityStatement),
  );
};
