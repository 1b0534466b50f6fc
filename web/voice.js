// Voice messages: recorded with MediaRecorder, then decoded and resampled to 16 kHz mono and
// encoded as 16-bit WAV, the format every agent can read. This file owns the microphone and
// the recording controls; the page (app.js) shows and sends what was recorded.
import { MAX_AUDIO_BYTES } from '/protocol.js';

const RATE = 16000;
const MAX_RECORD_SECONDS = 240; // 16 kHz × 2 bytes × 240 s ≈ 7.3 MiB, under MAX_AUDIO_BYTES

/**
 * The recorder behind the page's mic button. `ui` holds its elements (mic, recLine, recTime,
 * bar); `notice(text)` tells the owner what went wrong; `onRecorded(wav, seconds)` gets a
 * finished recording (a WAV Blob of at most MAX_AUDIO_BYTES).
 */
export function initVoice({ ui, notice, onRecorded }) {
  let rec = null;

  async function start() {
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia || !window.MediaRecorder) {
      notice('Voice messages need a browser with microphone access on a secure page (https or localhost).');
      return;
    }
    rec = { starting: true };
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true } });
    } catch (e) {
      rec = null;
      notice(e && e.name === 'NotAllowedError' ? 'The microphone was refused. Allow it in the browser to send voice messages.' : 'No microphone could be opened, so no voice message was recorded.');
      return;
    }
    const chunks = [];
    const mr = new MediaRecorder(stream);
    mr.addEventListener('dataavailable', (e) => e.data && e.data.size && chunks.push(e.data));
    rec = { stream, mr, chunks, startedAt: Date.now() };
    rec.timer = setInterval(() => {
      const s = Math.floor((Date.now() - rec.startedAt) / 1000);
      ui.recTime.textContent = `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
      if (s >= MAX_RECORD_SECONDS) stop();
    }, 250);
    mr.start();
    ui.mic.setAttribute('aria-pressed', 'true');
    ui.mic.setAttribute('aria-label', 'Stop and send the voice message');
    ui.recTime.textContent = '0:00';
    ui.recLine.hidden = false;
    ui.bar.classList.add('recording');
  }

  function stop(cancel = false) {
    const r = rec;
    if (!r || r.starting) return;
    rec = null;
    clearInterval(r.timer);
    ui.mic.setAttribute('aria-pressed', 'false');
    ui.mic.setAttribute('aria-label', 'Record a voice message');
    ui.recLine.hidden = true;
    ui.bar.classList.remove('recording');
    r.mr.addEventListener('stop', () => {
      for (const t of r.stream.getTracks()) t.stop();
      if (!cancel) finish(r.chunks, r.mr.mimeType).catch(() => notice('The recording could not be encoded, so nothing was sent.'));
    }, { once: true });
    r.mr.stop();
  }

  async function finish(chunks, type) {
    const blob = new Blob(chunks, { type });
    if (!blob.size) {
      notice('Nothing was recorded.');
      return;
    }
    const ctx = new OfflineAudioContext(1, 1, RATE);
    const buf = await ctx.decodeAudioData(await blob.arrayBuffer()); // resampled to 16 kHz
    const n = buf.length;
    const mono = new Float32Array(n);
    for (let c = 0; c < buf.numberOfChannels; c++) {
      const d = buf.getChannelData(c);
      for (let i = 0; i < n; i++) mono[i] += d[i] / buf.numberOfChannels;
    }
    const wav = encodeWav(mono, RATE);
    if (wav.size > MAX_AUDIO_BYTES) {
      notice('The recording is over 8 MiB, so it was not sent.');
      return;
    }
    onRecorded(wav, Math.round(n / RATE));
  }

  return {
    /** True while recording (or while the microphone is being opened). */
    get active() {
      return rec !== null;
    },
    /** Starts recording, or stops and sends the recording under way. */
    toggle() {
      if (rec) stop();
      else start();
    },
    /** Stops a recording under way and throws it away. */
    cancel() {
      if (rec) stop(true);
    },
  };
}

function encodeWav(samples, rate) {
  const buf = new ArrayBuffer(44 + samples.length * 2);
  const v = new DataView(buf);
  const str = (o, s) => [...s].forEach((c, i) => v.setUint8(o + i, c.charCodeAt(0)));
  str(0, 'RIFF');
  v.setUint32(4, 36 + samples.length * 2, true);
  str(8, 'WAVE');
  str(12, 'fmt ');
  v.setUint32(16, 16, true);
  v.setUint16(20, 1, true); // PCM
  v.setUint16(22, 1, true); // mono
  v.setUint32(24, rate, true);
  v.setUint32(28, rate * 2, true);
  v.setUint16(32, 2, true);
  v.setUint16(34, 16, true);
  str(36, 'data');
  v.setUint32(40, samples.length * 2, true);
  for (let i = 0; i < samples.length; i++) {
    const s = Math.max(-1, Math.min(1, samples[i]));
    v.setInt16(44 + i * 2, s < 0 ? s * 0x8000 : s * 0x7fff, true);
  }
  return new Blob([buf], { type: 'audio/wav' });
}
