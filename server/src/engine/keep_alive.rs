//! How long an idle model stays loaded: the config's `keep_alive_secs`,
//! Ollama's per-request `keep_alive` and our `load` method's.

use std::time::{Duration, Instant};

/// How long an idle model stays loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepAlive {
    /// Until evicted, unloaded or the server stops.
    Forever,
    /// This long after its last use (0: unload at once).
    For(Duration),
}

impl KeepAlive {
    /// From seconds as the config and Ollama's numbers give them (negative: forever).
    pub fn from_secs(secs: i64) -> Self {
        u64::try_from(secs).map_or(Self::Forever, |s| Self::For(Duration::from_secs(s)))
    }

    /// Reads a keep-alive as Ollama's `keep_alive` and our `load` take it:
    /// a number of seconds, or a duration string such as `"5m"`, `"1h30m"`,
    /// `"90s"` or `"-1"`; negative means forever.
    ///
    /// # Errors
    /// A message naming what is wrong.
    pub fn parse(value: &serde_json::Value) -> Result<Self, String> {
        let seconds = match value {
            serde_json::Value::Number(n) => n
                .as_f64()
                .ok_or_else(|| format!("`keep_alive` {n} is not a number of seconds"))?,
            serde_json::Value::String(s) => parse_duration(s.trim()).ok_or_else(|| {
                format!(
                    "`keep_alive` {s:?} is not a duration (seconds, or like \"5m\", \"1h30m\", \"-1\")"
                )
            })?,
            other => {
                return Err(format!(
                    "`keep_alive` must be a number of seconds or a duration string, got {other}"
                ));
            }
        };
        if !seconds.is_finite() {
            return Err("`keep_alive` must be finite".into());
        }
        Ok(if seconds < 0.0 {
            Self::Forever
        } else {
            Self::For(Duration::from_secs_f64(
                seconds.min(10.0 * 365.0 * 86_400.0),
            ))
        })
    }

    /// When a model used at `from` unloads (`None`: never).
    pub fn expiry(self, from: Instant) -> Option<Instant> {
        match self {
            Self::Forever => None,
            Self::For(d) => Some(from + d),
        }
    }
}

/// Seconds in a Go-style duration (`"300"`, `"5m"`, `"1h30m"`, `"-1s"`).
fn parse_duration(text: &str) -> Option<f64> {
    if let Ok(seconds) = text.parse::<f64>() {
        return Some(seconds);
    }
    let (sign, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (-1.0, rest),
        None => (1.0, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[unit..];
    }
    Some(sign * total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keep_alive_reads_numbers_and_durations() {
        let secs = |s: u64| KeepAlive::For(Duration::from_secs(s));
        assert_eq!(KeepAlive::parse(&json!(0)), Ok(secs(0)));
        assert_eq!(KeepAlive::parse(&json!(90)), Ok(secs(90)));
        assert_eq!(KeepAlive::parse(&json!(-1)), Ok(KeepAlive::Forever));
        assert_eq!(KeepAlive::parse(&json!("-1")), Ok(KeepAlive::Forever));
        assert_eq!(KeepAlive::parse(&json!("5m")), Ok(secs(300)));
        assert_eq!(KeepAlive::parse(&json!("1h30m")), Ok(secs(5400)));
        assert_eq!(KeepAlive::parse(&json!("0s")), Ok(secs(0)));
        assert_eq!(KeepAlive::parse(&json!("-1m")), Ok(KeepAlive::Forever));
        assert!(KeepAlive::parse(&json!("soon")).is_err());
        assert!(KeepAlive::parse(&json!("5x")).is_err());
        assert!(KeepAlive::parse(&json!(true)).is_err());
        assert_eq!(KeepAlive::from_secs(-1), KeepAlive::Forever);
        assert_eq!(KeepAlive::from_secs(7), secs(7));
    }
}
