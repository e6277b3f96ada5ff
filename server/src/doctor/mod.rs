//! `rkllm-server doctor`: checks the board, the runtime, the models and
//! the configuration, and explains each finding with a verdict and a fix.
//!
//! The same findings are summarised in the log at start, and the blocking
//! ones (the wrong NPU driver, a runtime known to crash on this chip) are
//! handed to `/ready` as its reason. The checks read files only (under
//! `[board] sys_root`) and load the runtime library without initialising
//! it; hashing a model file is slow (seconds per GB), so it is done only
//! with `--verify`.

mod board;
mod models;
pub mod probe;

use serde::Serialize;

use crate::backend::RkllmBackend;
use crate::config::{BackendKind, Config};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Nothing to do.
    Ok,
    /// Serving works, but slower or less than it could.
    Warn,
    /// Blocks serving (or the model it names).
    Fail,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "fail",
        }
    }
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// What was checked (`npu-driver`, `runtime`, `model:qwen`, …).
    pub check: String,
    /// How it came out.
    pub verdict: Verdict,
    /// One line saying what was found.
    pub explanation: String,
    /// What to do about it (none when the verdict is ok).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    fn ok(check: impl Into<String>, explanation: impl Into<String>) -> Self {
        Self {
            check: check.into(),
            verdict: Verdict::Ok,
            explanation: explanation.into(),
            fix: None,
        }
    }

    fn warn(
        check: impl Into<String>,
        explanation: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            check: check.into(),
            verdict: Verdict::Warn,
            explanation: explanation.into(),
            fix: Some(fix.into()),
        }
    }

    fn fail(
        check: impl Into<String>,
        explanation: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            check: check.into(),
            verdict: Verdict::Fail,
            explanation: explanation.into(),
            fix: Some(fix.into()),
        }
    }

    /// `check: explanation (fix: …)`, for the log and `/ready`.
    pub fn line(&self) -> String {
        match &self.fix {
            Some(fix) => format!("{}: {} (fix: {fix})", self.check, self.explanation),
            None => format!("{}: {}", self.check, self.explanation),
        }
    }
}

/// Every finding of one examination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The findings, in the order checked.
    pub findings: Vec<Finding>,
}

impl Report {
    /// The findings that block serving.
    pub fn blocking(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.verdict == Verdict::Fail)
    }

    /// 0 when nothing blocks serving, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.blocking().next().is_some())
    }

    fn count(&self, verdict: Verdict) -> usize {
        self.findings
            .iter()
            .filter(|f| f.verdict == verdict)
            .count()
    }

    /// The report as text, one finding a line with its fix beneath.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            out.push_str(&format!(
                "[{:<4}] {}: {}\n",
                f.verdict.as_str(),
                f.check,
                f.explanation
            ));
            if let Some(fix) = &f.fix {
                out.push_str(&format!("       fix: {fix}\n"));
            }
        }
        out.push_str(&format!(
            "{} ok, {} warning(s), {} failure(s): {}\n",
            self.count(Verdict::Ok),
            self.count(Verdict::Warn),
            self.count(Verdict::Fail),
            if self.exit_code() == 0 {
                "nothing blocks serving"
            } else {
                "serving is blocked"
            }
        ));
        out
    }
}

/// What `doctor` is asked to do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Hash every model file against its manifest (slow).
    pub verify: bool,
}

/// Examines the board, the runtime, the models and the configuration.
pub fn examine(config: &Config, options: Options) -> Report {
    let snapshot = board_now(config);
    let (mut findings, runtime) = examine_board(config, &snapshot);
    findings.insert(0, config_finding(config));
    findings.extend(models::check(
        config,
        &snapshot,
        runtime.as_deref(),
        options,
    ));
    Report { findings }
}

/// The board under `[board] sys_root`, read within its budget (with the
/// same bounded reads as `/metrics`).
fn board_now(config: &Config) -> crate::board::Snapshot {
    use crate::board::{READ_BUDGET, Scope, read_within};
    read_within(&config.board.sys_root, Scope::Doctor, READ_BUDGET)
}

/// The board and runtime checks (what start-up runs), and the runtime's
/// version when the library loaded.
fn examine_board(
    config: &Config,
    snapshot: &crate::board::Snapshot,
) -> (Vec<Finding>, Option<String>) {
    let rkllm = config.backend == BackendKind::Rkllm;
    let runtime = rkllm.then(|| RkllmBackend::new(config.rkllm_settings()));
    let loaded = match &runtime {
        Some(Ok(backend)) => Some(Runtime {
            version: backend.version(),
            describe: backend.describe(),
            abi: format!("{:?}", backend.settings().abi),
        }),
        _ => None,
    };
    let mut findings = board::check(snapshot, rkllm);
    findings.push(match &runtime {
        None => Finding::ok("runtime", "the mock backend needs no runtime library"),
        Some(Err(err)) => Finding::fail(
            "runtime",
            format!("the RKLLM runtime does not load: {err}"),
            format!(
                "install librkllmrt.so 1.2.1–1.2.3 or 1.3.0 from airockchip/rknn-llm and point \
                 `runtime` (--runtime) at it (now {})",
                config.runtime.display()
            ),
        ),
        Some(Ok(_)) => board::runtime(
            snapshot,
            loaded
                .as_ref()
                .map(|r| (r.version.as_deref(), r.describe.as_str(), r.abi.as_str())),
        ),
    });
    (findings, loaded.and_then(|r| r.version))
}

struct Runtime {
    version: Option<String>,
    describe: String,
    abi: String,
}

fn config_finding(config: &Config) -> Finding {
    match &config.source {
        Some(file) => Finding::ok("config", format!("{} read and valid", file.display())),
        None => Finding::warn(
            "config",
            format!(
                "no configuration file ({} does not exist): defaults, environment and flags",
                crate::config::DEFAULT_CONFIG_FILE
            ),
            "copy config/rkllm-server.toml there (the package installs it) or pass --config FILE",
        ),
    }
}

/// The board and runtime findings at start: each logged (a warning or
/// failure as a warning with the rkllm backend, at debug with the mock),
/// and the blocking ones' lines returned for
/// `/ready`.
pub fn at_start(config: &Config) -> Vec<String> {
    let snapshot = board_now(config);
    let (findings, _) = examine_board(config, &snapshot);
    // The mock backend runs anywhere: what the board lacks is no news there.
    let board_matters = config.backend == BackendKind::Rkllm;
    for f in &findings {
        match f.verdict {
            Verdict::Ok => tracing::info!(check = %f.check, "doctor: {}", f.explanation),
            Verdict::Warn | Verdict::Fail if !board_matters => {
                tracing::debug!(check = %f.check, "doctor: {}", f.explanation);
            }
            Verdict::Warn | Verdict::Fail => tracing::warn!(
                check = %f.check,
                verdict = f.verdict.as_str(),
                fix = f.fix.as_deref().unwrap_or(""),
                "doctor: {}",
                f.explanation
            ),
        }
    }
    findings
        .iter()
        .filter(|f| f.verdict == Verdict::Fail)
        .map(Finding::line)
        .collect()
}

/// `rkllm-server doctor [--json] [--verify]`: prints the report; returns
/// the exit code (0 when nothing blocks serving).
pub fn run(config: &Config, json: bool, options: Options) -> u8 {
    let report = examine(config, options);
    if json {
        let body = serde_json::json!({
            "ok": report.exit_code() == 0,
            "findings": report.findings,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&body).unwrap_or_default()
        );
    } else {
        print!("{}", report.text());
    }
    report.exit_code()
}

#[cfg(test)]
mod tests;
