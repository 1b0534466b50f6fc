// push_subscribe: a well-formed subscription to an allowed push service is answered
// push_subscribed (the gateway POSTs nothing on subscribe); a host not allowed is forbidden.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createECDH, randomBytes } from 'node:crypto';
import { HermesError, base64UrlToBytes } from 'hermes-mobile-client';
import { assertFramesValid, closeClients, connected, expectSchemaRefusal, newClient, record, startGateway } from './helpers.mjs';

let gw;
let client;
before(async () => {
  gw = await startGateway();
  client = newClient(gw);
  await connected(client);
});
after(async () => {
  closeClients();
  await gw.stop();
  assertFramesValid();
});

/** A subscription as a browser makes it: a P-256 public point and a 16-byte secret. */
function subscription(endpoint) {
  const ecdh = createECDH('prime256v1');
  ecdh.generateKeys();
  return { endpoint, keys: { p256dh: ecdh.getPublicKey(), auth: randomBytes(16) } };
}

test('ready announces the VAPID key', () => {
  const key = base64UrlToBytes(client.webPushKey);
  assert.equal(key.length, 65);
  assert.equal(key[0], 4, 'an uncompressed P-256 point');
});

test('push_subscribe to an allowed host is answered push_subscribed', async () => {
  const answer = await client.pushSubscribe(subscription('https://fcm.googleapis.com/fcm/send/sdk-ts-test'), 'https://chat.example.org/');
  assert.equal(answer.t, 'push_subscribed');
  assert.match(answer.id, /^ps-/);
  assert.equal((await gw.healthz()).push_subscriptions, 1);
  // The toJSON() form, keys as base64url text: the same endpoint again replaces its keys.
  const s = subscription('https://fcm.googleapis.com/fcm/send/sdk-ts-test');
  const json = { endpoint: s.endpoint, keys: { p256dh: s.keys.p256dh.toString('base64url'), auth: s.keys.auth.toString('base64url') } };
  assert.equal((await client.pushSubscribe({ toJSON: () => json, endpoint: s.endpoint })).t, 'push_subscribed');
  assert.equal((await gw.healthz()).push_subscriptions, 1);
});

test('push_subscribe to a host not allowed is refused: forbidden', async () => {
  const errors = record(client, 'error');
  await assert.rejects(
    client.pushSubscribe(subscription('https://push.evil.example/fcm/send/x')),
    (e) => e instanceof HermesError && e.code === 'forbidden',
  );
  await assert.rejects(
    client.pushSubscribe(subscription('https://fcm.googleapis.com.evil.example/x')),
    (e) => e instanceof HermesError && e.code === 'forbidden',
  );
  assert.deepEqual(errors.map((e) => [e.code, e.request, e.fatal]), [
    ['forbidden', 'push_subscribe', false],
    ['forbidden', 'push_subscribe', false],
  ]);
  const bad = subscription('https://fcm.googleapis.com/fcm/send/y');
  bad.keys.auth = randomBytes(15);
  expectSchemaRefusal((f) => f.t === 'push_subscribe' && f.subscription.endpoint === bad.endpoint);
  await assert.rejects(client.pushSubscribe(bad), (e) => e instanceof HermesError && e.code === 'bad_frame');
  assert.equal(client.state, 'online', 'refusals are not fatal');
});

test('push_unsubscribe, then push_test with no subscription is refused', async () => {
  assert.equal((await client.pushUnsubscribe()).t, 'push_unsubscribed');
  assert.equal((await gw.healthz()).push_subscriptions, 0);
  await assert.rejects(client.pushTest(), (e) => e instanceof HermesError && e.code === 'forbidden');
});
