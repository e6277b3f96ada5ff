//! Micro-benchmarks: the stream manager's push and drain, and the JSON
//! encoding of a chunk as it goes on the wire. Run with
//! `cargo bench -p rkllm-bench`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use rkllm_server::rpc::chunk_notification;
use rkllm_server::stream::{StreamLimits, StreamManager};
use rkllm_server::vocab::{EndInfo, FinishReason};

fn limits() -> StreamLimits {
    StreamLimits {
        idle_timeout: Duration::from_secs(300),
        max_stream_bytes: 1 << 30,
        max_total_bytes: 1 << 30,
        max_streams: 1 << 20,
        resume_grace: Duration::ZERO,
    }
}

/// Tokens of the kind the mock produces: 2–4 bytes, some multi-byte.
const DELTAS: [&str; 4] = ["th", "e ", "NP", "é "];

fn push_and_drain(c: &mut Criterion) {
    let mut group = c.benchmark_group("stream");
    const CHUNKS: u64 = 1000;
    group.throughput(Throughput::Elements(CHUNKS));
    let manager = StreamManager::new(limits());
    group.bench_function("push 1000 chunks, then poll them all", |b| {
        b.iter_batched(
            || manager.create("m", true).unwrap(),
            |stream| {
                for i in 0..CHUNKS {
                    stream.push(DELTAS[(i % 4) as usize], 1);
                }
                stream.end_with(|usage| EndInfo::new(FinishReason::Stop, usage));
                let mut from = 0;
                loop {
                    let batch = stream.poll(from).unwrap();
                    from += batch.chunks.len() as u64;
                    if !batch.has_more {
                        break;
                    }
                }
                manager.remove(stream.id());
                black_box(from)
            },
            BatchSize::SmallInput,
        );
    });
    group.bench_function(
        "push 1000 chunks to an attached consumer, chunk by chunk",
        |b| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            b.iter_batched(
                || manager.create("m", false).unwrap(),
                |stream| {
                    let mut consumer = stream.attach(0);
                    let mut taken = 0;
                    for i in 0..CHUNKS {
                        stream.push(DELTAS[(i % 4) as usize], 1);
                        taken += runtime.block_on(consumer.next_batch()).len();
                    }
                    stream.end_with(|usage| EndInfo::new(FinishReason::Stop, usage));
                    drop(consumer);
                    manager.remove(stream.id());
                    black_box(taken)
                },
                BatchSize::SmallInput,
            );
        },
    );
    group.finish();
}

fn encode(c: &mut Criterion) {
    let manager = StreamManager::new(limits());
    let stream = manager.create("m", true).unwrap();
    stream.push("streams é ", 1);
    stream.end_with(|usage| EndInfo::new(FinishReason::Stop, usage));
    let chunks = stream.poll(0).unwrap().chunks;
    let mut group = c.benchmark_group("encode");
    group.throughput(Throughput::Elements(1));
    group.bench_function("text chunk as a run notification", |b| {
        b.iter(|| chunk_notification(black_box("abcdefgh12345678"), black_box(&chunks[0])));
    });
    group.bench_function("end chunk as a run notification", |b| {
        b.iter(|| chunk_notification(black_box("abcdefgh12345678"), black_box(&chunks[1])));
    });
    group.finish();
}

criterion_group!(benches, push_and_drain, encode);
criterion_main!(benches);
