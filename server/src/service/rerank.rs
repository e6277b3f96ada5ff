//! Rerank: how relevant each of a list of documents is to a query, by an
//! embedding model (the cosine of the query's embedding and each
//! document's) or by a reranker model (its "yes" against "no" for each
//! document, read from the logits row of its first token: see
//! [`crate::model::rerank`]), the documents then sorted by it.

use serde_json::Value;

use super::{PrivateStream, Running, Service, ServiceError};
use crate::engine::RunRequest;
use crate::model::rerank;

/// One document's place and score.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    /// Its index in the request's `documents`.
    pub index: usize,
    /// By an embedding model, the cosine of its embedding and the query's,
    /// in [-1, 1]; by a reranker, the probability of its "yes", in [0, 1].
    pub score: f32,
}

/// A rerank's answer: the documents, most relevant first.
#[derive(Debug, Clone, PartialEq)]
pub struct Reranked {
    /// The model that scored them.
    pub model: String,
    /// The first `top_n` documents by score (ties in the request's order).
    pub results: Vec<Ranked>,
    /// Tokens of the query and the documents together (by a reranker, of
    /// every judgement it prefilled).
    pub prompt_tokens: u32,
}

/// The cosine of `a` and `b` (0 when either is all zeros).
fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let (na, nb) = (norm(a), norm(b));
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        (dot / (na * nb)).clamp(-1.0, 1.0)
    }
}

/// `results` most relevant first (ties in the request's order), the first
/// `top_n` of them.
fn ranked(mut results: Vec<Ranked>, top_n: Option<usize>) -> Vec<Ranked> {
    results.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    results.truncate(top_n.unwrap_or(usize::MAX));
    results
}

impl Service {
    /// Ranks `documents` by their relevance to `query` with `model` (an
    /// embedding model), keeping the first `top_n` (all when `None`).
    ///
    /// # Errors
    /// A model that is not an embedding model (naming `model`); an empty
    /// query or document, or more texts than `limits.max_embedding_inputs`
    /// (naming the field); a failed run.
    pub async fn rerank(
        &self,
        model: Option<&str>,
        query: String,
        documents: Vec<String>,
        top_n: Option<usize>,
    ) -> Result<Reranked, ServiceError> {
        let info = self.engine.model(model)?;
        let judged = info.capabilities.contains(&"rerank");
        if !judged && !info.capabilities.contains(&"embedding") {
            return Err(ServiceError::invalid(
                "model",
                format!(
                    "model `{}` cannot rerank: reranking scores documents by an embedding model \
                     (`embedding = true` in its [[models]] entry) or a reranker (`reranker = \
                     true`), and this one is neither",
                    info.name
                ),
            ));
        }
        if query.is_empty() {
            return Err(ServiceError::invalid("query", "`query` must not be empty"));
        }
        if documents.is_empty() {
            return Err(ServiceError::invalid(
                "documents",
                "`documents` must not be empty",
            ));
        }
        if let Some(i) = documents.iter().position(String::is_empty) {
            return Err(ServiceError::invalid(
                "documents",
                format!("`documents[{i}]` is empty"),
            ));
        }
        // Every text within the prompt's bound, before any work.
        self.rerank_sizes(&query, &documents)?;
        if top_n == Some(0) {
            // Nothing asked for: nothing runs.
            return Ok(Reranked {
                model: info.name,
                results: Vec::new(),
                prompt_tokens: 0,
            });
        }
        if judged {
            return self.judge(info.name, &query, documents, top_n).await;
        }
        let texts: Vec<Value> = std::iter::once(query)
            .chain(documents)
            .map(Value::String)
            .collect();
        let embedded = self
            .embed(Some(info.name), &Value::Array(texts), None)
            .await?;
        let (query, documents) =
            embedded
                .vectors
                .split_first()
                .ok_or_else(|| ServiceError::Failed {
                    message: "the query was not embedded".into(),
                })?;
        let results: Vec<Ranked> = documents
            .iter()
            .enumerate()
            .map(|(index, d)| Ranked {
                index,
                score: cosine(query, d),
            })
            .collect();
        Ok(Reranked {
            model: embedded.model,
            results: ranked(results, top_n),
            prompt_tokens: embedded.prompt_tokens,
        })
    }

