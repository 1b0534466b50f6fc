//! Core benchmarks. Each group carries its baseline in the same run (serde_json::Value
//! parse, plain base64 decode, plain serialization), so the ratio can be read off directly.
//! `cargo bench --bench core`; figures and goals are in docs/PERFORMANCE.md.

use std::hint::black_box;

use base64::Engine;
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use hermes_mobile::chunking::split_reply;
use hermes_mobile::uploads::Uploads;
use hermes_mobile::wire::client::MediaChunk;
use hermes_mobile::wire::parse_client_frame;
use hermes_mobile::wire::server::{encode, ChunkInfo, Message};
use hermes_mobile::{AgentCommand, Config, ConnId, Gateway, MessageId, Peer, Time};

const MIB: usize = 1024 * 1024;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn media_frame(len: usize) -> Vec<u8> {
    let data = vec![0xA5u8; len];
    format!(
        r#"{{"t":"media","id":"f-1","kind":"document","filename":"a.bin","part":0,"parts":1,"data":"{}"}}"#,
        b64(&data)
    )
    .into_bytes()
}

fn parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    let small = br#"{"t":"text","id":"msg-000123","text":"Turn on the lights in the kitchen, please."}"#.to_vec();
    let ping = br#"{"t":"ping","ts":1733140000123}"#.to_vec();
    let inputs = [
        ("text_small", small),
        ("ping", ping),
        ("media_1KiB", media_frame(1024)),
        ("media_3MiB", media_frame(3 * MIB)),
    ];
    for (name, bytes) in &inputs {
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        g.bench_with_input(BenchmarkId::new("parse_client_frame", name), bytes, |b, bytes| {
            b.iter(|| black_box(parse_client_frame(black_box(bytes)).is_ok()))
        });
        g.bench_with_input(BenchmarkId::new("baseline_serde_value", name), bytes, |b, bytes| {
            b.iter(|| black_box(serde_json::from_slice::<serde_json::Value>(black_box(bytes)).is_ok()))
        });
    }
    g.finish();
}

/// The base64 strings of a file cut into `parts` chunks.
fn chunks_of(data: &[u8], parts: usize) -> Vec<String> {
    let size = data.len().div_ceil(parts);
    data.chunks(size).map(b64).collect()
}

fn reassembly(c: &mut Criterion) {
    let mut g = c.benchmark_group("reassembly_8MiB");
    g.sample_size(20);
    let data: Vec<u8> = (0..8 * MIB).map(|i| (i % 251) as u8).collect();
    g.throughput(Throughput::Bytes(data.len() as u64));
    for parts in [3usize, 2048] {
        let chunks = chunks_of(&data, parts);
        let n = chunks.len() as u32;
        let in_order: Vec<usize> = (0..chunks.len()).collect();
        let reversed: Vec<usize> = in_order.iter().rev().copied().collect();
        // A fixed pseudo-random permutation (xorshift), so runs compare.
        let mut shuffled = in_order.clone();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        for (order_name, order) in [("in_order", in_order), ("reversed", reversed), ("shuffled", shuffled)] {
            g.bench_function(BenchmarkId::new(format!("uploads_{order_name}"), parts), |b| {
                b.iter_batched(
                    Uploads::default,
                    |mut uploads| {
                        let mut done = None;
                        for &i in &order {
                            let chunk = MediaChunk {
                                id: "f".into(),
                                kind: hermes_mobile::wire::UploadKind::Document,
                                mime: "".into(),
                                filename: "a.bin".into(),
                                caption: None,
                                data: chunks[i].as_str().into(),
                                part: i as u32,
                                parts: n,
                            };
                            done = Some(uploads.accept(Time::ZERO, &chunk));
                        }
                        black_box(done)
                    },
                    BatchSize::PerIteration,
                )
            });
        }
        g.bench_function(BenchmarkId::new("baseline_base64_decode", parts), |b| {
            b.iter(|| {
                let mut out = Vec::with_capacity(data.len());
                for c in &chunks {
                    base64::engine::general_purpose::STANDARD
                        .decode_vec(c.as_bytes(), &mut out)
                        .unwrap();
                }
                black_box(out)
            })
        });
    }
    g.finish();
}

fn splitting(c: &mut Criterion) {
    let mut g = c.benchmark_group("reply_100k_chars");
    let text: String = "Lorem ipsum dolor sit amet, consectetur adipiscing elit.\n".repeat(100_000 / 57 + 1);
    let text = &text[..100_000];
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.bench_function("split_reply", |b| {
        b.iter(|| black_box(split_reply(black_box(text), 3500).len()))
    });
    let pieces = split_reply(text, 3500);
    g.bench_function("serialize_frames", |b| {
        b.iter(|| {
            let total = pieces.len() as u32;
            let frames: Vec<String> = pieces
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    encode(
                        "message",
                        &Message {
                            id: "m-1".into(),
                            text: (*p).into(),
                            chunk: ChunkInfo { index: i as u32, total },
                            is_final: i as u32 + 1 == total,
                            edit: false,
                        },
                    )
                })
                .collect();
            black_box(frames)
        })
    });
    g.finish();
}

