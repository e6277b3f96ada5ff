//! A model's own chat template (Hugging Face `chat_template`, Jinja),
//! rendered with minijinja the way `transformers`' `apply_chat_template`
//! renders it: blocks trimmed, Python's string methods, its `tojson`
//! (Python's `json.dumps` spacing, keys in their order), `raise_exception`
//! and `strftime_now`, the conversation as `messages` (tool calls with
//! their arguments as an object), `tools` in OpenAI's shape,
//! `add_generation_prompt`, `enable_thinking` when the request sets it,
//! and the model's `bos_token`/`eos_token`. A template is untrusted text
//! (a model's repository ships it): it runs sandboxed with bounded fuel
//! and a bounded output ([`MAX_RENDERED_BYTES`]); the server renders it in
//! a helper process that also bounds its memory and time (`sandbox`).

use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind};
use serde::{Deserialize, Serialize};

/// Work a render may do (minijinja's fuel: about one unit per
/// instruction), far above what any real template needs for a long chat:
/// Qwen3's, the most demanding of the published ones here, spends about
/// 12,000 on 200 messages with tools (60 a message).
pub const FUEL: u64 = 2_000_000;

/// Longest prompt a render may write; a template that writes more fails.
pub const MAX_RENDERED_BYTES: usize = 4 << 20;

/// A model's Jinja chat template and the special tokens it writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JinjaTemplate {
    /// The template's text.
    pub source: String,
    /// `bos_token` (empty when the model has none).
    #[serde(default)]
    pub bos_token: String,
    /// `eos_token`: the reply ends there.
    #[serde(default)]
    pub eos_token: String,
}

/// One call an assistant message made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateCall {
    /// Its id.
    pub id: String,
    /// The function's name.
    pub name: String,
    /// Its arguments, JSON text of an object.
    pub arguments: String,
}

/// One message as the template reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Its text.
    pub content: String,
    /// The calls an assistant message made.
    pub tool_calls: Vec<TemplateCall>,
}

/// What a conversation is rendered with besides its messages.
#[derive(Debug, Clone, Copy)]
pub struct RenderOptions<'a> {
    /// The function tools offered: a JSON array in OpenAI's shape.
    pub tools: Option<&'a str>,
    /// The thinking switch (Qwen3's `enable_thinking`), when set.
    pub enable_thinking: Option<bool>,
    /// The time `strftime_now` tells (UTC).
    pub now: SystemTime,
}

impl JinjaTemplate {
    /// Compiles the template, to refuse a broken one before any request.
    ///
    /// # Errors
    /// Its syntax error, with the line.
    pub fn check(&self) -> Result<(), String> {
        let env = environment(UNIX_EPOCH);
        env.template_from_str(&self.source)
            .map(|_| ())
            .map_err(|e| describe(&e))
    }

    /// Renders `messages`, ending with the assistant's header.
    ///
    /// # Errors
    /// What the template raised or failed on.
    pub fn render(
        &self,
        messages: &[TemplateMessage],
        options: RenderOptions<'_>,
    ) -> Result<String, String> {
        self.render_with(messages, options, true)
    }

    /// Renders `messages` whose last is an assistant message to continue,
    /// as `transformers`' `continue_final_message` does: without the
    /// generation prompt, cut right after that message's text, so that
    /// the input ends inside it (no end of turn after it).
    ///
    /// # Errors
    /// What the template raised or failed on, or a template that does not
    /// write the message's text as it is.
    pub fn render_continuing(
        &self,
        messages: &[TemplateMessage],
        options: RenderOptions<'_>,
    ) -> Result<String, String> {
        let last = messages
            .last()
            .filter(|m| m.role == "assistant")
            .ok_or("the last message is not the assistant's")?;
        let mut rendered = self.render_with(messages, options, false)?;
        let text = last.content.trim_end();
        let at = rendered
            .rfind(last.content.as_str())
            .map(|at| at + last.content.len())
            .or_else(|| rendered.rfind(text).map(|at| at + text.len()))
            .ok_or(
                "the model's chat template does not write the last assistant message as it is, \
                 so it cannot be continued",
            )?;
        rendered.truncate(at);
        Ok(rendered)
    }

