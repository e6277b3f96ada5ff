use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::stream::{CHUNK_OVERHEAD, PollError, StreamState};
use crate::vocab::{EndErrorKind, EndInfo, FinishReason, Usage};

fn limits() -> StreamLimits {
    StreamLimits {
        idle_timeout: Duration::from_secs(300),
        max_stream_bytes: 1 << 20,
        max_total_bytes: 64 << 20,
        max_streams: 4,
        resume_grace: Duration::ZERO,
    }
}

fn finish(stream: &Stream) {
    stream.end_with(|usage| EndInfo::new(FinishReason::Stop, usage));
}

#[test]
fn seqs_are_contiguous_and_the_end_chunk_is_last_and_unique() {
    let manager = StreamManager::new(limits());
    let stream = manager.create("m", true).unwrap();
    assert!(stream.push("a", 1));
    assert!(stream.push("", 1));
    assert!(stream.push("b", 1));
    finish(&stream);
    assert!(!stream.push("late", 1), "pushes after the end are refused");
    assert!(!stream.abort("client"), "a second end is refused");
    let batch = stream.poll(0).unwrap();
    let seqs: Vec<u64> = batch.chunks.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, vec![0, 1, 2]);
    assert_eq!(batch.chunks.iter().filter(|c| c.end.is_some()).count(), 1);
    let end = batch.chunks.last().unwrap().end.clone().unwrap();
    assert_eq!(end.finish_reason, FinishReason::Stop);
    assert_eq!(end.usage.completion_tokens, 3);
    assert!(!batch.has_more);
}

#[test]
fn polling_the_same_from_seq_twice_returns_the_same_chunks() {
    let manager = StreamManager::new(limits());
    let stream = manager.create("m", true).unwrap();
    for word in ["x", "y", "z"] {
        stream.push(word, 1);
    }
    let first: Vec<u64> = stream
        .poll(1)
        .unwrap()
        .chunks
        .iter()
        .map(|c| c.seq)
        .collect();
    let again: Vec<u64> = stream
        .poll(1)
        .unwrap()
        .chunks
        .iter()
        .map(|c| c.seq)
        .collect();
    assert_eq!(first, vec![1, 2]);
    assert_eq!(first, again);
    assert_eq!(
        stream.poll(9).unwrap_err(),
        PollError::Ahead { next_seq: 3 },
        "acknowledging chunks that do not exist is refused"
    );
}

#[test]
fn acknowledged_chunks_are_freed_and_counted_back() {
    let manager = StreamManager::new(limits());
    let stream = manager.create("m", true).unwrap();
    stream.push("abcd", 1);
    stream.push("efgh", 1);
    assert_eq!(manager.total_bytes(), 2 * (4 + CHUNK_OVERHEAD));
    stream.poll(1).unwrap();
    assert_eq!(manager.total_bytes(), 4 + CHUNK_OVERHEAD);
    manager.remove(stream.id());
    drop(stream);
    assert_eq!(manager.total_bytes(), 0);
}

#[tokio::test]
async fn a_chunk_is_freed_only_after_every_consumer_passed_it() {
    let manager = StreamManager::new(limits());
    let stream = manager.create("m", false).unwrap();
    let mut fast = stream.attach(0);
    let slow = stream.attach(0);
    stream.push("abcd", 1);
    assert_eq!(fast.next_batch().await.len(), 1);
    assert_eq!(
        manager.total_bytes(),
        4 + CHUNK_OVERHEAD,
        "the slow consumer still needs it"
    );
    drop(slow);
    assert_eq!(manager.total_bytes(), 0);
}

#[test]
fn a_stream_over_its_buffer_limit_ends_with_an_error_and_others_are_untouched() {
    let manager = StreamManager::new(StreamLimits {
        max_stream_bytes: 3 * (10 + CHUNK_OVERHEAD),
        ..limits()
    });
    let slow = manager.create("m", true).unwrap();
    let other = manager.create("m", true).unwrap();
    let ten = "0123456789";
    assert!(slow.push(ten, 1));
    assert!(slow.push(ten, 1));
    assert!(slow.push(ten, 1));
    assert!(!slow.push(ten, 1), "the fourth chunk is over the limit");
    assert!(
        slow.cancel_token().is_cancelled(),
        "its generation is aborted"
    );
    let end = slow
        .poll(0)
        .unwrap()
        .chunks
        .last()
        .unwrap()
        .end
        .clone()
        .unwrap();
    assert_eq!(end.finish_reason, FinishReason::Error);
    let error = end.error.clone().unwrap();
    assert_eq!(error.kind, EndErrorKind::BufferLimit);
    assert_eq!(crate::rpc::end_error_code(error.kind), -32004);
    assert!(error.message.contains("too slow"), "{}", error.message);
    assert!(other.push(ten, 1));
    assert!(!other.cancel_token().is_cancelled());
}

