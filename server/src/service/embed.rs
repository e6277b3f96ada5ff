//! Embeddings: a list of texts, each run on the model in turn (so other
//! clients' requests interleave), read to their end once.

use std::sync::Arc;

use serde_json::Value;

use super::error::ServiceError;
use crate::engine::{Engine, KeepAlive, RunRequest};
use crate::stream::PrivateStream;

/// The embeddings of a list of texts, in order.
#[derive(Debug)]
pub struct Embedded {
    /// The model that made them.
    pub model: String,
    /// One vector per text.
    pub vectors: Vec<Arc<[f32]>>,
    /// Input tokens, all texts together.
    pub prompt_tokens: u32,
    /// Time the runs took, queueing included.
    pub elapsed: std::time::Duration,
}

/// The texts of an embedding request's `input`: a string or an array of
/// strings, none empty, at most `max` of them.
///
/// # Errors
/// A message naming what is wrong (token arrays are not taken).
pub fn embedding_inputs(input: &Value, max: usize) -> Result<Vec<String>, String> {
    let texts = match input {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        Value::Array(items) if items.iter().any(|v| v.is_number() || v.is_array()) => {
            return Err(
                "`input` as token ids is not supported: send the text (a string or an array of strings)"
                    .into(),
            );
        }
        _ => return Err("`input` must be a string or an array of strings".into()),
    };
    if texts.is_empty() {
        return Err("`input` must not be empty".into());
    }
    if texts.len() > max {
        return Err(format!(
            "`input` has {} texts, over the limit of {max} (limits.max_embedding_inputs)",
            texts.len()
        ));
    }
    if let Some(i) = texts.iter().position(String::is_empty) {
        return Err(format!("`input` text {} is empty", i + 1));
    }
    Ok(texts)
}

/// Embeds `inputs` with `model` (the default when `None`).
///
/// # Errors
/// The first refusal or failure; the texts after it are not run.
pub async fn embed_all(
    engine: &Engine,
    model: Option<String>,
    inputs: Vec<String>,
    keep_alive: Option<KeepAlive>,
) -> Result<Embedded, ServiceError> {
    let started = std::time::Instant::now();
    let mut out = Embedded {
        model: String::new(),
        vectors: Vec::with_capacity(inputs.len()),
        prompt_tokens: 0,
        elapsed: std::time::Duration::ZERO,
    };
    for input in inputs {
        let request = RunRequest::embedding(input, model.clone());
        let stream = engine.submit_with(request, false, keep_alive)?;
        let mut private = PrivateStream::new(engine.streams(), stream);
        out.model = private.stream().model().to_owned();
        let end = loop {
            let batch = private.consumer.next_batch().await;
            if batch.is_empty() {
                return Err(ServiceError::Expired);
            }
            if let Some(end) = batch.into_iter().find_map(|c| c.end) {
                break end;
            }
        };
        let vector = end
            .embedding_result()
            .map_err(|message| ServiceError::Failed { message })?;
        out.prompt_tokens = out.prompt_tokens.saturating_add(end.usage.prompt_tokens);
        out.vectors.push(vector);
    }
    out.elapsed = started.elapsed();
    Ok(out)
}