    /// Ranks `documents` by reranker `model`: one judgement after another
    /// in the model's queue (others' requests interleave), each a run of
    /// one token whose logits row gives the relevance. Every judgement is
    /// built, bounded and counted before the first runs.
    ///
    /// # Errors
    /// A model whose template would wrap the judgement (its runtime's
    /// built-in one); a judgement over the prompt's bound or the model's
    /// context, or judgements over `limits.max_rerank_tokens` together
    /// (naming `documents`); a refusal or a failed run; an answer that is
    /// neither "yes" nor "no".
    async fn judge(
        &self,
        model: String,
        query: &str,
        documents: Vec<String>,
        top_n: Option<usize>,
    ) -> Result<Reranked, ServiceError> {
        let profile = self.engine.profile(Some(&model))?;
        if profile.template == crate::model::ChatTemplate::Builtin {
            return Err(ServiceError::invalid(
                "model",
                format!(
                    "model `{model}` has the runtime's built-in chat template, which would wrap \
                     the reranker's judgement as a chat turn; give it its own (`chat_template` \
                     in its [[models]] entry)"
                ),
            ));
        }
        // Its judgements read logits rows: probed first, so that a runtime
        // whose rows cannot be trusted refuses before any runs.
        if profile.unprobed {
            self.engine.load(Some(&model), None).await?;
        }
        let judgements = self.judgements(&model, &profile, query, &documents).await?;
        let mut results = Vec::with_capacity(documents.len());
        let mut prompt_tokens: u32 = 0;
        for (index, prompt) in judgements.into_iter().enumerate() {
            let run = RunRequest {
                prompt,
                model: Some(model.clone()),
                max_tokens: Some(1),
                sampling: crate::model::Sampling {
                    logprobs: Some(rerank::CANDIDATES),
                    ..crate::model::Sampling::default()
                },
                ..RunRequest::default()
            };
            let stream = self.engine.submit_with(run, false, None)?;
            let running = Running::new(PrivateStream::new(self.engine.streams(), stream), false);
            let done = running
                .collect_with(|_| std::future::ready(Ok::<_, ServiceError>(())))
                .await?
                .ok()?;
            prompt_tokens = prompt_tokens.saturating_add(done.ending.usage.prompt_tokens);
            let score = done
                .logprobs
                .first()
                .and_then(rerank::relevance)
                .ok_or_else(|| ServiceError::Failed {
                    message: format!(
                        "model `{model}` answered {:?} to the judgement of `documents[{index}]`, \
                         not \"yes\" or \"no\": is it a reranker?",
                        done.text
                    ),
                })?;
            results.push(Ranked { index, score });
        }
        Ok(Reranked {
            model,
            results: ranked(results, top_n),
            prompt_tokens,
        })
    }
}

impl Service {
    /// The bytes of a rerank's query and of each document with it, within
    /// `limits.max_prompt_bytes`, and their number within
    /// `limits.max_embedding_inputs`: checked before any other work.
    ///
    /// # Errors
    /// The first over its bound, naming the field and the key.
    fn rerank_sizes(&self, query: &str, documents: &[String]) -> Result<(), ServiceError> {
        let limit = self.engine.request_limits().max_prompt_bytes;
        if query.len() > limit {
            return Err(ServiceError::invalid(
                "query",
                format!(
                    "`query` is {} bytes, over the limit of {limit} (limits.max_prompt_bytes)",
                    query.len()
                ),
            ));
        }
        if let Some(i) = documents.iter().position(|d| query.len() + d.len() > limit) {
            return Err(ServiceError::invalid(
                "documents",
                format!(
                    "`documents[{i}]` is {} bytes; with the query that is over the limit of \
                         {limit} (limits.max_prompt_bytes)",
                    documents[i].len()
                ),
            ));
        }
        if documents.len() + 1 > self.max_embedding_inputs {
            return Err(ServiceError::invalid(
                "documents",
                format!(
                    "`documents` has {} texts; with the query that is over the limit of {} \
                         (limits.max_embedding_inputs)",
                    documents.len(),
                    self.max_embedding_inputs
                ),
            ));
        }
        Ok(())
    }

    /// The judgements of `documents` against `query` by `model`, each
    /// within the prompt's bound and the model's context, and all within
    /// `limits.max_rerank_tokens` together, counted by its tokenizer (by
    /// their bytes without one).
    ///
    /// # Errors
    /// The first judgement over a bound, or the total over its own (naming
    /// `documents`).
    async fn judgements(
        &self,
        model: &str,
        profile: &crate::engine::ModelProfile,
        query: &str,
        documents: &[String],
    ) -> Result<Vec<crate::model::Prompt>, ServiceError> {
        let limits = self.engine.request_limits();
        let mut judgements = Vec::with_capacity(documents.len());
        for (i, document) in documents.iter().enumerate() {
            let prompt = rerank::judgement(rerank::DEFAULT_INSTRUCTION, query, document);
            if prompt.text.len() > limits.max_prompt_bytes {
                return Err(ServiceError::invalid(
                    "documents",
                    format!(
                        "the judgement of `documents[{i}]` is {} bytes, over the limit of {} \
                         (limits.max_prompt_bytes)",
                        prompt.text.len(),
                        limits.max_prompt_bytes
                    ),
                ));
            }
            judgements.push(prompt);
        }
        let mut total: u64 = 0;
        let mut counted = Vec::with_capacity(judgements.len());
        for (i, prompt) in judgements.into_iter().enumerate() {
            let prompt = self.counted(Some(model), prompt).await;
            let tokens = prompt.tokens.map_or_else(
                || (prompt.text.len() / crate::engine::BYTES_PER_TOKEN) as u64,
                u64::from,
            );
            if let Some(context) = profile.context_length
                && tokens >= u64::from(context)
            {
                return Err(ServiceError::invalid(
                    "documents",
                    format!(
                        "the judgement of `documents[{i}]` is {tokens} tokens, over model \
                         `{model}`'s context of {context}"
                    ),
                ));
            }
            total += tokens;
            if total > u64::from(limits.max_rerank_tokens) {
                return Err(ServiceError::invalid(
                    "documents",
                    format!(
                        "the judgements of `documents` are over {} tokens together (the limit \
                         of limits.max_rerank_tokens, at `documents[{i}]`): fewer or shorter \
                         documents, or a larger limit",
                        limits.max_rerank_tokens
                    ),
                ));
            }
            counted.push(prompt);
        }
        Ok(counted)
    }
}

#[cfg(test)]
mod tests {
    use super::cosine;

    #[test]
    fn cosine_is_one_for_the_same_direction_and_zero_for_orthogonal_or_empty() {
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]) - 1.0).abs() < 1e-6);
        assert!(cosine(&[1.0, 0.0], &[0.0, 3.0]).abs() < 1e-6);
        assert!((cosine(&[1.0, 0.0], &[-1.0, 0.0]) + 1.0).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), 0.0);
    }
}
