//! The models' checks: each configured and stored model's file (present,
//! its size and, with `--verify`, its SHA-256 against the manifest), what
//! its name says (chip, runtime version) against this board and runtime,
//! its tokenizer; and memory against the models' sizes.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::board::Snapshot;
use crate::config::Config;
use crate::model::ModelSpec;
use crate::store::{Manifest, Store, details_of};

use super::{Finding, Options};

/// One model to check.
struct Model {
    spec: ModelSpec,
    manifest: Option<Manifest>,
}

pub(super) fn check(
    config: &Config,
    s: &Snapshot,
    runtime: Option<&str>,
    options: Options,
) -> Vec<Finding> {
    let store = Store::new(config.models_dir());
    let mut models: Vec<Model> = config
        .model_specs()
        .into_iter()
        .map(|spec| Model {
            spec,
            manifest: None,
        })
        .collect();
    for manifest in store.list() {
        if models.iter().all(|m| m.spec.name != manifest.name) {
            models.push(Model {
                spec: store.spec(&manifest),
                manifest: Some(manifest),
            });
        }
    }
    let mut out = Vec::new();
    if models.is_empty() {
        out.push(Finding::warn(
            "models",
            format!(
                "no model configured or stored (store: {})",
                config.models_dir().display()
            ),
            "rkllm-server pull OWNER/REPO, or declare [[models]] in the config",
        ));
        return out;
    }
    let mut sizes = Vec::new();
    for model in &models {
        let (finding, size) = one(model, s, runtime, options);
        out.push(finding);
        sizes.extend(size);
    }
    out.push(memory(
        s,
        &mut sizes,
        runtime,
        config.engine.max_loaded_models,
    ));
    out
}

fn one(
    model: &Model,
    s: &Snapshot,
    runtime: Option<&str>,
    options: Options,
) -> (Finding, Option<u64>) {
    let check = format!("model:{}", model.spec.name);
    let Some(path) = &model.spec.path else {
        return (
            Finding::ok(check, "a built-in model (mock backend), no file"),
            None,
        );
    };
    let size = match std::fs::metadata(path) {
        Ok(meta) => meta.len(),
        Err(err) => {
            return (
                Finding::fail(
                    check,
                    format!("{}: {err}", path.display()),
                    match &model.manifest {
                        Some(_) => format!(
                            "pull it again (rkllm-server rm {0}; rkllm-server pull …) ",
                            model.spec.name
                        ),
                        None => "correct its `path` in [[models]] or --model".to_owned(),
                    },
                ),
                None,
            );
        }
    };
    let mut fails = Vec::new();
    let mut warns = Vec::new();
    let mut notes = vec![format!("{} ({})", path.display(), human(size))];
    if let Some(manifest) = &model.manifest {
        if manifest.size != size {
            fails.push(format!(
                "its size is {size} bytes, the manifest says {}",
                manifest.size
            ));
        } else if options.verify {
            match sha256(path) {
                Ok(sum) if sum.eq_ignore_ascii_case(&manifest.sha256) => {
                    notes.push("sha256 matches the manifest".into());
                }
                Ok(sum) => fails.push(format!(
                    "its sha256 is {sum}, the manifest says {}",
                    manifest.sha256
                )),
                Err(err) => fails.push(format!("cannot read it to hash it: {err}")),
            }
        } else {
            notes.push("size matches the manifest (sha256 checked with --verify)".into());
        }
    }
    let details = details_of(&file_name(path));
    if let (Some(platform), Some(chip)) = (&details.platform, &s.chip)
        && platform != chip
    {
        fails.push(format!("its name says {platform}, this board is {chip}"));
    }
    if let (Some(made_for), Some(runtime)) = (&details.runtime_version, runtime)
        && !same_minor(made_for, runtime)
    {
        warns.push(format!(
            "its name says runtime {made_for}, the loaded runtime is {runtime}"
        ));
    }
    let pulled_without = model
        .manifest
        .as_ref()
        .is_some_and(|m| m.tokenizer.is_none());
    match &model.spec.tokenizer {
        // A stored model pulled without one has only the place a later
        // pull would put it: that is no tokenizer, not a missing one.
        _ if pulled_without => {
            notes.push("no tokenizer (structured output is refused for it)".into());
        }
        Some(crate::model::tokenizer::TokenizerSource::File(file)) if !file.exists() => {
            warns.push(format!(
                "its tokenizer {} is missing (structured output needs it)",
                file.display()
            ))
        }
        Some(_) => notes.push("tokenizer present".into()),
        None => notes.push("no tokenizer (structured output is refused for it)".into()),
    }
    let finding = if !fails.is_empty() {
        Finding::fail(
            check,
            format!("{}: {}", notes[0], fails.join("; ")),
            "pull the file made for this chip again (rkllm-server rm NAME, then pull), or fix \
             `path`",
        )
    } else if !warns.is_empty() {
        Finding::warn(
            check,
            format!("{}: {}", notes[0], warns.join("; ")),
            "use a model converted for the installed runtime's version, or the runtime it was \
             converted for; give it its tokenizer.json (`tokenizer`)",
        )
    } else {
        Finding::ok(check, notes.join("; "))
    };
    (finding, Some(size))
}

/// Memory against the models: the largest must fit what is available, and
/// with runtime 1.3.0 a second model that does not fit crashes it (#522).
fn memory(s: &Snapshot, sizes: &mut [u64], runtime: Option<&str>, max_loaded: usize) -> Finding {
    let Some(memory) = s.memory else {
        return Finding::warn(
            "memory",
            "proc/meminfo not readable",
            "check [board] sys_root",
        );
    };
    if sizes.is_empty() {
        return Finding::ok(
            "memory",
            format!(
                "{} available of {} (no model file to weigh)",
                human(memory.available_bytes),
                human(memory.total_bytes)
            ),
        );
    }
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let largest = sizes.first().copied().unwrap_or(0);
    let together: u64 = sizes.iter().take(max_loaded.max(1)).sum();
    let have = format!(
        "{} available of {}",
        human(memory.available_bytes),
        human(memory.total_bytes)
    );
    if largest > memory.available_bytes {
        return Finding::fail(
            "memory",
            format!("the largest model takes {}, {have}", human(largest)),
            "use a smaller model (or quantisation), or free memory",
        );
    }
    if max_loaded > 1 && together > memory.available_bytes {
        let explanation = format!(
            "{} models loaded at once (engine.max_loaded_models) would take {}, {have}{}",
            max_loaded,
            human(together),
            if runtime == Some("1.3.0") {
                ": runtime 1.3.0 crashes when a second model does not fit (rknn-llm #522)"
            } else {
                ""
            }
        );
        let fix = "set engine.max_loaded_models = 1 (models then take turns)";
        return if runtime == Some("1.3.0") {
            Finding::fail("memory", explanation, fix)
        } else {
            Finding::warn("memory", explanation, fix)
        };
    }
    Finding::ok(
        "memory",
        format!(
            "the largest model takes {}, {} model(s) at once up to {}; {have}",
            human(largest),
            max_loaded,
            human(together)
        ),
    )
}

/// `1.2.1` and `1.2.3` share an ABI; `1.1.4` and `1.3.0` do not.
fn same_minor(a: &str, b: &str) -> bool {
    let minor = |v: &str| v.split('.').take(2).collect::<Vec<_>>().join(".");
    minor(a) == minor(b)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn sha256(path: &PathBuf) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

fn human(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}
