//! The probes of [`crate::plan::probe`] carried out on the NPU: each run
//! made through the handle with a [`Tap`] on its callbacks, what it saw
//! gathered into an [`Observed`] for the plan to judge. The runtime's
//! state is cleared before each probe and after the last; what the runner
//! believed the runtime held (a conversation, a loaded cache) is forgotten.

use std::ffi::{CStr, CString};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rkllm_sys::version::Abi;

use super::RkllmRunner;
use super::abi::{RunSettings, SamplingValues};
use super::handle::{ActiveRun, CallbackMode};
use super::ops::Watch;
use super::prompt_cache::NullOutput;
use super::tap::Tap;
use super::verdicts::Store;
use crate::backend::TokenSink;
use crate::plan::probe::{
    A, ABORT_REPEAT, B1, B2, Basis, C, GENERATE, MID_PAUSE_AT, Observed, Verdicts, features, judge,
    observed_cost,
};
use crate::vocab::CancelToken;

/// What a probe's run takes: a text, or ids that go on from a pause.
#[derive(Debug, Clone, Copy)]
enum Input<'a> {
    Text(&'a str),
    Ids(&'a [i32]),
}

/// One probe run's settings.
#[derive(Debug, Clone, Copy)]
struct Run<'a> {
    input: Input<'a>,
    logits: bool,
    hidden: bool,
    max_new_tokens: u32,
    pause_at: Option<u32>,
    save: Option<&'a CStr>,
}

impl<'a> Run<'a> {
    fn text(text: &'a str) -> Self {
        Self {
            input: Input::Text(text),
            logits: false,
            hidden: false,
            max_new_tokens: 1,
            pause_at: None,
            save: None,
        }
    }

    fn ids(ids: &'a [i32]) -> Self {
        Self {
            input: Input::Ids(ids),
            ..Self::text("")
        }
    }
}

/// What a probe run ended with.
pub(super) struct Ran {
    rc: i32,
    tap: Tap,
    run: ActiveRun,
    wall: Duration,
}

impl Ran {
    fn prefill(&self) -> Option<u32> {
        let perf = self.perf()?;
        u32::try_from(perf.prefill_tokens).ok().filter(|&n| n > 0)
    }

    /// The counts the run ended with.
    pub(super) fn perf(&self) -> Option<super::tap::Perf> {
        self.tap.perf.or(self.run.finished)
    }

    /// When its first token came.
    pub(super) fn first_at(&self) -> Option<Instant> {
        self.tap.first_at
    }

    /// How long it took, in ms.
    pub(super) fn wall_ms(&self) -> f64 {
        self.wall.as_secs_f64() * 1000.0
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.tap.text).into_owned()
    }
}

/// The ids of the probes' texts by the model's tokenizer.
struct Ids {
    b1: Vec<i32>,
    b2: Vec<i32>,
    c: Vec<i32>,
    vocabulary: Option<u32>,
}

impl RkllmRunner {
    /// The verdicts on this model's runtime: those kept for the same
    /// runtime and model file, or the probes run now (and kept). The
    /// features they leave off are logged, one line each.
    pub(super) fn resolve_probes(
        &mut self,
        store: Option<&Store>,
        force: bool,
        measure: bool,
    ) -> Verdicts {
        let runtime_version = self.handle.runtime.version().map(|v| v.to_string());
        let key = store.and_then(|store| {
            store.key(
                runtime_version.clone(),
                self.profile.tokenizer,
                self.profile.renders_template,
            )
        });
        let kept = match (store, &key) {
            (Some(store), Some((key, _))) if !force => store.kept(key),
            _ => None,
        };
        let (checks, observed, probed_at, was_kept) = match kept {
            Some(kept) => (kept.checks, kept.observed, kept.probed_at, true),
            None => {
                let observed = self.probe();
                let checks = judge(&observed);
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                if let (Some(store), Some((key, hash))) = (store, key) {
                    store.keep(key, hash, &checks, &observed, now);
                }
                (checks, observed, now, false)
            }
        };
        let basis = Basis {
            tokenizer: self.profile.tokenizer,
            server_template: self.profile.renders_template,
            chunk_tokens: self.profile.chunk_tokens,
        };
        let features = features(basis, &checks, &observed);
        for (name, feature) in features.named() {
            // Off for a probe: said once. Off for the model's own making (no
            // tokenizer, the runtime's template) is no news.
            if !feature.on && feature.reason.starts_with("probe ") {
                tracing::warn!(
                    model = %self.model,
                    feature = name,
                    reason = %feature.reason,
                    "a feature of the model is off: its runtime did not pass the probe it rests on"
                );
            }
        }
        let measured = measure.then(|| self.measure());
        Verdicts {
            runtime_version,
            checks,
            features,
            cost: observed_cost(&observed),
            probed_at,
            kept: was_kept,
            measured,
        }
    }

