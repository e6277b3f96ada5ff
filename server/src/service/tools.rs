//! Tool calls in model output, parsed while the text streams. Models
//! trained for function calling (Qwen first) answer a call as
//! `<tool_call>{"name": …, "arguments": {…}}</tool_call>`. The
//! [`ToolCallParser`] shows the text around calls as text and turns each
//! call into events as it arrives: its start (id and name) as soon as the
//! name is known, then its arguments' JSON in fragments as the model
//! writes them, then its end with the whole call. A `<tool_call>` block
//! that turns out not to be a well-formed call is shown as text.

use serde_json::Value;

use super::event::{Event, push_text};
use crate::model::ToolCall;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// The arguments' value as the scan has seen it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Args {
    /// An object (or array) that started at this offset of the body.
    Object { start: usize, end: Option<usize> },
    /// A JSON string (arguments as encoded text): decoded at the end.
    Encoded,
}

/// A scan of one call's body, a character at a time, enough to find its
/// name and the extent of its arguments object while it streams.
#[derive(Debug, Default)]
struct Scan {
    body: String,
    pos: usize,
    depth: u32,
    in_string: bool,
    escape: bool,
    expect_key: bool,
    /// Start of the string being read at depth 1, and whether it is a key.
    string_start: Option<(usize, bool)>,
    key: Option<String>,
    value_of: Option<String>,
    value_started: bool,
    name: Option<String>,
    args: Option<Args>,
}

impl Scan {
    fn push(&mut self, text: &str) {
        self.body.push_str(text);
        let mut chars = self.body[self.pos..].char_indices().collect::<Vec<_>>();
        for (offset, c) in chars.drain(..) {
            let i = self.pos + offset;
            self.step(i, c);
        }
        self.pos = self.body.len();
    }

    fn step(&mut self, i: usize, c: char) {
        if self.in_string {
            if self.escape {
                self.escape = false;
            } else if c == '\\' {
                self.escape = true;
            } else if c == '"' {
                self.in_string = false;
                if let Some((start, is_key)) = self.string_start.take() {
                    let literal: Option<String> = serde_json::from_str(&self.body[start..=i]).ok();
                    if is_key {
                        self.key = literal;
                    } else if self.value_of.as_deref() == Some("name") {
                        self.name = literal;
                    }
                }
            }
            return;
        }
        match c {
            '"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_key {
                    self.expect_key = false;
                    self.string_start = Some((i, true));
                } else if self.depth == 1 && self.value_of.is_some() && !self.value_started {
                    self.value_started = true;
                    if self.value_of.as_deref() == Some("arguments") {
                        self.args = Some(Args::Encoded);
                    }
                    self.string_start = Some((i, false));
                }
            }
            ':' if self.depth == 1 => {
                self.value_of = self.key.take();
                self.value_started = false;
            }
            '{' | '[' => {
                if self.depth == 1
                    && self.value_of.as_deref() == Some("arguments")
                    && !self.value_started
                {
                    self.value_started = true;
                    self.args = Some(Args::Object {
                        start: i,
                        end: None,
                    });
                }
                self.depth += 1;
                if self.depth == 1 {
                    self.expect_key = true;
                }
            }
            '}' | ']' => {
                self.depth = self.depth.saturating_sub(1);
                if self.depth == 1
                    && let Some(Args::Object { start, end: None }) = self.args
                {
                    self.args = Some(Args::Object {
                        start,
                        end: Some(i + 1),
                    });
                }
            }
            ',' if self.depth == 1 => {
                self.expect_key = true;
                self.value_of = None;
                self.value_started = false;
            }
            _ => {}
        }
    }

    /// The arguments text that can be shown now: `(start, end)` of the
    /// object seen so far.
    fn args_span(&self) -> Option<(usize, usize)> {
        match self.args? {
            Args::Object { start, end } => Some((start, end.unwrap_or(self.pos))),
            _ => None,
        }
    }
}

