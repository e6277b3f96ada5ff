//! [`Generate`]: one generation request, whatever API it came from, with
//! every option an API may set. Each API translates its request into this;
//! an option the server cannot honour is refused here, once, for all.

use serde_json::Value;

use super::ServiceError;
use crate::engine::KeepAlive;
use crate::model::Input;
use crate::model::Sampling;
use crate::model::constraint::{Constraint, ToolSchema};

/// Which tool the model must call, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (the default).
    #[default]
    Auto,
    /// No tool: the tools are not offered and the reply is not read for calls.
    None,
    /// Some tool must be called.
    Required,
    /// This tool must be called.
    Function(String),
}

/// The shape the answer must have.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum OutputFormat {
    /// Free text (the default).
    #[default]
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON valid against a schema.
    JsonSchema {
        /// Its name, where the API gives one.
        name: Option<String>,
        /// The schema.
        schema: Value,
        /// Whether the API asked for strict adherence.
        strict: bool,
    },
}

/// One generation request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Generate {
    /// The model (the default model when absent).
    pub model: Option<String>,
    /// The conversation or prompt.
    pub input: Input,
    /// Sampling overrides.
    pub sampling: Sampling,
    /// Cap on generated tokens.
    pub max_tokens: Option<u64>,
    /// Strings that end the answer (not shown).
    pub stop: Vec<String>,
    /// Function tools the model may call, in OpenAI's shape
    /// (`{"type": "function", "function": {name, description, parameters}}`).
    pub tools: Vec<Value>,
    /// Which tool must be called.
    pub tool_choice: ToolChoice,
    /// A LoRA adapter of the model.
    pub lora: Option<String>,
    /// How long the model stays loaded after this request.
    pub keep_alive: Option<KeepAlive>,
    /// Thinking on or off (reasoning models); `None`: the model's default.
    pub thinking: Option<bool>,
    /// The answer's shape.
    pub format: OutputFormat,
    /// The API's name for the format field (for its errors).
    pub format_field: &'static str,
    /// The context window the request asks for, in tokens (Ollama's
    /// `options.num_ctx`): at most the model's; `None` is the model's.
    pub context: Option<u64>,
    /// The most tool calls the answer may make (`Some(1)`: OpenAI's
    /// `parallel_tool_calls: false`); calls after them are dropped.
    pub max_tool_calls: Option<usize>,
    /// The text after the gap the answer fills (fill-in-the-middle; the
    /// input is then a prompt: the text before it).
    pub suffix: Option<String>,
    /// The session the body names (`prompt_cache_key`, Anthropic's
    /// `metadata.user_id`), for the conversation's key (`conversation`).
    pub session: Option<String>,
}

impl Generate {
    /// The name of each offered tool.
    pub fn tool_names(&self) -> Vec<&str> {
        self.tools
            .iter()
            .filter_map(|t| {
                t.pointer("/function/name")
                    .or_else(|| t.get("name"))
                    .and_then(Value::as_str)
            })
            .collect()
    }

    /// The offered tools a forced call may name (`only`: just that one),
    /// with their parameters' schemas, self-contained (the call's grammar
    /// holds them below its root, where their own `#/$defs/…` would miss).
    fn tool_schemas(&self, only: Option<&str>) -> Vec<ToolSchema> {
        self.tools
            .iter()
            .filter_map(|tool| {
                let function = tool.get("function").unwrap_or(tool);
                let name = function.get("name")?.as_str()?;
                (only.is_none() || only == Some(name)).then(|| ToolSchema {
                    name: name.to_owned(),
                    parameters: function
                        .get("parameters")
                        .map_or(Value::Null, super::refs::inline_local_refs),
                })
            })
            .collect()
    }

