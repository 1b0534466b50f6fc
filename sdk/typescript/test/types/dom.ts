// Type-level checks in a browser project (lib DOM, no Node types): compiled by
// `tsc --noEmit --strict -p test/types/tsconfig.dom.json`, never run.
import { HermesClient } from 'hermes-mobile-client';

const client = new HermesClient({
  token: localStorage.getItem('token') ?? '',
  WebSocket,
  lifecycle: { document, window },
});
client.addEventListener('media', (e) => {
  if (e.detail.blob) URL.createObjectURL(e.detail.blob);
});
const listener = (e: CustomEvent<{ state: string }>) => void e.detail.state;
client.addEventListener('status', listener);

async function subscribe(reg: ServiceWorkerRegistration): Promise<void> {
  const sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: client.webPushKey });
  await client.pushSubscribe(sub, location.href);
}
const file = new File(['x'], 'x.txt', { type: 'text/plain' });
client.sendFile(file, { caption: 'the plan' });
void subscribe;