/// One call being read.
#[derive(Debug)]
struct Open {
    scan: Scan,
    /// Text after the opening tag not yet scanned (may hold the closing tag).
    pending: String,
    /// The id, once the start was shown.
    started: Option<String>,
    /// Bytes of the arguments shown so far (from the span's start).
    shown_args: usize,
}

/// Separates streamed text from tool calls.
#[derive(Debug, Default)]
pub struct ToolCallParser {
    held: String,
    open: Option<Open>,
    calls: usize,
    /// The most calls read; the answer after the last is dropped.
    limit: Option<usize>,
}

fn new_call_id() -> String {
    format!("call_{}", crate::stream::new_stream_id())
}

impl ToolCallParser {
    /// Reads at most `limit` calls (`None`: any number).
    pub fn limit(&mut self, limit: Option<usize>) {
        self.limit = limit;
    }

    /// Whether the calls allowed have all been read.
    fn full(&self) -> bool {
        self.limit.is_some_and(|limit| self.calls >= limit)
    }

    /// Feeds a delta; appends what it became to `out`.
    pub fn push(&mut self, delta: &str, out: &mut Vec<Event>) {
        self.held.push_str(delta);
        loop {
            if self.full() {
                self.held.clear();
                return;
            }
            if self.open.is_some() {
                if !self.feed_open(out) {
                    return;
                }
                continue;
            }
            if let Some(at) = self.held.find(OPEN) {
                let text: String = self.held.drain(..at + OPEN.len()).collect();
                push_text(out, &text[..at], false);
                self.open = Some(Open {
                    scan: Scan::default(),
                    pending: String::new(),
                    started: None,
                    shown_args: 0,
                });
                continue;
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
            let text: String = self.held.drain(..cut).collect();
            push_text(out, &text, false);
            return;
        }
    }

    /// Moves held text into the open call; returns true when the call
    /// closed (the rest of `held` is then outside it).
    fn feed_open(&mut self, out: &mut Vec<Event>) -> bool {
        let Some(open) = self.open.as_mut() else {
            return false;
        };
        open.pending.push_str(&self.held);
        self.held.clear();
        if let Some(at) = open.pending.find(CLOSE) {
            let body: String = open.pending.drain(..at).collect();
            open.pending.drain(..CLOSE.len());
            self.held = std::mem::take(&mut open.pending);
            open.scan.push(&body);
            self.show_progress(out);
            self.close(out, true);
            return true;
        }
        let keep = (1..CLOSE.len())
            .rev()
            .find(|&n| {
                open.pending.len() >= n
                    && open.pending.is_char_boundary(open.pending.len() - n)
                    && CLOSE.starts_with(&open.pending[open.pending.len() - n..])
            })
            .unwrap_or(0);
        let cut = open.pending.len() - keep;
        let scanned: String = open.pending.drain(..cut).collect();
        open.scan.push(&scanned);
        self.show_progress(out);
        false
    }

    /// Shows the open call's start once its name is known, and its
    /// arguments as far as they go.
    fn show_progress(&mut self, out: &mut Vec<Event>) {
        let index = self.calls;
        let Some(open) = self.open.as_mut() else {
            return;
        };
        if open.started.is_none() {
            let Some(name) = open.scan.name.clone() else {
                return;
            };
            let id = new_call_id();
            out.push(Event::CallStart {
                index,
                id: id.clone(),
                name,
            });
            open.started = Some(id);
        }
        if let Some((start, end)) = open.scan.args_span() {
            let from = start + open.shown_args;
            if end > from {
                out.push(Event::CallArguments {
                    index,
                    fragment: open.scan.body[from..end].to_owned(),
                });
                open.shown_args = end - start;
            }
        }
    }

    /// Ends the open call: a well-formed one becomes its end event; one
    /// that is not, and showed nothing yet, is shown as the text it was.
    fn close(&mut self, out: &mut Vec<Event>, closed: bool) {
        let Some(open) = self.open.take() else {
            return;
        };
        let index = self.calls;
        let parsed = parse_call(&open.scan.body);
        match (parsed, open.started) {
            (None, None) => {
                let mut text = format!("{OPEN}{}", open.scan.body);
                if closed {
                    text.push_str(CLOSE);
                }
                push_text(out, &text, false);
            }
            (parsed, started) => {
                let streamed = open
                    .scan
                    .args_span()
                    .map(|(start, end)| open.scan.body[start..end].to_owned());
                let (name, canonical) = parsed.unwrap_or_else(|| {
                    (
                        open.scan.name.clone().unwrap_or_default(),
                        streamed.clone().unwrap_or_else(|| "{}".into()),
                    )
                });
                let id = match started {
                    Some(id) => id,
                    None => {
                        let id = new_call_id();
                        out.push(Event::CallStart {
                            index,
                            id: id.clone(),
                            name: name.clone(),
                        });
                        id
                    }
                };
                // Arguments already streamed are the call's; otherwise
                // (encoded as a string, or before the name) they go now.
                let arguments = match streamed {
                    Some(streamed) if open.shown_args > 0 => streamed,
                    _ => {
                        out.push(Event::CallArguments {
                            index,
                            fragment: canonical.clone(),
                        });
                        canonical
                    }
                };
                out.push(Event::CallEnd(
                    index,
                    ToolCall {
                        id,
                        name,
                        arguments,
                    },
                ));
                self.calls += 1;
            }
        }
    }

    /// At the end: the text still held, and a call the reply did not
    /// close (taken if its JSON is whole, else shown as text).
    pub fn finish(&mut self, out: &mut Vec<Event>) {
        if self.full() {
            self.held.clear();
            return;
        }
        if let Some(open) = self.open.as_mut() {
            let rest = std::mem::take(&mut open.pending);
            open.scan.push(&rest);
            self.show_progress(out);
            self.close(out, false);
        }
        let held = std::mem::take(&mut self.held);
        push_text(out, &held, false);
    }

    /// Calls completed so far.
    pub fn calls(&self) -> usize {
        self.calls
    }
}

/// The name and the arguments' JSON text of a call's body, if it is one.
fn parse_call(body: &str) -> Option<(String, String)> {
    let value: Value = serde_json::from_str(body.trim()).ok()?;
    let name = value.get("name")?.as_str()?.to_owned();
    let arguments = match value.get("arguments") {
        Some(Value::String(s)) => serde_json::from_str::<Value>(s)
            .ok()
            .filter(Value::is_object)
            .map_or_else(|| "{}".to_owned(), |v| v.to_string()),
        Some(v @ Value::Object(_)) => v.to_string(),
        _ => "{}".to_owned(),
    };
    Some((name, arguments))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text shown and the calls made, with each call's streamed
    /// argument fragments joined, from pieces fed in order.
    fn run(pieces: &[&str]) -> (String, Vec<(String, String, String)>) {
        let mut parser = ToolCallParser::default();
        let mut out = Vec::new();
        for piece in pieces {
            parser.push(piece, &mut out);
        }
        parser.finish(&mut out);
        let mut text = String::new();
        let mut calls: Vec<(String, String, String)> = Vec::new();
        for piece in out {
            match piece {
                Event::Text(t) => text.push_str(&t),
                Event::CallStart { index, name, .. } => {
                    assert_eq!(index, calls.len(), "starts in order");
                    calls.push((name, String::new(), String::new()));
                }
                Event::CallArguments { index, fragment } => calls[index].1.push_str(&fragment),
                Event::CallEnd(index, call) => {
                    assert_eq!(call.name, calls[index].0);
                    calls[index].2 = call.arguments;
                }
                Event::Thinking(_) => panic!("the parser makes no thinking"),
            }
        }
        (text, calls)
    }

    fn at_every_byte(text: &str) -> (String, Vec<(String, String, String)>) {
        let whole = run(&[text]);
        for cut in 1..text.len() {
            if text.is_char_boundary(cut) {
                assert_eq!(run(&[&text[..cut], &text[cut..]]), whole, "cut at {cut}");
            }
        }
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(run(&pieces), whole, "one character at a time");
        whole
    }

    #[test]
    fn a_limit_of_one_call_keeps_the_first_and_drops_what_follows_it() {
        let reply = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n\
                     <tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call> after";
        for cut in 0..=reply.len() {
            let mut parser = ToolCallParser::default();
            parser.limit(Some(1));
            let mut out = Vec::new();
            parser.push(&reply[..cut], &mut out);
            parser.push(&reply[cut..], &mut out);
            parser.finish(&mut out);
            let ends: Vec<&str> = out
                .iter()
                .filter_map(|e| match e {
                    Event::CallEnd(_, call) => Some(call.name.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(ends, ["a"], "cut at {cut}");
            assert_eq!(parser.calls(), 1);
            assert!(
                !out.iter()
                    .any(|e| matches!(e, Event::Text(t) if t.contains("after") || t.contains('b'))),
                "cut at {cut}: {out:?}"
            );
        }
        // Without a limit both calls are read.
        assert_eq!(run(&[reply]).1.len(), 2);
    }

    #[test]
    fn a_call_streams_its_name_then_its_arguments_at_every_split() {
        let (text, calls) = at_every_byte(
            "Let me check. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par\\\"is\", \"days\": [1, 2]}}\n</tool_call>",
        );
        assert_eq!(text, "Let me check. ");
        let args = "{\"city\": \"Par\\\"is\", \"days\": [1, 2]}";
        assert_eq!(
            calls,
            vec![("get_weather".into(), args.into(), args.into())]
        );
    }

    #[test]
    fn arguments_stream_as_they_come() {
        let mut parser = ToolCallParser::default();
        let mut out = Vec::new();
        parser.push(
            "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": ",
            &mut out,
        );
        assert!(
            matches!(&out[..], [Event::CallStart { name, .. }, Event::CallArguments { fragment, .. }]
                if name == "f" && fragment == "{\"a\": "),
            "{out:?}"
        );
        out.clear();
        parser.push("1}}</tool_call>", &mut out);
        assert!(
            matches!(&out[..], [Event::CallArguments { fragment, .. }, Event::CallEnd(0, call)]
                if fragment == "1}" && call.arguments == "{\"a\": 1}"),
            "{out:?}"
        );
    }

    #[test]
    fn several_calls_and_string_arguments_are_read() {
        let (_, calls) = at_every_byte(
            "<tool_call>{\"name\":\"a\",\"arguments\":\"{\\\"x\\\":1}\"}</tool_call>\n<tool_call>{\"arguments\":{\"y\":2},\"name\":\"b\"}</tool_call>",
        );
        assert_eq!(
            calls,
            vec![
                ("a".into(), "{\"x\":1}".into(), "{\"x\":1}".into()),
                ("b".into(), "{\"y\":2}".into(), "{\"y\":2}".into())
            ]
        );
    }

    #[test]
    fn plain_text_and_lookalikes_pass_through() {
        assert_eq!(
            run(&["a < b and <tool", "s are fine"]),
            ("a < b and <tools are fine".into(), vec![])
        );
        assert_eq!(
            at_every_byte("<tool_call>not json</tool_call> after"),
            ("<tool_call>not json</tool_call> after".into(), vec![])
        );
        // Unterminated, but whole: a call; not whole: text.
        let (_, calls) = run(&["<tool_call>{\"name\":\"f\",\"arguments\":{}}"]);
        assert_eq!(calls.len(), 1);
        assert_eq!(
            run(&["<tool_call>{\"na"]),
            ("<tool_call>{\"na".into(), vec![])
        );
    }
}