    /// The constraint the answer is held to — its format, or a forced
    /// tool call —, with the field that asked for it (for the errors of
    /// compiling it); `None` for free text.
    ///
    /// # Errors
    /// A forced call of a tool that is not offered, or a forced call and
    /// a format together; each naming `tool_choice`.
    pub fn constraint(&self) -> Result<Option<(Constraint, &'static str)>, ServiceError> {
        let format_field = if self.format_field.is_empty() {
            "format"
        } else {
            self.format_field
        };
        let names = self.tool_names();
        let forced = match &self.tool_choice {
            ToolChoice::Function(name) if !names.contains(&name.as_str()) => {
                return Err(ServiceError::invalid(
                    "tool_choice",
                    format!(
                        "`tool_choice` names the function {name:?}, which is not among the \
                         tools ({})",
                        names.join(", ")
                    ),
                ));
            }
            ToolChoice::Required if names.is_empty() => {
                return Err(ServiceError::invalid(
                    "tool_choice",
                    "`tool_choice` asks for a tool call but no tools are given",
                ));
            }
            ToolChoice::Required => Some(Constraint::ToolCall(self.tool_schemas(None))),
            ToolChoice::Function(name) => Some(Constraint::ToolCall(self.tool_schemas(Some(name)))),
            ToolChoice::Auto | ToolChoice::None => None,
        };
        let format = match &self.format {
            OutputFormat::Text => None,
            OutputFormat::JsonObject => Some(Constraint::JsonObject),
            OutputFormat::JsonSchema { schema, .. } => Some(Constraint::JsonSchema(schema.clone())),
        };
        Ok(match (forced, format) {
            (Some(_), Some(_)) => {
                return Err(ServiceError::invalid(
                    "tool_choice",
                    format!(
                        "`tool_choice` forces a tool call and `{format_field}` asks for a format: \
                         one answer cannot be both, ask for one of them"
                    ),
                ));
            }
            (Some(forced), None) => Some((forced, "tool_choice")),
            (None, Some(format)) => Some((format, format_field)),
            (None, None) => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn with_tools(tool_choice: ToolChoice, format: OutputFormat) -> Generate {
        Generate {
            tools: vec![
                json!({"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}),
                json!({"type": "function", "function": {"name": "b"}}),
            ],
            tool_choice,
            format,
            format_field: "response_format",
            ..Generate::default()
        }
    }

    #[test]
    fn a_forced_call_and_a_format_together_are_refused_naming_both() {
        for choice in [ToolChoice::Required, ToolChoice::Function("a".into())] {
            let err = with_tools(choice, OutputFormat::JsonObject)
                .constraint()
                .unwrap_err();
            assert_eq!(err.field(), Some("tool_choice"));
            let message = err.to_string();
            assert!(message.contains("`tool_choice`"), "{message}");
            assert!(message.contains("`response_format`"), "{message}");
        }
    }

    #[test]
    fn the_constraint_and_the_field_that_asked_for_it() {
        let (constraint, field) = with_tools(ToolChoice::Function("b".into()), OutputFormat::Text)
            .constraint()
            .unwrap()
            .unwrap();
        assert_eq!(field, "tool_choice");
        assert_eq!(
            constraint,
            Constraint::ToolCall(vec![ToolSchema {
                name: "b".into(),
                parameters: Value::Null
            }])
        );
        let (constraint, field) = with_tools(ToolChoice::Auto, OutputFormat::JsonObject)
            .constraint()
            .unwrap()
            .unwrap();
        assert_eq!(
            (constraint, field),
            (Constraint::JsonObject, "response_format")
        );
        let Some((Constraint::ToolCall(tools), _)) =
            with_tools(ToolChoice::Required, OutputFormat::Text)
                .constraint()
                .unwrap()
        else {
            panic!("a forced call");
        };
        assert_eq!(tools.len(), 2);
        assert_eq!(
            with_tools(ToolChoice::None, OutputFormat::Text)
                .constraint()
                .unwrap(),
            None
        );
    }

    #[test]
    fn a_forced_call_holds_a_tool_with_nested_models_to_its_whole_schema() {
        let parameters = json!({
            "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}}},
            "type": "object",
            "properties": {"at": {"$ref": "#/$defs/Point"}},
            "required": ["at"]
        });
        let request = Generate {
            tools: vec![
                json!({"type": "function", "function": {"name": "f", "parameters": parameters}}),
            ],
            tool_choice: ToolChoice::Required,
            ..Generate::default()
        };
        let Some((Constraint::ToolCall(tools), _)) = request.constraint().unwrap() else {
            panic!("a forced call");
        };
        assert_eq!(
            tools[0].parameters["properties"]["at"],
            json!({"type": "object", "properties": {"x": {"type": "number"}}})
        );
        // The grammar the engine compiles: the reference resolved.
        use crate::model::constraint::check;
        use crate::model::tokenizer::TokenizerSource;
        let mock = crate::backend::vocabularies::load(&TokenizerSource::Mock).unwrap();
        check(&mock, &Constraint::ToolCall(tools)).unwrap();
    }

    #[test]
    fn a_forced_call_of_a_tool_not_offered_is_refused() {
        let err = with_tools(ToolChoice::Function("c".into()), OutputFormat::Text)
            .constraint()
            .unwrap_err();
        assert_eq!(err.field(), Some("tool_choice"));
        assert!(err.to_string().contains("\"c\""));
        let none = Generate {
            tool_choice: ToolChoice::Required,
            ..Generate::default()
        };
        assert_eq!(none.constraint().unwrap_err().field(), Some("tool_choice"));
    }
}
