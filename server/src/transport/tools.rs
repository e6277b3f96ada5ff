//! Tool calls in model output. Models trained for function calling (Qwen
//! first) answer a call as `<tool_call>{"name": …, "arguments": {…}}</tool_call>`.
//! [`ToolCallFilter`] streams the text before a call and holds back
//! everything from the opening tag on (and anything that may be the start
//! of one); [`ToolCallFilter::finish`] parses the calls held back.

use serde_json::Value;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// One parsed call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The function's name.
    pub name: String,
    /// Its arguments (an object).
    pub arguments: Value,
}

/// Separates streamed text from tool calls.
#[derive(Debug, Default)]
pub struct ToolCallFilter {
    held: String,
    in_call: bool,
}

impl ToolCallFilter {
    /// Feeds a delta; returns the text that can be shown now.
    pub fn push(&mut self, delta: &str) -> String {
        self.held.push_str(delta);
        if self.in_call {
            return String::new();
        }
        if let Some(at) = self.held.find(OPEN) {
            self.in_call = true;
            let shown: String = self.held.drain(..at).collect();
            return shown;
        }
        // Keep back a tail that may be the start of the opening tag.
        let keep = (1..OPEN.len())
            .rev()
            .find(|&n| {
                self.held.len() >= n
                    && self.held.is_char_boundary(self.held.len() - n)
                    && OPEN.starts_with(&self.held[self.held.len() - n..])
            })
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        self.held.drain(..cut).collect()
    }

    /// At the end: the text still held (when it was no call) and the calls.
    pub fn finish(&mut self) -> (String, Vec<ToolCall>) {
        let held = std::mem::take(&mut self.held);
        if !self.in_call {
            return (held, Vec::new());
        }
        let mut calls = Vec::new();
        let mut rest = held.as_str();
        while let Some(start) = rest.find(OPEN) {
            let body = &rest[start + OPEN.len()..];
            let (inner, after) = match body.find(CLOSE) {
                Some(end) => (&body[..end], &body[end + CLOSE.len()..]),
                None => (body, ""),
            };
            if let Some(call) = parse_call(inner) {
                calls.push(call);
            }
            rest = after;
        }
        if calls.is_empty() {
            // Not a well-formed call after all: show it as text.
            return (held, calls);
        }
        (String::new(), calls)
    }
}

fn parse_call(inner: &str) -> Option<ToolCall> {
    let value: Value = serde_json::from_str(inner.trim()).ok()?;
    let name = value.get("name")?.as_str()?.to_owned();
    let arguments = match value.get("arguments") {
        Some(Value::String(s)) => {
            serde_json::from_str(s).unwrap_or(Value::Object(Default::default()))
        }
        Some(v @ Value::Object(_)) => v.clone(),
        _ => Value::Object(Default::default()),
    };
    Some(ToolCall { name, arguments })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(pieces: &[&str]) -> (String, Vec<ToolCall>) {
        let mut filter = ToolCallFilter::default();
        let mut shown = String::new();
        for piece in pieces {
            shown.push_str(&filter.push(piece));
        }
        let (rest, calls) = filter.finish();
        shown.push_str(&rest);
        (shown, calls)
    }

    #[test]
    fn a_call_split_across_deltas_is_held_back_and_parsed() {
        let (shown, calls) = run(&[
            "Let me check. <to",
            "ol_call>{\"name\": \"get_weather\", ",
            "\"arguments\": {\"city\": \"Paris\"}}</tool_call>",
        ]);
        assert_eq!(shown, "Let me check. ");
        assert_eq!(
            calls,
            vec![ToolCall {
                name: "get_weather".into(),
                arguments: json!({"city": "Paris"})
            }]
        );
    }

    #[test]
    fn plain_text_and_lookalikes_pass_through() {
        assert_eq!(
            run(&["a < b and <tool", "s are fine"]),
            ("a < b and <tools are fine".into(), vec![])
        );
        let (shown, calls) = run(&["<tool_call>not json</tool_call>"]);
        assert_eq!(
            (shown.as_str(), calls.len()),
            ("<tool_call>not json</tool_call>", 0)
        );
    }

    #[test]
    fn several_calls_and_string_arguments_are_read() {
        let text = "<tool_call>{\"name\":\"a\",\"arguments\":\"{\\\"x\\\":1}\"}</tool_call>\n<tool_call>{\"name\":\"b\",\"arguments\":{}}</tool_call>";
        let (_, calls) = run(&[text]);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].arguments, json!({"x": 1}));
        assert_eq!(calls[1].name, "b");
    }
}
