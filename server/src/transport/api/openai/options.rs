//! Two options the OpenAI family says one way on both of its APIs, read
//! here once: the answer's format (chat's `response_format`, the Responses
//! API's `text.format`) and the reasoning effort (`reasoning_effort`,
//! `reasoning.effort`). A [`Dialect`] holds what differs: the fields'
//! names, where a `json_schema` format keeps its schema, and the effort
//! levels each API takes.

use serde_json::Value;

use crate::service::{OutputFormat, ServiceError};

/// How one API of the family names and shapes the two options.
#[derive(Debug, Clone, Copy)]
pub struct Dialect {
    /// The format's field.
    pub format: &'static str,
    /// Whether a `json_schema` format's name, schema and strictness are
    /// under `json_schema` (chat), or beside `type` (Responses).
    pub nested_schema: bool,
    /// The effort's field.
    pub effort: &'static str,
    /// The levels that switch thinking on (`"none"` switches it off).
    pub levels: &'static [&'static str],
}

/// Chat and text completions: `response_format` (`json_schema` nested)
/// and `reasoning_effort`.
pub const CHAT: Dialect = Dialect {
    format: "response_format",
    nested_schema: true,
    effort: "reasoning_effort",
    levels: &["minimal", "low", "medium", "high", "xhigh", "max"],
};

/// The Responses API: `text.format` (`json_schema` flat) and
/// `reasoning.effort`.
pub const RESPONSES: Dialect = Dialect {
    format: "text.format",
    nested_schema: false,
    effort: "reasoning.effort",
    levels: &["minimal", "low", "medium", "high", "xhigh", "max"],
};

fn invalid(field: &str, message: impl Into<String>) -> ServiceError {
    ServiceError::invalid(field, message)
}

/// The format: `{"type": "text" | "json_object" | "json_schema"}`; absent
/// or null is text. A `json_schema` format's schema must be an object,
/// or `true` or absent (any JSON value); `false`, which no answer
/// satisfies, and other values are refused.
///
/// # Errors
/// A malformed format, naming the dialect's field.
pub fn format(value: Option<&Value>, dialect: &Dialect) -> Result<OutputFormat, ServiceError> {
    let field = dialect.format;
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(OutputFormat::Text);
    };
    match value.get("type").and_then(Value::as_str) {
        Some("text") => Ok(OutputFormat::Text),
        Some("json_object") => Ok(OutputFormat::JsonObject),
        Some("json_schema") if dialect.nested_schema => {
            let spec = value.get("json_schema").ok_or_else(|| {
                invalid(
                    field,
                    format!("`{field}.json_schema` is required with type json_schema"),
                )
            })?;
            if !spec.is_object() {
                return Err(invalid(
                    field,
                    format!("`{field}.json_schema` must be an object with the `schema`"),
                ));
            }
            json_schema(spec, field, &format!("{field}.json_schema"))
        }
        Some("json_schema") => json_schema(value, field, field),
        _ => Err(invalid(
            field,
            format!("`{field}.type` must be \"text\", \"json_object\" or \"json_schema\""),
        )),
    }
}

/// A `json_schema` format from `spec` (which `at` names): its name,
/// schema and strictness.
fn json_schema(spec: &Value, field: &str, at: &str) -> Result<OutputFormat, ServiceError> {
    let schema = match spec.get("schema") {
        // Absent or `true`: any JSON value.
        None | Some(Value::Null | Value::Bool(true)) => Value::Null,
        Some(Value::Bool(false)) => {
            return Err(invalid(
                field,
                format!("`{at}.schema` is `false`, which no answer satisfies"),
            ));
        }
        Some(schema @ Value::Object(_)) => schema.clone(),
        Some(_) => {
            return Err(invalid(
                field,
                format!("`{at}.schema` must be a JSON schema (an object)"),
            ));
        }
    };
    Ok(OutputFormat::JsonSchema {
        name: spec.get("name").and_then(Value::as_str).map(str::to_owned),
        schema,
        strict: spec.get("strict").and_then(Value::as_bool).unwrap_or(false),
    })
}

/// Thinking on or off from the effort: `"none"` is off, the dialect's
/// levels are on; absent says nothing.
///
/// # Errors
/// Any other effort, naming the dialect's field and what it takes.
pub fn thinking(effort: Option<&str>, dialect: &Dialect) -> Result<Option<bool>, ServiceError> {
    match effort {
        None => Ok(None),
        Some("none") => Ok(Some(false)),
        Some(level) if dialect.levels.contains(&level) => Ok(Some(true)),
        Some(other) => {
            let mut taken: Vec<String> = std::iter::once("none")
                .chain(dialect.levels.iter().copied())
                .map(|level| format!("{level:?}"))
                .collect();
            let last = taken.pop().unwrap_or_default();
            Err(invalid(
                dialect.effort,
                format!(
                    "`{}` must be {} or {last}, got {other:?}",
                    dialect.effort,
                    taken.join(", ")
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_effort_names_every_level_its_api_takes() {
        let err = thinking(Some("huge"), &CHAT).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`reasoning_effort` must be \"none\", \"minimal\", \"low\", \"medium\", \"high\", \
             \"xhigh\" or \"max\", got \"huge\""
        );
        assert_eq!(err.field(), Some("reasoning_effort"));
        let err = thinking(Some("huge"), &RESPONSES).unwrap_err();
        assert_eq!(err.field(), Some("reasoning.effort"));
        assert!(
            err.to_string()
                .ends_with("\"xhigh\" or \"max\", got \"huge\"")
        );
        assert_eq!(thinking(Some("max"), &RESPONSES).unwrap(), Some(true));
        assert_eq!(thinking(Some("max"), &CHAT).unwrap(), Some(true));
        assert_eq!(thinking(Some("none"), &CHAT).unwrap(), Some(false));
        assert_eq!(thinking(None, &RESPONSES).unwrap(), None);
    }

    #[test]
    fn a_schema_is_read_nested_or_flat_and_refused_alike() {
        let object = json!({"type": "object"});
        let nested = json!({"type": "json_schema",
                            "json_schema": {"name": "n", "schema": object, "strict": true}});
        let flat = json!({"type": "json_schema", "name": "n", "schema": object, "strict": true});
        let expected = OutputFormat::JsonSchema {
            name: Some("n".into()),
            schema: object,
            strict: true,
        };
        assert_eq!(format(Some(&nested), &CHAT).unwrap(), expected);
        assert_eq!(format(Some(&flat), &RESPONSES).unwrap(), expected);
        for schema in [json!(false), json!(5), json!("object")] {
            let flat = json!({"type": "json_schema", "name": "n", "schema": schema});
            let err = format(Some(&flat), &RESPONSES).unwrap_err();
            assert_eq!(err.field(), Some("text.format"), "{schema}");
            assert!(err.to_string().starts_with("`text.format.schema`"), "{err}");
        }
        let err = format(Some(&json!({"type": "yaml"})), &RESPONSES).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`text.format.type` must be \"text\", \"json_object\" or \"json_schema\""
        );
        for any in [
            json!({"type": "json_schema"}),
            json!({"type": "json_schema", "schema": true}),
        ] {
            assert!(matches!(
                format(Some(&any), &RESPONSES).unwrap(),
                OutputFormat::JsonSchema {
                    schema: Value::Null,
                    ..
                }
            ));
        }
    }
}
