//! One queued generation, and how it is run on a runner: the stream is
//! fed through a [`TokenSink`], ended with the outcome, and counted.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

use super::keep_alive::KeepAlive;
use crate::backend::{BackendError, Runner, TokenSink, ValidRunRequest};
use crate::stream::Stream;
use crate::vocab::{EndErrorKind, EndInfo, FinishReason, Timings, Usage};

/// A request waiting in its model's queue.
pub(super) struct Job {
    pub stream: Arc<Stream>,
    pub request: ValidRunRequest,
    pub enqueued: Instant,
    /// Stop strings of a server-side template.
    pub stop: Vec<String>,
    /// How the model's replies carry thinking.
    pub reasoning: crate::model::reasoning::ReasoningMode,
    /// How long the model stays loaded after this job (`None`: the default).
    pub keep_alive: Option<KeepAlive>,
    /// Its lane in the model's queue.
    pub priority: super::Priority,
    /// The conversation it belongs to (`crate::service::conversation`).
    pub conversation: Option<String>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("model", &self.request.model)
            .finish_non_exhaustive()
    }
}

/// Counts a generation that ran and writes its log line.
fn record_generation(
    stream: &Stream,
    lane: super::Priority,
    finish_reason: FinishReason,
    usage: Usage,
    timings: &Timings,
    memory_mb: Option<f64>,
) {
    crate::metrics::generation(
        stream.model(),
        timings.queue_ms,
        timings.prefill_ms,
        usage.completion_tokens,
        timings.tokens_per_second,
        memory_mb,
    );
    tracing::info!(
        model = stream.model(),
        lane = lane.as_str(),
        finish_reason = finish_reason.as_str(),
        prompt_tokens = usage.prompt_tokens,
        completion_tokens = usage.completion_tokens,
        queue_ms = timings.queue_ms,
        prefill_ms = timings.prefill_ms,
        generate_ms = timings.generate_ms,
        "generation"
    );
}

/// What became of a job's run.
pub(super) struct JobRan {
    /// The error when the runner was lost (its process died or stalled).
    pub lost: Option<BackendError>,
    /// The runner has idle work (see [`super::idle`]).
    pub idle_work: bool,
}

/// Where a run's reports about its model go (the model's slot's).
pub(super) struct Reports<'a> {
    /// The runtime's KV cache length after it (`u64::MAX`: unknown).
    pub kv_cache_tokens: &'a std::sync::atomic::AtomicU64,
    /// The model's snapshot totals.
    pub snapshots: &'a parking_lot::Mutex<Option<crate::backend::SnapshotReport>>,
    /// What a probe order found.
    pub verdicts: &'a parking_lot::Mutex<Option<crate::plan::probe::Verdicts>>,
    /// The model's profile, resolved again once its verdicts change.
    pub profile: &'a parking_lot::Mutex<Option<std::sync::Arc<super::profile::ModelProfile>>>,
    /// Its conversations' previous prompts, for the prompt-cache metrics.
    pub conversations: &'a parking_lot::Mutex<super::reuse::Conversations>,
}

/// Runs one job on `runner`, ending its stream. The runtime's KV cache
/// length afterwards goes into `kv_cache_tokens` (`u64::MAX`: unknown)
/// before the stream ends, so whoever reads the end sees it.
pub(super) fn run_job(runner: &mut dyn Runner, job: &Job, into: Reports<'_>) -> JobRan {
    let Reports {
        kv_cache_tokens,
        snapshots,
        verdicts,
        profile,
        conversations,
    } = into;
    let mut ran = JobRan {
        lost: None,
        idle_work: false,
    };
    let stream = &job.stream;
    stream.set_initializing();
    let queue_ms = (Instant::now() - job.enqueued).as_secs_f64() * 1000.0;
    let mut sink = TokenSink::new(stream.as_ref(), job.request.prompt.turns().is_some())
        .with_stop(job.stop.clone())
        .with_answer(job.reasoning, job.request.stop.clone());
    let result = catch_unwind(AssertUnwindSafe(|| {
        runner.generate(&job.request, &mut sink)
    }));
    // A generation that ended normally but mid-character shows the loss as
    // U+FFFD; after a failure or an abort the incomplete tail is dropped.
    if matches!(result, Ok(Ok(_))) && !stream.cancel_token().is_cancelled() {
        sink.flush();
    }
    let seen = Ran {
        measured: sink.measured(),
        cancelled: stream.cancel_token().is_cancelled(),
        hit_stop: sink.hit_stop(),
        stop_sequence: sink.stop_sequence().map(str::to_owned),
        queue_ms,
    };
    match result {
        Ok(Ok(generation)) => {
            kv_cache_tokens.store(
                generation.kv_cache_tokens.map_or(u64::MAX, u64::from),
                std::sync::atomic::Ordering::Relaxed,
            );
            if let Some(report) = generation.snapshots {
                add_snapshots(&job.request.model, report, snapshots);
            }
            if let Some(found) = &generation.verdicts {
                *verdicts.lock() = Some((**found).clone());
                *profile.lock() = None;
            }
            // Counted before the stream ends, so that whoever reads the
            // metrics after the answer sees this request in them.
            if let Some(reuse) = generation.prompt_reuse
                && generation.finish_reason != FinishReason::Abort
            {
                let outcome = job
                    .conversation
                    .as_deref()
                    .map(|key| conversations.lock().record(key, reuse));
                crate::metrics::prompt_reuse(
                    &job.request.model,
                    reuse.reused,
                    reuse.prefilled,
                    outcome.map(|o| o.as_str()),
                );
            }
            end_generated(job, &generation, &seen);
            ran.idle_work = generation.idle_work;
        }
        Ok(Err(err)) => {
            tracing::warn!(model = stream.model(), error = %err, "generation failed");
            stream.end_with(|usage| EndInfo::error(EndErrorKind::Runtime, err.to_string(), usage));
            if matches!(err, BackendError::Lost { .. }) {
                ran.lost = Some(err);
            }
        }
        Err(_) => {
            tracing::error!(
                model = stream.model(),
                "the backend panicked during a generation"
            );
            stream.end_with(|usage| {
                EndInfo::error(
                    EndErrorKind::Internal,
                    "generation failed: internal backend error",
                    usage,
                )
            });
        }
    }
    debug_assert!(stream.is_ended());
    ran
}