#[test]
fn the_total_buffer_limit_ends_the_stream_that_overflows_it() {
    let manager = StreamManager::new(StreamLimits {
        max_total_bytes: 2 * (10 + CHUNK_OVERHEAD),
        ..limits()
    });
    let a = manager.create("m", true).unwrap();
    let b = manager.create("m", true).unwrap();
    assert!(a.push("0123456789", 1));
    assert!(b.push("0123456789", 1));
    assert!(!b.push("0123456789", 1));
    assert_eq!(b.status().0, StreamState::Error);
    assert_eq!(a.status().0, StreamState::Active);
}

#[test]
fn the_concurrent_stream_limit_counts_only_unfinished_streams() {
    let manager = StreamManager::new(limits());
    let streams: Vec<_> = (0..4).map(|_| manager.create("m", true).unwrap()).collect();
    assert_eq!(
        manager.create("m", true).unwrap_err(),
        StreamError::TooMany { limit: 4 }
    );
    finish(&streams[0]);
    assert!(manager.create("m", true).is_ok());
}

#[test]
fn unknown_ids_are_not_found() {
    let manager = StreamManager::new(limits());
    assert_eq!(
        manager.get("abcdefghijklmnop").unwrap_err(),
        StreamError::NotFound
    );
}

#[tokio::test(start_paused = true)]
async fn an_idle_stream_expires_its_generation_is_aborted_and_later_calls_are_told_so() {
    let manager = Arc::new(StreamManager::new(limits()));
    let reaper = manager.spawn_reaper();
    let stream = manager.create("m", true).unwrap();
    stream.push("hello", 1);
    let id = stream.id().to_owned();

    tokio::time::advance(Duration::from_secs(299)).await;
    tokio::task::yield_now().await;
    assert!(manager.get(&id).is_ok(), "not idle long enough yet");
    stream.poll(0).unwrap();

    tokio::time::advance(Duration::from_secs(200)).await;
    tokio::task::yield_now().await;
    assert!(manager.get(&id).is_ok(), "the poll reset the idle clock");

    tokio::time::advance(Duration::from_secs(110)).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(manager.get(&id).unwrap_err(), StreamError::Expired);
    assert!(
        stream.cancel_token().is_cancelled(),
        "the generation was aborted"
    );
    assert_eq!(stream.poll(0).unwrap_err(), PollError::Expired);
    assert_eq!(manager.total_bytes(), 0, "its chunks were freed");

    // The tombstone is forgotten after one more idle period.
    tokio::time::advance(Duration::from_secs(400)).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(manager.get(&id).unwrap_err(), StreamError::NotFound);
    reaper.abort();
}

#[tokio::test(start_paused = true)]
async fn dropping_the_reapers_guard_ends_the_reaper_and_lets_the_manager_go() {
    let manager = Arc::new(StreamManager::new(limits()));
    let reaper = manager.spawn_reaper();
    let live = reaper.live();
    tokio::time::advance(Duration::from_secs(10)).await;
    tokio::task::yield_now().await;
    assert_eq!(live.count(), 1, "the reaper runs");
    assert_eq!(
        Arc::strong_count(&manager),
        2,
        "the reaper holds the manager"
    );

    drop(reaper);
    live.ended().await;
    assert_eq!(Arc::strong_count(&manager), 1, "the reaper let it go");
}

#[tokio::test(start_paused = true)]
async fn an_attached_consumer_keeps_a_stream_from_expiring() {
    let manager = StreamManager::new(limits());
    let stream = manager.create("m", false).unwrap();
    let consumer = stream.attach(0);
    let later = Instant::now() + Duration::from_secs(3600);
    assert_eq!(manager.sweep(later), 0);
    drop(consumer);
    assert_eq!(
        stream.status().0,
        StreamState::Aborted,
        "its last consumer left"
    );
}

#[tokio::test]
async fn a_waiter_wakes_as_soon_as_a_chunk_is_pushed() {
    let manager = StreamManager::new(limits());
    let stream = manager.create("m", true).unwrap();
    let waiter = {
        let stream = Arc::clone(&stream);
        tokio::spawn(async move { stream.wait_for(0).await })
    };
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished());
    let pusher = std::thread::spawn(move || stream.push("x", 1));
    assert!(pusher.join().unwrap());
    waiter.await.unwrap();
}

