// hermes-mobile-client: the Protocol v1 client of hermes-mobile. protocol.js is a copy of the
// gateway's web/protocol.js (`npm run sync`); the types are in index.d.ts and frames.d.ts.
export * from './protocol.js';