/// What the sink and the clock saw of a run, for its end.
struct Ran {
    /// Prefill and generation times the sink measured.
    measured: (f64, f64),
    cancelled: bool,
    hit_stop: bool,
    stop_sequence: Option<String>,
    queue_ms: f64,
}

/// Counts a run's snapshot report in the metrics and the model's totals.
pub(super) fn add_snapshots(
    model: &str,
    report: crate::backend::SnapshotReport,
    snapshots: &parking_lot::Mutex<Option<crate::backend::SnapshotReport>>,
) {
    crate::metrics::snapshots(
        model,
        crate::metrics::SnapshotCounts {
            hits: report.hits,
            misses: report.misses,
            files: report.files,
            bytes: report.bytes,
        },
    );
    let mut totals = snapshots.lock();
    let before = totals.unwrap_or_default();
    *totals = Some(crate::backend::SnapshotReport {
        hits: before.hits.saturating_add(report.hits),
        misses: before.misses.saturating_add(report.misses),
        ..report
    });
}

/// Ends the stream of a run that returned normally, with the runtime's
/// counts and timings where it gave them, and records the generation.
fn end_generated(job: &Job, generation: &crate::backend::Generation, ran: &Ran) {
    let stream = &job.stream;
    let (prefill_ms, generate_ms) = generation.runtime_timings.unwrap_or(ran.measured);
    let outcome = |counted: Usage| {
        // The runtime's own counts, with the thinking the sink saw.
        let usage = generation.usage.map_or(counted, |runtime| Usage {
            reasoning_tokens: counted.reasoning_tokens.min(runtime.completion_tokens),
            ..runtime
        });
        let finish_reason = if ran.cancelled {
            FinishReason::Abort
        } else if ran.hit_stop {
            FinishReason::Stop
        } else {
            generation.finish_reason
        };
        let timings = Timings {
            queue_ms: ran.queue_ms,
            prefill_ms,
            generate_ms,
            tokens_per_second: 0.0,
        }
        .with_rate(usage.completion_tokens);
        (finish_reason, usage, timings)
    };
    let ended_here = stream.end_with(|counted| {
        let (finish_reason, usage, timings) = outcome(counted);
        // Recorded before the end is seen: whoever reads the end and then
        // the metrics finds the generation counted.
        record_generation(
            stream,
            job.priority,
            finish_reason,
            usage,
            &timings,
            generation.memory_mb,
        );
        EndInfo {
            timings: Some(timings),
            embedding: generation.embedding.as_deref().map(Into::into),
            stop_sequence: ran.stop_sequence.clone(),
            ..EndInfo::new(finish_reason, usage)
        }
    });
    if !ended_here {
        // A stream aborted (or expired) while it ran ended before the
        // runner returned: the generation is recorded all the same.
        let end = stream.end_info();
        let (_, usage, timings) = outcome(end.as_ref().map(|e| e.usage).unwrap_or_default());
        let finish_reason = end.map_or(FinishReason::Abort, |e| e.finish_reason);
        record_generation(
            stream,
            job.priority,
            finish_reason,
            usage,
            &timings,
            generation.memory_mb,
        );
    }
}