fn dispatch(c: &mut Criterion) {
    let mut g = c.benchmark_group("dispatch");
    let mut config = Config::new("token");
    config.dedup_window = std::time::Duration::from_secs(600);
    let mut gw = Gateway::new(config);
    let conn = ConnId(1);
    gw.handle_open(Time::ZERO, conn, Peer::default());
    gw.handle_message(
        Time::ZERO,
        conn,
        br#"{"t":"hello","token":"token","device":{"id":"tel-1"}}"#,
    );
    while gw.poll_output().is_some() {}
    let mut n = 0u64;
    let mut now = 0u64;
    g.bench_function("text_turn", |b| {
        b.iter(|| {
            n += 1;
            now += 1;
            let t = Time::from_millis(now);
            let frame = format!(r#"{{"t":"text","id":"m{n}","text":"hello there"}}"#);
            gw.handle_message(t, conn, frame.as_bytes());
            while let Some(event) = gw.poll_event() {
                let device = event.device().clone();
                let reply = AgentCommand::Reply {
                    device: device.clone(),
                    message: MessageId(format!("r{n}")),
                    text: "echo: hello there".into(),
                    done: true,
                };
                gw.handle_agent(t, reply).unwrap();
                gw.handle_agent(t, AgentCommand::EndTurn { device }).unwrap();
            }
            let mut frames = 0;
            while let Some(out) = gw.poll_output() {
                frames += 1;
                black_box(out);
            }
            gw.handle_timeout(t);
            frames
        })
    });
    g.finish();
}

/// A parser past the head of a chunked answer, ready for body chunks.
fn chunked_response() -> hermes_mobile::upstream::ResponseParser {
    let mut p = hermes_mobile::upstream::ResponseParser::new(false);
    let mut events = Vec::new();
    p.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", &mut events)
        .unwrap();
    p
}

/// One HTTP chunk through the response parser and the SSE decoder.
fn decode_chunk(
    p: &mut hermes_mobile::upstream::ResponseParser,
    d: &mut hermes_mobile::upstream::SseDecoder,
    chunk: &[u8],
    events: &mut Vec<hermes_mobile::upstream::ResponseEvent>,
    out: &mut Vec<hermes_mobile::upstream::SseItem>,
) {
    p.feed(chunk, events).unwrap();
    for e in events.drain(..) {
        if let hermes_mobile::upstream::ResponseEvent::Body(bytes) = e {
            d.feed(&bytes, out).unwrap();
        }
    }
}

/// One streamed token as an OpenAI-compatible server sends it (issue 11): decoding the
/// SSE event (and its HTTP chunk) must cost far less than parsing its JSON payload.
fn upstream(c: &mut Criterion) {
    use hermes_mobile::upstream::{
        parse_stream_data, Coalescer, SseDecoder, SseItem, StreamItem, DEFAULT_EDIT_INTERVAL,
    };
    let mut g = c.benchmark_group("upstream_token");
    let payload = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}"#;
    let event = format!("data: {payload}\n\n");
    let chunk = format!("{:x}\r\n{event}\r\n", event.len());
    g.throughput(Throughput::Elements(1));
    g.bench_function("sse_decode", |b| {
        let mut d = SseDecoder::default();
        let mut out = Vec::with_capacity(4);
        b.iter(|| {
            d.feed(black_box(event.as_bytes()), &mut out).unwrap();
            black_box(out.drain(..).count())
        })
    });
    g.bench_function("chunked_and_sse_decode", |b| {
        let mut p = chunked_response();
        let mut events = Vec::new();
        let mut d = SseDecoder::default();
        let mut out = Vec::with_capacity(4);
        b.iter(|| {
            decode_chunk(&mut p, &mut d, black_box(chunk.as_bytes()), &mut events, &mut out);
            black_box(out.drain(..).count())
        })
    });
    // The gateway's whole path for one token of an `openai:` stream: the chunked body,
    // the SSE event, its JSON payload, and the coalescer (an edit handed out every 30
    // tokens at 10 ms apart, as a fast model streams; the text restarts every 1,000).
    g.bench_function("token_in_to_coalesced_edit", |b| {
        let mut p = chunked_response();
        let mut events = Vec::new();
        let mut d = SseDecoder::default();
        let mut out = Vec::with_capacity(4);
        let mut coalescer = Coalescer::new(DEFAULT_EDIT_INTERVAL);
        let mut tokens = 0u64;
        b.iter(|| {
            tokens += 1;
            if tokens % 1000 == 0 {
                coalescer = Coalescer::new(DEFAULT_EDIT_INTERVAL);
            }
            let now = Time::from_millis(tokens * 10);
            let mut edits = 0;
            decode_chunk(&mut p, &mut d, black_box(chunk.as_bytes()), &mut events, &mut out);
            for item in out.drain(..) {
                if let SseItem::Event(ev) = item {
                    if let StreamItem::Delta(text) = parse_stream_data(&ev.data) {
                        edits += coalescer.push(now, &text).map_or(0, str::len);
                    }
                }
            }
            black_box(edits)
        })
    });
    g.bench_function("baseline_json_parse_of_the_payload", |b| {
        b.iter(|| black_box(serde_json::from_str::<serde_json::Value>(black_box(payload)).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, parse, reassembly, splitting, dispatch, upstream);
criterion_main!(benches);
