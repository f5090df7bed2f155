import { describe, expect, it } from 'vitest';
import { bindingEnded, clientMessageIn, closeReason, pong, refusalIssueType, refusals } from '../../../src/channels/websocket/messages.ts';

/**
 * The words of the websocket protocol (src/channels/websocket/messages.ts):
 * what a client may say, and how the server answers a ping and words a refusal.
 */

describe('clientMessageIn', () => {
  it('reads the text bind, with a space or a colon, around blanks', () => {
    expect(clientMessageIn('bind-with-token abc')).toEqual({ type: 'bind-with-token', token: 'abc' });
    expect(clientMessageIn('  bind-with-token:  abc \n')).toEqual({ type: 'bind-with-token', token: 'abc' });
    expect(clientMessageIn('bind-with-token: abc')).toEqual({ type: 'bind-with-token', token: 'abc' });
  });

  it("reads Medplum's JSON bind, unbind and ping", () => {
    expect(clientMessageIn('{"type":"bind-with-token","payload":{"token":"abc"}}')).toEqual({ type: 'bind-with-token', token: 'abc' });
    expect(clientMessageIn('{"type":"unbind-from-token","payload":{"token":"abc"}}')).toEqual({ type: 'unbind-from-token', token: 'abc' });
    expect(clientMessageIn('{"type":"ping"}')).toEqual({ type: 'ping' });
  });

  it('understands nothing else', () => {
    for (const message of [
      '',
      'bind-with-token',
      'bind-with-token a b',
      'bind-with-tokenabc',
      'unbind-from-token abc',
      'ping',
      'null',
      '42',
      '{"type":"pong"}',
      '{"type":"bind-with-token"}',
      '{"type":"bind-with-token","payload":{"token":""}}',
      '{"type":"unbind-from-token","payload":{"token":7}}',
      '{"type":"bind-with-token","payload":null}',
      '{not json',
    ]) {
      expect(clientMessageIn(message), message).toBeUndefined();
    }
  });
});

describe("the server's answers", () => {
  it("answers a ping in Medplum's server's words", () => {
    expect(JSON.parse(pong)).toEqual({ type: 'pong' });
  });

  it('words a refused token or key as a security issue, a message not understood as an invalid one, the others as processing', () => {
    expect(refusalIssueType('token')).toBe('security');
    expect(refusalIssueType('key-limit')).toBe('security');
    expect(refusalIssueType('malformed')).toBe('invalid');
    for (const reason of ['shutdown', 'server-full', 'idle', 'subscription-ended'] as const) expect(refusalIssueType(reason)).toBe('processing');
  });

  it('closes with the codes of RFC 6455: going away, unsupported data, internal error', () => {
    expect(refusals.stopping).toEqual({ reason: 'shutdown', code: 1001, text: 'The service is stopping' });
    expect([refusals.binaryFrame.code, refusals.unknownMessage.code]).toEqual([1003, 1003]);
    expect(refusals.bindFailed).toMatchObject({ reason: 'token', code: 1011 });
  });

  it('closes a client whose last binding was switched off (1000), or whose key was revoked (1008); else only tells it', () => {
    expect(bindingEnded('s1', true, true)).toEqual({
      reason: 'subscription-ended',
      code: 1000,
      text: 'Subscription/s1 was switched off: nothing more is sent for it',
      closes: true,
    });
    expect(bindingEnded('s1', true, false)).toMatchObject({ code: 1000, closes: false });
    expect(bindingEnded('s1', false, false)).toEqual({
      reason: 'subscription-ended',
      code: 1008,
      text: 'The API key that bound this client was revoked',
      closes: true,
    });
  });
});

describe('closeReason', () => {
  it('keeps a reason of up to 123 bytes', () => {
    expect(closeReason('The service is stopping')).toBe('The service is stopping');
    expect(closeReason('x'.repeat(123))).toBe('x'.repeat(123));
  });

  it('cuts a longer one to 123 bytes, ending in an ellipsis', () => {
    const cut = closeReason('x'.repeat(200));
    expect(cut).toBe(`${'x'.repeat(120)}...`);
    expect(Buffer.byteLength(cut)).toBe(123);
  });

  it('never cuts a character in two', () => {
    // 'é' is two bytes: the 120-byte cut falls inside the 60th of them (after one 'x').
    const cut = closeReason(`x${'é'.repeat(100)}`);
    expect(cut).toBe(`x${'é'.repeat(59)}...`);
    expect(cut).not.toContain('\uFFFD');
    expect(Buffer.byteLength(cut)).toBeLessThanOrEqual(123);
  });
});