    fn render_with(
        &self,
        messages: &[TemplateMessage],
        options: RenderOptions<'_>,
        generation_prompt: bool,
    ) -> Result<String, String> {
        let env = environment(options.now);
        let template = env
            .template_from_str(&self.source)
            .map_err(|e| describe(&e))?;
        let tools = match options.tools {
            Some(text) => serde_json::from_str::<Value>(text)
                .map_err(|e| format!("`tools` is not a JSON array: {e}"))?,
            None => Value::from(()),
        };
        let mut context: Vec<(&str, Value)> = vec![
            (
                "messages",
                Value::from(messages.iter().map(message_value).collect::<Vec<_>>()),
            ),
            ("tools", tools),
            ("add_generation_prompt", Value::from(generation_prompt)),
            ("bos_token", Value::from(self.bos_token.as_str())),
            ("eos_token", Value::from(self.eos_token.as_str())),
        ];
        if let Some(on) = options.enable_thinking {
            context.push(("enable_thinking", Value::from(on)));
        }
        let mut out = Bounded(Vec::new());
        match template.render_captured_to(Value::from_iter(context), &mut out) {
            Ok(_) => String::from_utf8(out.0)
                .map_err(|_| "the model's chat template wrote text that is not UTF-8".to_owned()),
            Err(e) if e.kind() == ErrorKind::WriteFailure => Err(format!(
                "the model's chat template wrote more than {MAX_RENDERED_BYTES} bytes"
            )),
            Err(e) => Err(describe(&e)),
        }
    }
}

/// A render's output, refused past [`MAX_RENDERED_BYTES`].
struct Bounded(Vec<u8>);

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_RENDERED_BYTES {
            return Err(std::io::Error::other("the rendered prompt is too long"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One render, whole, as it is handed to the process that runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderJob {
    /// The template.
    pub template: JinjaTemplate,
    /// The conversation.
    pub messages: Vec<TemplateMessage>,
    /// The function tools offered: a JSON array in OpenAI's shape.
    pub tools: Option<String>,
    /// The thinking switch, when set.
    pub enable_thinking: Option<bool>,
    /// The time `strftime_now` tells, in Unix seconds.
    pub now_unix: u64,
    /// Continue the last message (an assistant's) instead of opening a
    /// reply after it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continue_final: bool,
}

impl RenderJob {
    /// Renders it.
    ///
    /// # Errors
    /// What the template raised or failed on.
    pub fn run(&self) -> Result<String, String> {
        let options = RenderOptions {
            tools: self.tools.as_deref(),
            enable_thinking: self.enable_thinking,
            now: UNIX_EPOCH + std::time::Duration::from_secs(self.now_unix),
        };
        if self.continue_final {
            self.template.render_continuing(&self.messages, options)
        } else {
            self.template.render(&self.messages, options)
        }
    }
}

fn describe(e: &Error) -> String {
    let mut text = match e.kind() {
        ErrorKind::InvalidOperation if e.detail().is_some() => {
            e.detail().unwrap_or_default().to_owned()
        }
        _ => e.to_string(),
    };
    if let Some(line) = e.line() {
        text.push_str(&format!(" (template line {line})"));
    }
    format!("the model's chat template: {text}")
}

fn message_value(m: &TemplateMessage) -> Value {
    let mut fields = vec![
        ("role", Value::from(m.role.as_str())),
        ("content", Value::from(m.content.as_str())),
    ];
    if !m.tool_calls.is_empty() {
        let calls: Vec<Value> = m
            .tool_calls
            .iter()
            .map(|call| {
                let arguments = serde_json::from_str::<Value>(&call.arguments)
                    .ok()
                    .filter(|v| v.as_object().is_some())
                    .unwrap_or_else(|| Value::from_iter(Vec::<(String, Value)>::new()));
                Value::from_iter([
                    ("id", Value::from(call.id.as_str())),
                    ("type", Value::from("function")),
                    (
                        "function",
                        Value::from_iter([
                            ("name", Value::from(call.name.as_str())),
                            ("arguments", arguments),
                        ]),
                    ),
                ])
            })
            .collect();
        fields.push(("tool_calls", Value::from(calls)));
    }
    Value::from_iter(fields)
}

fn environment(now: SystemTime) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_fuel(Some(FUEL));
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_filter("tojson", tojson);
    env.add_function(
        "raise_exception",
        |message: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, message))
        },
    );
    env.add_function("strftime_now", move |format: String| strftime(now, &format));
    env
}

