import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';

export type ReceivedMail = { mailFrom: string | undefined; rcptTo: string[]; raw: string };
export type SmtpServer = { url: string; received: ReceivedMail[]; close(): Promise<void> };

/** A real SMTP server on loopback, without TLS, that keeps what it takes and refuses the `refused` recipients. */
export async function startSmtpServerOnLoopback(refused: string[] = []): Promise<SmtpServer> {
  const received: ReceivedMail[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    // Its reverse lookup of 127.0.0.1 would ask the system's DNS servers, off loopback.
    disableReverseLookup: true,
    logger: false,
    onRcptTo(address, _session, callback) {
      callback(refused.includes(address.address) ? Object.assign(new Error('no such mailbox'), { responseCode: 550 }) : null);
    },
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      stream.on('end', () => {
        const mailFrom = session.envelope.mailFrom === false ? undefined : session.envelope.mailFrom.address;
        received.push({ mailFrom, rcptTo: session.envelope.rcptTo.map((to) => to.address), raw: Buffer.concat(chunks).toString('utf8') });
        callback(null);
      });
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `smtp://127.0.0.1:${(server.server.address() as AddressInfo).port}`,
    received,
    close: () => new Promise<void>((resolve) => server.close(resolve)),
  };
}