    /// Runs every probe and returns what they saw. Nothing of it fails the
    /// model: a run the runtime refuses leaves its probe without what it
    /// would have seen.
    pub(super) fn probe(&mut self) -> Observed {
        let started = Instant::now();
        let ids = self.probe_ids();
        let mut o = Observed {
            server_template: self.profile.renders_template,
            ids: ids.is_some(),
            greedy: self.handle.runtime.abi() == Abi::V1_3,
            vocabulary: ids.as_ref().and_then(|i| i.vocabulary),
            ..Observed::default()
        };
        self.probe_pauses(&mut o, ids.as_ref());
        self.probe_rows(&mut o);
        if let Some(ids) = &ids {
            self.probe_mid_generation(&mut o, ids);
            if o.server_template {
                self.probe_cache(&mut o, ids);
            }
        } else {
            self.probe_mid_generation_without_ids(&mut o);
        }
        self.probe_abort(&mut o);
        self.forget_runtime_state();
        tracing::debug!(
            model = %self.model,
            runs = o.runs,
            prefilled = o.prefilled,
            generated = o.generated,
            ms = started.elapsed().as_millis() as u64,
            "runtime probed"
        );
        o
    }

    /// The prefill count of `text` alone: from the runtime's counts at the
    /// end of a one-token run, or (a runtime that ends a capped run
    /// without them, 1.2.x) the rows of a hidden-layer run, one a token.
    fn prefill_of(&mut self, o: &mut Observed, text: &str) -> Option<u32> {
        self.handle.clear_kv();
        if let Some(n) = self.probe_run(o, Run::text(text)).and_then(|r| r.prefill()) {
            return Some(n);
        }
        self.handle.clear_kv();
        let hidden = Run {
            hidden: true,
            ..Run::text(text)
        };
        let ran = self.probe_run(o, hidden)?;
        ran.prefill()
            .or_else(|| ran.tap.hidden_rows.and_then(|n| u32::try_from(n).ok()))
    }

    /// 1.-6.: the reference, the template, a pause after the prefill, ids
    /// fed after it, and the continuations compared.
    fn probe_pauses(&mut self, o: &mut Observed, ids: Option<&Ids>) {
        o.a_prefill = self.prefill_of(o, A);
        if o.server_template {
            let twice = format!("{A}{A}");
            o.aa_prefill = self.prefill_of(o, &twice);
        }
        self.handle.clear_kv();
        let paused = self.probe_run(
            o,
            Run {
                logits: true,
                pause_at: Some(1),
                ..Run::text(A)
            },
        );
        if let Some(paused) = &paused {
            o.paused_at_prefill = paused.tap.paused;
            o.first_rows = paused.tap.first_rows.map(|(count, width)| {
                (
                    u32::try_from(count).unwrap_or(u32::MAX),
                    u32::try_from(width).unwrap_or(u32::MAX),
                )
            });
        }
        o.kv_after_pause = self.handle.kv_size();
        let Some(ids) = ids else {
            self.handle.clear_kv();
            return;
        };
        o.b1_ids = u32::try_from(ids.b1.len()).unwrap_or(u32::MAX);
        let fed = self.probe_run(
            o,
            Run {
                logits: true,
                pause_at: Some(1),
                ..Run::ids(&ids.b1)
            },
        );
        o.kv_after_tokens = fed.filter(|r| r.tap.paused).and(self.handle.kv_size());
        let chunked = self.probe_run(
            o,
            Run {
                max_new_tokens: GENERATE,
                ..Run::ids(&ids.b2)
            },
        );
        o.chunked_text = chunked.filter(|r| r.rc == 0).map(|r| r.text());
        self.handle.clear_kv();
        if o.server_template && o.greedy {
            let whole = format!("{A}{B1}{B2}");
            let one = self.probe_run(
                o,
                Run {
                    max_new_tokens: GENERATE,
                    ..Run::text(&whole)
                },
            );
            o.one_run_text = one.filter(|r| r.rc == 0).map(|r| r.text());
        }
    }

    /// 7.: each generated step's last row against the runtime's pick.
    fn probe_rows(&mut self, o: &mut Observed) {
        self.handle.clear_kv();
        if let Some(ran) = self.probe_run(
            o,
            Run {
                logits: true,
                max_new_tokens: GENERATE,
                ..Run::text(A)
            },
        ) {
            o.argmax_agreed = ran.tap.argmax_agreed;
            o.argmax_compared = ran.tap.argmax_compared;
        }
    }

