import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';

/**
 * The quick start's webhook receiver: prints every call it gets (headers and
 * body) and whether its X-Hub-Signature matches SECRET. Listens on
 * 127.0.0.1:$RECEIVER_PORT (9000 by default).
 */

function isFromTheService(rawBody: Buffer, signatureHeader: string | undefined, secret: string): boolean {
  const expected = Buffer.from(`sha256=${createHmac('sha256', secret).update(rawBody).digest('hex')}`);
  const received = Buffer.from(signatureHeader ?? '');
  return received.length === expected.length && timingSafeEqual(received, expected);
}

const secret = process.env.SECRET ?? '';
const hiddenHeaders = new Set(['secret', 'authorization']);
const port = Number(process.env.RECEIVER_PORT ?? 9000);

createServer((request, response) => {
  const chunks: Buffer[] = [];
  request.on('data', (chunk: Buffer) => chunks.push(chunk));
  request.on('end', () => {
    const body = Buffer.concat(chunks);
    const signature = isFromTheService(body, request.headers['x-hub-signature']?.toString(), secret) ? 'signature ok' : 'signature does NOT match SECRET';
    console.log(`\n${request.method} ${request.url} (${signature})`);
    // The secret header is the signing key itself, and Authorization a credential: never print or log them.
    for (const [name, value] of Object.entries(request.headers)) console.log(`${name}: ${hiddenHeaders.has(name) ? '(not shown)' : String(value)}`);
    console.log(`\n${body.toString()}`);
    // Answer at once; a real receiver processes the event afterwards.
    response.writeHead(200).end();
  });
}).listen(port, '127.0.0.1', () => console.log(`Receiver listening on http://127.0.0.1:${port}`));