/// `tojson` as `transformers` defines it: Python's `json.dumps` with
/// `ensure_ascii=False` (`", "` and `": "` between items, or `indent`).
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    // Accepted for templates that pass them; Python's defaults apply.
    let _: Option<Value> = kwargs.get("ensure_ascii")?;
    let _: Option<Value> = kwargs.get("separators")?;
    let _: Option<Value> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let spaces = indent.map(|n| vec![b' '; n]);
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(
        &mut out,
        PythonJson {
            indent: spaces.as_deref(),
            depth: 0,
            has_value: false,
        },
    );
    value
        .serialize(&mut ser)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    Ok(Value::from_safe_string(
        String::from_utf8(out).unwrap_or_default(),
    ))
}

/// Python's `json.dumps` layout: `, ` and `: ` between items, or with an
/// `indent` one item a line (a `,` ending it), and floats as Python's
/// `repr` writes them.
struct PythonJson<'a> {
    /// One level's indent, when the items go one a line.
    indent: Option<&'a [u8]>,
    /// How many arrays and objects are open.
    depth: usize,
    /// Whether the innermost open one has an item yet.
    has_value: bool,
}

impl PythonJson<'_> {
    fn newline<W: ?Sized + std::io::Write>(&self, writer: &mut W) -> std::io::Result<()> {
        writer.write_all(b"\n")?;
        if let Some(indent) = self.indent {
            for _ in 0..self.depth {
                writer.write_all(indent)?;
            }
        }
        Ok(())
    }

    fn open<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        writer.write_all(bracket)
    }

    fn close<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.depth -= 1;
        if self.indent.is_some() && self.has_value {
            self.newline(writer)?;
        }
        writer.write_all(bracket)
    }

    fn item<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if self.indent.is_some() {
            if !first {
                writer.write_all(b",")?;
            }
            self.newline(writer)
        } else if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }
}

impl serde_json::ser::Formatter for PythonJson<'_> {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open(writer, b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close(writer, b"]")
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(writer, first)
    }

    fn end_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        _writer: &mut W,
    ) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open(writer, b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close(writer, b"}")
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        _writer: &mut W,
    ) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn write_f64<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        value: f64,
    ) -> std::io::Result<()> {
        writer.write_all(python_float(value).as_bytes())
    }

    fn write_f32<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        value: f32,
    ) -> std::io::Result<()> {
        self.write_f64(writer, f64::from(value))
    }
}

/// A finite float as Python's `repr` writes it: the shortest digits that
/// read back to it, positionally from 1e-4 up to 1e16 (with `.0` when
/// whole), otherwise as `1.5e+16`, `1e-07` (two exponent digits at least).
fn python_float(value: f64) -> String {
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .unwrap_or((scientific.as_str(), "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..16).contains(&exponent) {
        let plain = value.to_string();
        if plain.contains('.') {
            plain
        } else {
            format!("{plain}.0")
        }
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.unsigned_abs())
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// Python's `strftime` for the directives templates use (`%d %b %Y`, ...),
/// in UTC; an unknown directive is written as it is.
fn strftime(now: SystemTime, format: &str) -> String {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let (year, month, day) = civil_from_days(days);
    let weekday = usize::try_from((days + 4).rem_euclid(7)).unwrap_or(0);
    let of_day = secs % 86_400;
    let month_name = MONTHS[usize::try_from(month - 1).unwrap_or(0)];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&format!("{:02}", year.rem_euclid(100))),
            Some('b') => out.push_str(&month_name[..3]),
            Some('B') => out.push_str(month_name),
            Some('a') => out.push_str(&DAYS[weekday][..3]),
            Some('A') => out.push_str(DAYS[weekday]),
            Some('H') => out.push_str(&format!("{:02}", of_day / 3600)),
            Some('M') => out.push_str(&format!("{:02}", of_day / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", of_day % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// The civil date (year, month, day) of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
#[path = "jinja_tests.rs"]
mod tests;
