import type { Command } from 'commander';
import { z } from 'zod';
import { apiKeyScopes, createApiKey, listApiKeys, revokeApiKey, setApiKeyScopes, type ApiKeyScope } from '../auth/api-keys.ts';
import { CommandError, withDatabase } from './command.ts';
import { table } from './text.ts';

/** `api-key create | set-scopes | list | revoke`. */
export function registerApiKeyCommands(program: Command): void {
  const apiKey = program.command('api-key').description('create, list and revoke API keys');
  apiKey
    .command('create')
    .description('create an API key and print it once (only its hash is stored)')
    .requiredOption('--name <name>', 'who or what the key is for')
    .option(
      '--scopes <scopes>',
      'comma list of read (GET, searches), write (creates, updates, deletes, Bundles, subscriptions), admin (every subscription, not only its own)',
      'read,write',
    )
    .action((options: { name: string; scopes: string }) =>
      withDatabase(async ({ db }) => {
        const scopes = parseScopes(options.scopes);
        const { id, key } = await createApiKey(db, options.name, scopes);
        console.log(`Created API key ${id} (${options.name}, scopes ${scopes.join(', ')}).\nAPI key: ${key}\nIt is stored only as a hash: keep it now.`);
      }),
    );
  apiKey
    .command('set-scopes')
    .description(
      "give a key other scopes, the key itself unchanged (its subscriptions stay its own): e.g. read,write for a client's key made before scopes existed, which holds admin",
    )
    .argument('<id>', "the key's id, as api-key list shows it")
    .argument('<scopes>', 'comma list of read, write, admin')
    .action((id: string, scopesText: string) =>
      withDatabase(async ({ db }) => {
        const scopes = parseScopes(scopesText);
        if (!z.uuid().safeParse(id).success) throw new CommandError(`'${id}' is not an API key id (a UUID, as api-key list shows it).`, 2);
        if (!(await setApiKeyScopes(db, id, scopes))) throw new CommandError(`No active API key has id ${id}.`);
        console.log(`API key ${id} now has the scopes ${scopes.join(', ')}.`);
      }),
    );
  apiKey
    .command('list')
    .description('list API keys: id, creation time, state and name (the keys themselves are never stored)')
    .action(() =>
      withDatabase(async ({ db }) => {
        const rows = (await listApiKeys(db)).map((key) => [
          key.id,
          key.createdAt.toISOString(),
          key.revokedAt ? `revoked ${key.revokedAt.toISOString()}` : 'active',
          key.scopes.join(','),
          key.name,
        ]);
        console.log(rows.length === 0 ? 'No API keys.' : table(['ID', 'CREATED', 'STATE', 'SCOPES', 'NAME'], rows));
      }),
    );
  apiKey
    .command('revoke')
    .description('revoke an API key; it stops working at the next request')
    .argument('<id>', "the key's id, as api-key list shows it")
    .action((id: string) =>
      withDatabase(async ({ db }) => {
        const parsed = z.uuid().safeParse(id);
        if (!parsed.success) throw new CommandError(`'${id}' is not an API key id (a UUID, as api-key list shows it).`);
        if (!(await revokeApiKey(db, parsed.data))) throw new CommandError(`No active API key has id ${parsed.data}.`);
        console.log(`Revoked API key ${parsed.data}.`);
      }),
    );
}

/** A comma list of scopes, each one known: exit 2 otherwise. */
function parseScopes(text: string): ApiKeyScope[] {
  const scopes = text.split(',').map((scope) => scope.trim());
  const unknown = scopes.filter((scope) => !(apiKeyScopes as readonly string[]).includes(scope));
  if (unknown.length > 0 || scopes.length === 0) throw new CommandError(`Unknown scope ${unknown.join(', ')}: use read, write and admin.`, 2);
  return scopes as ApiKeyScope[];
}
