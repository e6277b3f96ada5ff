//! Typed reads of a params object. Each refusal is a -32602 whose
//! `data.field` names the parameter and whose message says what was
//! expected.

use serde_json::{Map, Value};

use super::RpcError;

/// A params object being read.
#[derive(Debug)]
pub(super) struct Params(pub Map<String, Value>);

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The parameters of generating a text (`run`, the `generate` tool),
/// besides the per-request overrides a backend may apply.
pub(super) const GENERATION_FIELDS: &[&str] = &[
    "prompt", "model", "images", "lora", "stop", "format", "priority",
];

impl Params {
    /// Refuses a parameter `method` does not take (`_meta`, which MCP
    /// allows on any request, is always accepted): a misspelt
    /// `max_token` must not silently fall back to the default.
    pub fn only(&self, method: &str, known: &[&[&str]]) -> Result<(), RpcError> {
        let unknown = self
            .0
            .keys()
            .find(|k| *k != "_meta" && !known.iter().any(|set| set.contains(&k.as_str())));
        match unknown {
            None => Ok(()),
            Some(field) => {
                let mut names: Vec<&str> =
                    known.iter().flat_map(|set| set.iter().copied()).collect();
                names.sort_unstable();
                let takes = if names.is_empty() {
                    "it takes none".to_owned()
                } else {
                    format!("it takes {}", names.join(", "))
                };
                Err(RpcError::invalid_params(
                    field,
                    format!("unknown parameter `{field}` for `{method}`; {takes}"),
                ))
            }
        }
    }

    fn present(&self, field: &str) -> Option<&Value> {
        self.0.get(field).filter(|v| !v.is_null())
    }

    /// The value of `field`, when present and not null.
    pub fn get(&self, field: &str) -> Option<&Value> {
        self.present(field)
    }

    /// True when the field is present and not null.
    pub fn has(&self, field: &str) -> bool {
        self.present(field).is_some()
    }

    pub fn opt_str(&mut self, field: &'static str) -> Result<Option<String>, RpcError> {
        match self.0.remove(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(RpcError::invalid_params(
                field,
                format!("`{field}` must be a string, got {}", type_name(&other)),
            )),
        }
    }

    pub fn req_str(&mut self, field: &'static str) -> Result<String, RpcError> {
        self.opt_str(field)?
            .ok_or_else(|| RpcError::invalid_params(field, format!("`{field}` is required")))
    }

    pub fn opt_bool(&self, field: &'static str) -> Result<Option<bool>, RpcError> {
        match self.present(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(RpcError::invalid_params(
                field,
                format!("`{field}` must be a boolean, got {}", type_name(other)),
            )),
        }
    }

    pub fn opt_f64(&self, field: &'static str) -> Result<Option<f64>, RpcError> {
        match self.present(field) {
            None => Ok(None),
            Some(Value::Number(n)) => n.as_f64().map(Some).ok_or_else(|| {
                RpcError::invalid_params(field, format!("`{field}` must be a finite number"))
            }),
            Some(other) => Err(RpcError::invalid_params(
                field,
                format!("`{field}` must be a number, got {}", type_name(other)),
            )),
        }
    }

    /// An integer from `min` to `max`.
    pub fn opt_int(
        &self,
        field: &'static str,
        min: u64,
        max: u64,
    ) -> Result<Option<u64>, RpcError> {
        match self.present(field) {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(v) if (min..=max).contains(&v) => Ok(Some(v)),
                _ => Err(RpcError::invalid_params(
                    field,
                    format!("`{field}` must be an integer between {min} and {max}, got {n}"),
                )),
            },
            Some(other) => Err(RpcError::invalid_params(
                field,
                format!("`{field}` must be an integer, got {}", type_name(other)),
            )),
        }
    }
}