    /// 8.: a generation paused at its third token, then ids fed after it.
    fn probe_mid_generation(&mut self, o: &mut Observed, ids: &Ids) {
        if self.probe_pause_mid(o) {
            let went_on = self.probe_run(
                o,
                Run {
                    max_new_tokens: 2,
                    ..Run::ids(&ids.c)
                },
            );
            // It went on: it generated, and neither failed nor ended at
            // once (a runtime without a per-run cap ends it by an abort).
            o.mid_continued =
                went_on.is_some_and(|r| r.rc == 0 && !r.run.failed && r.tap.callbacks > 0);
        }
        self.handle.clear_kv();
    }

    /// 8. without a tokenizer: the pause alone.
    fn probe_mid_generation_without_ids(&mut self, o: &mut Observed) {
        self.probe_pause_mid(o);
        self.handle.clear_kv();
    }

    /// The generation paused at its third token; whether it paused.
    fn probe_pause_mid(&mut self, o: &mut Observed) -> bool {
        self.handle.clear_kv();
        let paused = self.probe_run(
            o,
            Run {
                max_new_tokens: GENERATE,
                pause_at: Some(MID_PAUSE_AT),
                ..Run::text(A)
            },
        );
        o.mid_paused = paused.as_ref().is_some_and(|r| r.tap.paused);
        o.mid_ended_after = paused
            .filter(|r| !r.tap.paused && r.tap.callbacks < MID_PAUSE_AT && r.rc == 0)
            .map(|r| r.tap.callbacks);
        o.kv_mid = self.handle.kv_size();
        o.mid_paused
    }

