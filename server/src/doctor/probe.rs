//! `rkllm-server doctor --probe`: what this board's runtime does, model by
//! model, as a report a user can paste into an issue. Each configured and
//! stored model (or the one named) is loaded in a runner process, its
//! runtime probed again ([`crate::plan::probe`]) and, unless asked not
//! to, the board's figures measured; the verdicts are kept for the server
//! as at a load. When the service runs, the command asks it instead
//! (`POST /probe`) rather than load a second copy of a model on the NPU.

use std::sync::Arc;

use serde::Serialize;

use crate::backend::process::{ProcessBackend, RunnerSettings};
use crate::backend::{Backend, BackendSettings, RkllmBackend};
use crate::config::{BackendKind, Config};
use crate::model::ModelSpec;
use crate::plan::probe::{Cost, Verdicts};

/// How the probes are asked for.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// Only this model.
    pub model: Option<String>,
    /// Measure the board's figures too.
    pub measure: bool,
}

/// One model's report.
#[derive(Debug, Clone, Serialize)]
pub struct ModelReport {
    /// The model.
    pub name: String,
    /// What its runtime was found to do (absent: it did not load).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub verdicts: Option<Verdicts>,
    /// Why it did not load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Probes the models here, loading each in a runner process. Returns the
/// reports, or why nothing could be probed.
///
/// # Errors
/// A backend with no runtime to probe, an unknown model, or a runtime
/// that cannot be loaded.
pub fn probe_here(config: &Config, options: &ProbeOptions) -> Result<Vec<ModelReport>, String> {
    if config.backend != BackendKind::Rkllm {
        return Err(
            "the mock backend has no runtime to probe: run with --backend rkllm on the board"
                .into(),
        );
    }
    let mut settings = config.rkllm_settings();
    settings.probes.force = true;
    settings.probes.measure = options.measure;
    settings.probes.only = true;
    let inner = RkllmBackend::new(settings.clone()).map_err(|e| e.to_string())?;
    let settings = inner.settings();
    let backend = ProcessBackend::new(
        Arc::new(inner),
        BackendSettings::Rkllm(settings.clone()),
        RunnerSettings {
            command: config.runner_command()?,
            load_timeout: std::time::Duration::from_secs(config.engine.load_timeout_secs),
            stall_timeout: std::time::Duration::from_secs(config.engine.stall_timeout_secs),
            stop_timeout: std::time::Duration::from_secs(3),
        },
    );
    let specs = specs(config, options.model.as_deref())?;
    let runner = RunnerSettings {
        command: config.runner_command()?,
        load_timeout: std::time::Duration::from_secs(config.engine.load_timeout_secs),
        stall_timeout: std::time::Duration::from_secs(config.engine.stall_timeout_secs),
        stop_timeout: std::time::Duration::from_secs(3),
    };
    let mut reports = Vec::with_capacity(specs.len());
    for spec in &specs {
        // The runner (and its copy of the model) is gone before the next
        // load: one copy on the NPU at a time.
        let loaded = backend.load(spec).map(|r| r.verdicts());
        let mut report = match loaded {
            Ok(verdicts) => ModelReport {
                name: spec.name.clone(),
                verdicts,
                error: None,
            },
            Err(e) => ModelReport {
                name: spec.name.clone(),
                verdicts: None,
                error: Some(e.to_string()),
            },
        };
        if let Some(measured) = report.verdicts.as_mut().and_then(|v| v.measured.as_mut()) {
            let single = if measured.decode_ms_per_token > 0.0 {
                1000.0 / measured.decode_ms_per_token
            } else {
                0.0
            };
            for n in BATCHES {
                measured
                    .batch
                    .push(batch_of(&settings, &runner, spec, n, single));
            }
        }
        reports.push(report);
    }
    Ok(reports)
}

/// The batch sizes measured against one sequence.
const BATCHES: [u32; 2] = [2, 4];

/// A raw batch of `n` sequences of `spec`'s model, in a runner of its own
/// (`single`: one sequence's decode tokens a second).
fn batch_of(
    settings: &crate::backend::RkllmSettings,
    runner: &RunnerSettings,
    spec: &ModelSpec,
    n: u32,
    single: f64,
) -> crate::plan::probe::Batch {
    let mut settings = settings.clone();
    settings.probes.batch = Some((n, single));
    let measured = RkllmBackend::new(settings.clone())
        .map_err(|e| e.to_string())
        .and_then(|inner| {
            let backend = ProcessBackend::new(
                Arc::new(inner),
                BackendSettings::Rkllm(settings),
                runner.clone(),
            );
            backend.load(spec).map_err(|e| e.to_string())
        })
        .map(|r| r.verdicts());
    match measured {
        Ok(Some(v)) => v
            .measured
            .and_then(|m| m.batch.into_iter().next())
            .unwrap_or_else(|| not_run(n, "the runner gave no figures".into())),
        Ok(None) => not_run(n, "the runner gave no figures".into()),
        Err(why) => not_run(n, format!("did not run: {why}")),
    }
}

fn not_run(n: u32, detail: String) -> crate::plan::probe::Batch {
    crate::plan::probe::Batch {
        n_batch: n,
        ran: false,
        decode_tokens_per_s_per_stream: 0.0,
        per_stream_vs_single: 0.0,
        detail,
    }
}

/// The configured models, then the store's, or the one named.
fn specs(config: &Config, only: Option<&str>) -> Result<Vec<ModelSpec>, String> {
    let mut specs = config.model_specs();
    let store = crate::store::Store::new(config.models_dir());
    for manifest in store.list() {
        if !specs.iter().any(|s| s.name == manifest.name) {
            specs.push(store.spec(&manifest));
        }
    }
    match only {
        None if specs.is_empty() => Err("no model configured or stored to probe".into()),
        None => Ok(specs),
        Some(name) => {
            let named: Vec<ModelSpec> = specs.into_iter().filter(|s| s.name == name).collect();
            if named.is_empty() {
                Err(format!("no model `{name}` is configured or stored"))
            } else {
                Ok(named)
            }
        }
    }
}

/// The report as text: per model, each probe's verdict, the features and
/// the figures.
pub fn text(reports: &[ModelReport]) -> String {
    let mut out = String::new();
    for report in reports {
        let Some(v) = &report.verdicts else {
            out.push_str(&format!(
                "model {}: not loaded: {}\n",
                report.name,
                report.error.as_deref().unwrap_or("no verdicts")
            ));
            continue;
        };
        out.push_str(&format!(
            "model {} (runtime {}): {}\n",
            report.name,
            v.runtime_version.as_deref().unwrap_or("unknown"),
            cost_text(&v.cost, v.kept)
        ));
        out.push_str("  checks:\n");
        for c in &v.checks {
            let verdict = match (c.ran, c.passed) {
                (false, _) => "skip",
                (true, true) => "ok",
                (true, false) => "FAIL",
            };
            out.push_str(&format!("    {verdict:<4} {:<31} {}\n", c.name, c.detail));
        }
        out.push_str("  features:\n");
        for (name, feature) in v.features.named() {
            let on = if feature.on { "on" } else { "OFF" };
            out.push_str(&format!("    {on:<3} {name:<16} {}\n", feature.reason));
        }
        if let Some(m) = &v.measured {
            out.push_str(&format!(
                "  measured: prefill {:.2} ms/token, decode {:.2} ms/token, first token {:.0} ms, \
                 snapshot save {:.1} ms and load {:.1} ms, a second chunk {:.1} ms, a logits step \
                 {:.2} ms, runner peak {} MB\n",
                m.prefill_ms_per_token,
                m.decode_ms_per_token,
                m.ttft_ms,
                m.snapshot_save_ms,
                m.snapshot_load_ms,
                m.chunk_overhead_ms,
                m.logits_step_ms,
                m.runner_peak_mb
            ));
            for b in &m.batch {
                out.push_str(&format!("  n_batch {}: {}\n", b.n_batch, b.detail));
            }
        }
    }
    out
}

fn cost_text(cost: &Cost, kept: bool) -> String {
    format!(
        "{} runtime runs, {} tokens prefilled and {} generated{}",
        cost.runs,
        cost.prefilled,
        cost.generated,
        if kept {
            " (verdicts kept from an earlier probe)"
        } else {
            ""
        }
    )
}
