//! The line codec of PROTOCOL §5: one message per `\n`-terminated line.
//!
//! Input arrives in arbitrary pieces; [`LineDecoder`] accumulates them,
//! splits on `\n`, drops a trailing `\r` and a leading BOM, skips blank
//! lines, and turns a line longer than the limit into one
//! [`LineEvent::TooLong`], discarding the rest of it up to its newline.
//! Memory stays bounded by the limit whatever the input. Also the line
//! transports' settings ([`LineOptions`], [`Framing`]).

use std::time::Duration;

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

pub use crate::rpc::{PREVIEW_BYTES, preview};

/// One decoded line, or the report of one that was too long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineEvent {
    /// A non-blank line, without its line ending (and without a BOM).
    Line(Vec<u8>),
    /// A line over the limit; its bytes were discarded.
    TooLong {
        /// The first bytes of the line, lossily decoded.
        preview: String,
    },
}

/// Splits a byte stream into lines.
#[derive(Debug)]
pub struct LineDecoder {
    max_line: usize,
    buf: Vec<u8>,
    /// Discarding an over-long line until its newline.
    discarding: bool,
}

impl LineDecoder {
    /// A decoder for lines of at most `max_line` bytes.
    pub fn new(max_line: usize) -> Self {
        Self {
            max_line,
            buf: Vec::new(),
            discarding: false,
        }
    }

    /// Feeds a piece of input; complete lines are appended to `out`.
    pub fn push(&mut self, mut data: &[u8], out: &mut Vec<LineEvent>) {
        while !data.is_empty() {
            let newline = data.iter().position(|&b| b == b'\n');
            let (part, rest, complete) = match newline {
                Some(i) => (&data[..i], &data[i + 1..], true),
                None => (data, &[][..], false),
            };
            data = rest;
            if self.discarding {
                if complete {
                    self.discarding = false;
                }
                continue;
            }
            if self.buf.len() + part.len() > self.max_line + 1 {
                // Over the limit (one byte of slack for a `\r`): report it
                // once, keep only the preview, drop the rest of the line.
                let mut head = std::mem::take(&mut self.buf);
                head.extend_from_slice(&part[..part.len().min(PREVIEW_BYTES)]);
                out.push(LineEvent::TooLong {
                    preview: preview(&head),
                });
                self.discarding = !complete;
                continue;
            }
            self.buf.extend_from_slice(part);
            if complete {
                self.emit(out);
            }
        }
    }

    /// End of input: a last line without a newline is still a line.
    pub fn finish(&mut self, out: &mut Vec<LineEvent>) {
        if !self.discarding && !self.buf.is_empty() {
            self.emit(out);
        }
        self.buf.clear();
        self.discarding = false;
    }

    /// Bytes held for an incomplete line.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    fn emit(&mut self, out: &mut Vec<LineEvent>) {
        let mut line = std::mem::take(&mut self.buf);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.starts_with("\u{feff}".as_bytes()) {
            line.drain(..3);
        }
        if line.len() > self.max_line {
            out.push(LineEvent::TooLong {
                preview: preview(&line),
            });
        } else if !line.iter().all(u8::is_ascii_whitespace) {
            out.push(LineEvent::Line(line));
        }
    }
}

/// How the stdio and TCP line transports frame messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Framing {
    /// One message per line.
    #[default]
    Lines,
    /// Lines, plus `{id}:{index}:{total}:{data}` frames for large messages.
    Chunked,
}

/// Settings of a line session.
#[derive(Debug, Clone, Copy)]
pub struct LineOptions {
    /// `"stdio"` or `"tcp"`, for metrics and logs.
    pub transport: &'static str,
    /// Plain lines, or chunked frames too.
    pub framing: Framing,
    /// Longest line (and framed message) accepted.
    pub max_line: usize,
    /// After end of input, how long accepted requests may still run.
    pub eof_grace: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(pieces: &[&[u8]], max: usize) -> Vec<LineEvent> {
        let mut decoder = LineDecoder::new(max);
        let mut out = Vec::new();
        for piece in pieces {
            decoder.push(piece, &mut out);
        }
        decoder.finish(&mut out);
        out
    }

    fn line(s: &str) -> LineEvent {
        LineEvent::Line(s.as_bytes().to_vec())
    }

    #[test]
    fn a_split_read_at_every_byte_offset_gives_the_same_lines() {
        let input = "{\"a\":1}\r\n\n\u{feff}{\"b\":\"東京 🦀\"}\n   \n{\"c\":3}".as_bytes();
        let expected = vec![
            line("{\"a\":1}"),
            line("{\"b\":\"東京 🦀\"}"),
            line("{\"c\":3}"),
        ];
        for cut in 0..=input.len() {
            assert_eq!(
                decode(&[&input[..cut], &input[cut..]], 1024),
                expected,
                "cut at {cut}"
            );
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(decode(&bytes, 1024), expected);
    }

    #[test]
    fn an_oversize_line_is_reported_once_and_the_next_line_survives() {
        let long = "x".repeat(5000);
        let input = format!("{long}\n{{\"ok\":1}}\n");
        for cut in [1, 10, 100, 999, 1000, 1001, 4999, 5000, 5001] {
            let out = decode(&[&input.as_bytes()[..cut], &input.as_bytes()[cut..]], 1000);
            assert_eq!(out.len(), 2, "cut {cut}: {out:?}");
            assert!(
                matches!(&out[0], LineEvent::TooLong { preview } if preview.starts_with("xxxx"))
            );
            assert_eq!(out[1], line("{\"ok\":1}"));
        }
    }

    #[test]
    fn memory_stays_bounded_while_an_endless_line_is_discarded() {
        let mut decoder = LineDecoder::new(100);
        let mut out = Vec::new();
        for _ in 0..10_000 {
            decoder.push(&[b'y'; 1000], &mut out);
            assert!(decoder.buffered() <= 101);
        }
        assert_eq!(out.len(), 1);
        decoder.push(b"\n{}\n", &mut out);
        assert_eq!(out.last(), Some(&line("{}")));
    }

    #[test]
    fn a_line_exactly_at_the_limit_passes_and_one_more_byte_does_not() {
        let at = "z".repeat(100);
        assert_eq!(
            decode(&[format!("{at}\n").as_bytes()], 100),
            vec![line(&at)]
        );
        assert_eq!(
            decode(&[format!("{at}\r\n").as_bytes()], 100),
            vec![line(&at)]
        );
        let over = decode(&[format!("{at}z\n").as_bytes()], 100);
        assert!(matches!(over[..], [LineEvent::TooLong { .. }]), "{over:?}");
    }

    #[test]
    fn floods_of_blank_lines_and_lone_carriage_returns_produce_nothing() {
        let flood = "\n\r\n \t\n".repeat(100_000);
        assert!(decode(&[flood.as_bytes()], 64).is_empty());
    }

    #[test]
    fn invalid_utf8_is_passed_on_for_the_dispatcher_to_refuse() {
        assert_eq!(
            decode(&[b"\xff\xfe{}\n"], 64),
            vec![LineEvent::Line(b"\xff\xfe{}".to_vec())]
        );
    }

    #[test]
    fn a_last_line_without_newline_is_kept_at_eof() {
        assert_eq!(decode(&[b"{\"x\":1}"], 64), vec![line("{\"x\":1}")]);
    }

    #[test]
    fn previews_are_short_and_printable() {
        let p = preview(&[b'\x1b'; 500]);
        assert!(p.chars().count() <= PREVIEW_BYTES + 1);
        assert!(!p.contains('\x1b'));
    }
}
