//! Rerank: how relevant each of a list of documents is to a query, by an
//! embedding model: the cosine of the query's embedding and each
//! document's, the documents then sorted by it.

use serde_json::Value;

use super::{Service, ServiceError};

/// One document's place and score.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    /// Its index in the request's `documents`.
    pub index: usize,
    /// The cosine of its embedding and the query's, in [-1, 1].
    pub score: f32,
}

/// A rerank's answer: the documents, most relevant first.
#[derive(Debug, Clone, PartialEq)]
pub struct Reranked {
    /// The model that scored them.
    pub model: String,
    /// The first `top_n` documents by score (ties in the request's order).
    pub results: Vec<Ranked>,
    /// Tokens of the query and the documents together.
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
        if !info.capabilities.contains(&"embedding") {
            return Err(ServiceError::invalid(
                "model",
                format!(
                    "model `{}` cannot rerank: reranking scores documents by an embedding model \
                     (`embedding = true` in its [[models]] entry), and this one generates text",
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
        let mut results: Vec<Ranked> = documents
            .iter()
            .enumerate()
            .map(|(index, d)| Ranked {
                index,
                score: cosine(query, d),
            })
            .collect();
        results.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
        results.truncate(top_n.unwrap_or(usize::MAX));
        Ok(Reranked {
            model: embedded.model,
            results,
            prompt_tokens: embedded.prompt_tokens,
        })
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
