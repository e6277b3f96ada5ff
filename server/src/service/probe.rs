//! A model's runtime probed again on the NPU, on an operator's asking
//! (`rkllm-server doctor --probe` when the service runs): the probe order
//! waits its turn in the model's queue like a request, so the model is
//! never loaded twice, and its verdicts become the model's.

use super::{PrivateStream, Running, Service, ServiceError};
use crate::backend::ProbeOrder;
use crate::engine::RunRequest;
use crate::plan::probe::{Batch, Verdicts};

/// One model's report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProbeReport {
    /// The model.
    pub name: String,
    /// What its runtime was found to do.
    #[serde(flatten)]
    pub verdicts: Verdicts,
}

impl Service {
    /// Probes `model`'s runtime again (loading the model first when it is
    /// not loaded), measuring the board's figures too when `measure`.
    ///
    /// # Errors
    /// An unknown model, a backend with no runtime to probe (the mock), a
    /// model that cannot be loaded, or a run that failed.
    pub async fn probe(
        &self,
        model: Option<&str>,
        measure: bool,
    ) -> Result<ProbeReport, ServiceError> {
        let name = self.engine.model(model)?.name;
        if !self.engine.probes() {
            return Err(ServiceError::invalid(
                "model",
                format!("model `{name}` runs on the mock backend, which has no runtime to probe"),
            ));
        }
        let run = RunRequest {
            model: Some(name.clone()),
            probe: Some(ProbeOrder { measure }),
            max_tokens: Some(1),
            ..RunRequest::default()
        };
        let stream = self.engine.submit_with(run, false, None)?;
        let running = Running::new(PrivateStream::new(self.engine.streams(), stream), false);
        running
            .collect_with(|_| std::future::ready(Ok::<_, ServiceError>(())))
            .await?
            .ok()?;
        let mut verdicts =
            self.engine
                .model(Some(&name))?
                .probes
                .ok_or_else(|| ServiceError::Failed {
                    message: format!("model `{name}` was probed but its runner gave no verdicts"),
                })?;
        if let Some(measured) = verdicts.measured.as_mut() {
            // A batch needs a handle of its own: a second copy of the model
            // beside the one served, which can exhaust the NPU's memory.
            for n in [2, 4] {
                measured.batch.push(Batch {
                    n_batch: n,
                    ran: false,
                    decode_tokens_per_s_per_stream: 0.0,
                    per_stream_vs_single: 0.0,
                    detail: "not measured through the running service (a batch needs a second copy of the model on the NPU): stop the service and run `rkllm-server doctor --probe --local`".into(),
                });
            }
        }
        Ok(ProbeReport { name, verdicts })
    }
}