#[test]
fn shutdown_ends_every_open_stream_with_abort_and_refuses_new_ones() {
    let manager = StreamManager::new(limits());
    let a = manager.create("m", true).unwrap();
    let b = manager.create("m", true).unwrap();
    finish(&b);
    assert_eq!(manager.shutdown(), 1);
    assert_eq!(a.status().0, StreamState::Aborted);
    assert_eq!(b.status().0, StreamState::Finished);
    assert_eq!(
        manager.create("m", true).unwrap_err(),
        StreamError::ShuttingDown
    );
    let usage = Usage::default();
    let end = a
        .poll(0)
        .unwrap()
        .chunks
        .last()
        .unwrap()
        .end
        .clone()
        .unwrap();
    assert_eq!(*end, EndInfo::new(FinishReason::Abort, usage));
}

#[test]
fn only_a_benchmark_mode_manager_stamps_chunks_with_their_production_time() {
    let plain = StreamManager::new(limits());
    let stream = plain.create("m", true).unwrap();
    stream.push("a", 1);
    finish(&stream);
    let chunks = stream.poll(0).unwrap().chunks;
    assert!(chunks.iter().all(|c| c.produced_ns.is_none()));

    let bench = StreamManager::new(limits()).with_timestamps(true);
    let stream = bench.create("m", true).unwrap();
    let before = crate::stream::monotonic_ns();
    stream.push("a", 1);
    assert!(stream.push_stamped("b", false, 1, Some(7)));
    finish(&stream);
    let after = crate::stream::monotonic_ns();
    let chunks = stream.poll(0).unwrap().chunks;
    let stamps: Vec<u64> = chunks.iter().map(|c| c.produced_ns.unwrap()).collect();
    assert!((before..=after).contains(&stamps[0]), "{stamps:?}");
    assert_eq!(stamps[1], 7, "a given production time is kept");
    assert!(
        (before..=after).contains(&stamps[2]),
        "the end chunk is stamped too"
    );
}

#[test]
fn texts_survive_partial_frees_and_compaction_of_the_shared_text_buffer() {
    let manager = StreamManager::new(StreamLimits {
        max_stream_bytes: 64 << 20,
        ..limits()
    });
    let stream = manager.create("m", true).unwrap();
    let text = |i: u64| format!("w{i}é ");
    let total = 20_000u64;
    for i in 0..total {
        assert!(stream.push(&text(i), 1));
    }
    finish(&stream);
    // Read in uneven steps; every step frees what came before it, so the
    // text buffer is compacted many times along the way.
    let mut from = 0;
    while from < total {
        let batch = stream.poll(from).unwrap();
        assert!(!batch.chunks.is_empty());
        for chunk in &batch.chunks {
            if chunk.seq < total {
                assert_eq!(&*chunk.delta, text(chunk.seq), "seq {}", chunk.seq);
            }
        }
        from += (batch.chunks.len() as u64 / 2).max(1);
    }
    let last = stream.poll(total).unwrap();
    assert_eq!(last.chunks.len(), 1);
    assert!(last.chunks[0].end.is_some());
    assert_eq!(
        manager.total_bytes(),
        CHUNK_OVERHEAD,
        "only the end chunk is still counted"
    );
}

#[tokio::test]
async fn a_reader_watching_the_prefill_gets_each_new_position_once_then_the_chunks() {
    let manager = StreamManager::new(limits());
    let stream = manager.create("m", false).unwrap();
    let mut watching = stream.attach(0);
    let mut plain = stream.attach(0);
    stream.set_initializing();
    stream.set_prefill(0, 600);
    stream.set_prefill(256, 600);
    // Only the latest position is told, once.
    let step = watching.next_watching_prefill().await;
    assert!(
        matches!(
            step,
            crate::stream::Next::Prefill {
                tokens: 256,
                of: 600
            }
        ),
        "{step:?}"
    );
    let waited =
        tokio::time::timeout(Duration::from_millis(50), watching.next_watching_prefill()).await;
    assert!(waited.is_err(), "a position is told once: {waited:?}");
    stream.set_prefill(512, 600);
    stream.push("abc", 1);
    // A chunk waiting comes first, and the prefill is over once it does.
    let step = watching.next_watching_prefill().await;
    let crate::stream::Next::Chunks(chunks) = step else {
        panic!("{step:?}");
    };
    assert_eq!(&*chunks[0].delta, "abc");
    assert_eq!(stream.prefill(), None);
    // A reader that does not watch gets the chunks only.
    assert_eq!(&*plain.next_batch().await[0].delta, "abc");
}
