//! `doctor --probe`: through the running service (`POST /probe`), so that
//! no second copy of a model is loaded on the NPU, or here when none runs
//! (or with `--local`).

use serde_json::Value;

use super::find;
use crate::config::Config;
use crate::doctor::probe::{ModelReport, ProbeOptions, probe_here, text};

/// Runs the probes; returns the exit code (0 when every model was probed).
pub async fn run(config: &Config, options: ProbeOptions, json: bool, local: bool) -> u8 {
    let reports = match if local {
        None
    } else {
        find::running(config).await
    } {
        Some(service) => match through(&service, &options).await {
            Ok(reports) => reports,
            Err(code) => return code,
        },
        None => {
            let (config, asked) = (config.clone(), options.clone());
            let here = tokio::task::spawn_blocking(move || probe_here(&config, &asked)).await;
            match here {
                Ok(Ok(reports)) => reports,
                Ok(Err(why)) => {
                    eprintln!("rkllm-server: doctor --probe: {why}");
                    return 1;
                }
                Err(_) => return 1,
            }
        }
    };
    if json {
        let body = serde_json::json!({ "models": reports });
        println!(
            "{}",
            serde_json::to_string_pretty(&body).unwrap_or_default()
        );
    } else {
        print!("{}", text(&reports));
    }
    u8::from(reports.iter().any(|r| r.verdicts.is_none()))
}

/// Asks the running service; the reports, or the exit code of a failure
/// (said on stderr).
async fn through(
    service: &super::service::Service,
    options: &ProbeOptions,
) -> Result<Vec<ModelReport>, u8> {
    eprintln!("rkllm-server: doctor --probe: asking the running service");
    let body = serde_json::json!({"model": options.model, "measure": options.measure});
    let answer = service.post_json("/probe", &body, "doctor --probe").await?;
    let value: Value = answer.json().await.map_err(|e| {
        eprintln!("rkllm-server: doctor --probe: the service's answer: {e}");
        1u8
    })?;
    let models = value["models"].as_array().cloned().unwrap_or_default();
    Ok(models
        .into_iter()
        .map(|m| ModelReport {
            name: m["name"].as_str().unwrap_or_default().to_owned(),
            verdicts: serde_json::from_value(m).ok(),
            error: None,
        })
        .collect())
}