    /// 9./10.: a cache saved after ids, loaded before the whole text.
    fn probe_cache(&mut self, o: &mut Observed, ids: &Ids) {
        let path = std::env::temp_dir().join(format!(
            "rkllm-probe-{}-{}.cache",
            std::process::id(),
            self.next_run.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&path);
        let Ok(c_path) = CString::new(path.to_string_lossy().into_owned()) else {
            o.cache_trouble = Some("the scratch path holds a NUL byte".into());
            return;
        };
        self.handle.clear_kv();
        self.probe_run(
            o,
            Run {
                logits: true,
                pause_at: Some(1),
                ..Run::text(A)
            },
        );
        self.probe_run(
            o,
            Run {
                save: Some(&c_path),
                ..Run::ids(&ids.b1)
            },
        );
        self.handle.clear_kv();
        if !path.is_file() {
            o.cache_trouble = Some("the runtime wrote no prompt cache when asked to".into());
        } else if let Err(rc) = self.handle.load_cache(&c_path) {
            o.cache_trouble = Some(format!(
                "the runtime refused the prompt cache it had just saved (rkllm_load_prompt_cache returned {rc})"
            ));
        } else {
            let whole = format!("{A}{B1}{C}");
            o.cache_prefill = self
                .probe_run(o, Run::text(&whole))
                .and_then(|r| r.prefill());
            self.handle.release_cache();
            o.c_prefill = self.prefill_of(o, C);
        }
        let _ = std::fs::remove_file(&path);
        self.handle.clear_kv();
    }

    /// 11.: a longer text aborted 5 ms after it starts, against the same
    /// text's whole prefill.
    fn probe_abort(&mut self, o: &mut Observed) {
        let long = A.repeat(ABORT_REPEAT);
        self.handle.clear_kv();
        o.prefill_ms = self.probe_run(o, Run::text(&long)).and_then(|r| {
            let perf = r.tap.perf.or(r.run.finished)?;
            Some(f64::from(perf.prefill_time_ms))
        });
        self.handle.clear_kv();
        let abort = Arc::clone(&self.handle.abort);
        let run_id = self.next_run.load(Ordering::Relaxed);
        let aborter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            abort.abort(run_id);
        });
        let ran = self.probe_run_as(o, Run::text(&long), run_id);
        let _ = aborter.join();
        o.abort_ms = ran.map(|r| r.wall.as_secs_f64() * 1000.0);
        self.handle.clear_kv();
    }

    /// What the runner believed the runtime held is gone: no conversation,
    /// no cache loaded.
    fn forget_runtime_state(&mut self) {
        self.handle.clear_kv();
        self.handle.release_cache();
        self.held.dirty = false;
        self.held.conversation.reset();
        self.held.history.forget();
        if let Some(snapshots) = self.snapshots.as_mut() {
            snapshots.unloaded();
        }
        if let Some(cache) = self.prompt_cache.as_mut() {
            cache.displaced();
        }
    }

    /// The ids of the probes' texts; `None` without a usable tokenizer.
    fn probe_ids(&mut self) -> Option<Ids> {
        let encoder = self.encoder()?.ok()?;
        let ids = |text: &str| -> Option<Vec<i32>> {
            encoder
                .encode(text)
                .ok()?
                .into_iter()
                .map(|id| i32::try_from(id).ok())
                .collect()
        };
        let vocabulary = self
            .tokenizer
            .clone()
            .and_then(|source| self.vocabulary(&source).ok())
            .map(|v| u32::try_from(v.len()).unwrap_or(u32::MAX));
        Some(Ids {
            b1: ids(B1)?,
            b2: ids(B2)?,
            c: ids(C)?,
            vocabulary,
        })
    }

    /// A measuring run of `text` (in logits mode when `logits`), generating
    /// `max` tokens, its prefill saved at `save`.
    pub(super) fn measure_run(
        &mut self,
        o: &mut Observed,
        text: &str,
        logits: bool,
        max: u32,
        save: Option<&CStr>,
    ) -> Option<Ran> {
        let run = Run {
            logits,
            max_new_tokens: max,
            save,
            ..Run::text(text)
        };
        self.probe_run(o, run)
    }

    /// `text` prefilled and paused after its prefill: the wall time, ms.
    pub(super) fn measure_paused(&mut self, o: &mut Observed, text: &str) -> Option<f64> {
        let run = Run {
            logits: true,
            pause_at: Some(1),
            ..Run::text(text)
        };
        self.probe_run(o, run)
            .filter(|r| r.tap.paused)
            .map(|r| r.wall_ms())
    }

    /// `ids` fed after a pause, generating one token: the wall time, ms.
    pub(super) fn measure_ids(&mut self, o: &mut Observed, ids: &[i32]) -> Option<f64> {
        self.probe_run(o, Run::ids(ids))
            .filter(|r| r.rc == 0)
            .map(|r| r.wall_ms())
    }

    /// Makes one probe run with a new id; `None` when the runner's state of
    /// it was lost.
    fn probe_run(&mut self, o: &mut Observed, run: Run<'_>) -> Option<Ran> {
        let run_id = self.next_run.fetch_add(1, Ordering::Relaxed);
        self.probe_run_as(o, run, run_id)
    }

    /// Makes one probe run as `run_id`, counting its cost in `o`.
    fn probe_run_as(&mut self, o: &mut Observed, run: Run<'_>, run_id: u64) -> Option<Ran> {
        let _ = self.next_run.compare_exchange(
            run_id,
            run_id + 1,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        let text = match run.input {
            Input::Text(text) => CString::new(text).ok()?,
            Input::Ids(_) => CString::default(),
        };
        let settings = RunSettings {
            prompt: &text,
            role: c"user",
            enable_thinking: false,
            sampling: SamplingValues {
                top_k: 1,
                temperature: 0.0,
                repeat_penalty: 1.0,
                ..SamplingValues::default()
            },
            max_new_tokens: i32::try_from(run.max_new_tokens).unwrap_or(i32::MAX),
            keep_history: false,
            images: None,
            hidden_layer: run.hidden,
            logits: run.logits,
            tokens: match run.input {
                Input::Ids(ids) => Some(ids),
                Input::Text(_) => None,
            },
            lora: None,
            save_cache: run.save,
        };
        let null = NullOutput(CancelToken::new());
        let mut sink = TokenSink::new(&null, false);
        let mut tap = Tap::pausing_at(run.pause_at);
        let watch = Watch {
            run_id,
            cap: (self.handle.runtime.abi() == Abi::V1_2).then_some(run.max_new_tokens),
            mode: CallbackMode::Probe(&mut tap),
        };
        self.handle.abort.set_running(run_id);
        let started = Instant::now();
        let result = self.handle.run(&settings, &mut sink, watch);
        let wall = started.elapsed();
        let (rc, active) = match result {
            Ok(ran) => ran,
            Err(e) => {
                tracing::debug!(model = %self.model, error = %e, "a probe's run was lost");
                return None;
            }
        };
        o.runs += 1;
        let perf = tap.perf.or(active.finished);
        o.prefilled = o.prefilled.saturating_add(match run.input {
            Input::Ids(ids) => u32::try_from(ids.len()).unwrap_or(u32::MAX),
            Input::Text(_) => perf.map_or(0, |p| u32::try_from(p.prefill_tokens).unwrap_or(0)),
        });
        o.generated = o.generated.saturating_add(tap.callbacks);
        Some(Ran {
            rc,
            tap,
            run: active,
            wall,
        })
    }
}
