//! The mock's prefill, carried out as the plan (`crate::plan`) decides for
//! the NPU: a chat sent whole starts from the snapshot sharing the longest
//! prefix with it (the mock keeps its snapshots in memory: the prompts
//! whose prefill they stand for), a long prompt the server rendered is
//! prefilled in chunks, each reported as the NPU runner reports it, and a
//! client that leaves is noticed at the next chunk's end. The prefill's
//! time (`prefill_ms`) is spread over the chunks; its counts are the NPU
//! path's: the prompt's tokens in all in the usage, and apart from them
//! the tokens prefilled past what a snapshot covers.

use std::time::Duration;

use super::MockRunner;
use crate::backend::{PromptReuse, SnapshotReport, TokenSink, ValidRunRequest};
use crate::plan::chunks::Chunks;
use crate::plan::snapshots::{self as plan, Kept, Load, Store, common_prefix};
use crate::plan::start::{self, Send};

/// Snapshots the mock keeps per model, at most (least recently used go).
const MAX_SNAPSHOTS: usize = 64;

/// One prompt whose prefill the mock keeps.
#[derive(Debug, Clone)]
struct Entry {
    prompt: String,
    used: u64,
    system_prefix: bool,
}

/// The mock's snapshots of one model: in memory, as cheap as they come.
#[derive(Debug, Default)]
pub(super) struct Snapshots {
    entries: Vec<Entry>,
    clock: u64,
    /// Counts not yet reported.
    hits: u32,
    misses: u32,
}

impl Snapshots {
    fn kept(&self) -> Vec<Kept<'_>> {
        self.entries
            .iter()
            .map(|e| Kept {
                prompt: &e.prompt,
                used: e.used,
                system_prefix: e.system_prefix,
            })
            .collect()
    }

    /// Keeps the prefill of `prompt`: what a later turn of its conversation
    /// supersedes goes, then the least recently used past the bound.
    pub(super) fn keep(&mut self, prompt: &str, system_prefix: bool, keeping: plan::Keeping) {
        self.entries.retain(|e| e.prompt != prompt);
        let gone = plan::replaced(&self.kept(), prompt, keeping);
        for index in gone.into_iter().rev() {
            self.entries.remove(index);
        }
        self.clock += 1;
        self.entries.push(Entry {
            prompt: prompt.to_owned(),
            used: self.clock,
            system_prefix,
        });
        if self.entries.len() > MAX_SNAPSHOTS
            && let Some(oldest) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].used)
        {
            self.entries.remove(oldest);
        }
    }

    /// What to report after a run: the counts since the last report, and
    /// what is kept.
    pub(super) fn report(&mut self) -> SnapshotReport {
        let report = SnapshotReport {
            hits: self.hits,
            misses: self.misses,
            files: u32::try_from(self.entries.len()).unwrap_or(u32::MAX),
            bytes: self.entries.iter().map(|e| e.prompt.len() as u64).sum(),
        };
        self.hits = 0;
        self.misses = 0;
        report
    }
}

/// What the mock's prefill of one request came to.
pub(super) struct Prefilled {
    /// The prompt tokens to report.
    pub tokens: u32,
    /// What the run started from and what it prefilled.
    pub reuse: PromptReuse,
    /// Whether the client left during it.
    pub left: bool,
    /// The snapshot to keep once the run went well (the prompt's).
    pub keep: Option<String>,
}

impl MockRunner {
    /// Prefills `request`'s prompt as the plan says, waiting `delay` in all
    /// (spread over its chunks), reporting a chunked prefill's progress.
    pub(super) fn prefill(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
        delay: Duration,
    ) -> Prefilled {
        let ask = request.ask();
        let send = start::send(&ask, &self.conversation, true);
        if let Send::Continue(turn) = send {
            let tokens = u32::try_from(self.count(&turn.text).max(1)).unwrap_or(u32::MAX);
            let left = !delay.is_zero() && sink.cancel_token().wait_timeout(delay);
            return Prefilled {
                tokens,
                reuse: PromptReuse {
                    reused: request
                        .prompt
                        .tokens
                        .map_or(0, |w| w.saturating_sub(tokens)),
                    prefilled: tokens,
                },
                left,
                keep: None,
            };
        }
        let (covered, keep, made) = self.restore(request);
        let chunks = start::chunk_size(&self.profile, &ask, send)
            .and_then(|size| self.chunks(&request.prompt.text, size, covered));
        let mut prefilled = match chunks {
            Some(chunks) => self.prefill_chunks(sink, &chunks, delay, keep),
            None => {
                // The usage counts the whole prompt, as the NPU runner's
                // does (by the tokenizer); what the run prefilled past the
                // snapshot is reported apart.
                let prompt = &request.prompt.text;
                let whole = request
                    .prompt
                    .tokens
                    .filter(|_| request.prompt.prefill.is_none())
                    .map(|t| t as usize);
                let (tokens, prefilled) = if covered > 0 {
                    let rest = self.count(&prompt[covered..]);
                    let all = whole.unwrap_or_else(|| rest + self.count(&prompt[..covered]));
                    (all.max(rest), rest)
                } else {
                    let all = whole.unwrap_or_else(|| self.count(&super::input_of(request)));
                    (all, all)
                };
                let left = !delay.is_zero() && sink.cancel_token().wait_timeout(delay);
                let tokens = u32::try_from(tokens.max(1)).unwrap_or(u32::MAX);
                let prefilled = u32::try_from(prefilled.max(1))
                    .unwrap_or(u32::MAX)
                    .min(tokens);
                Prefilled {
                    tokens,
                    reuse: PromptReuse {
                        reused: tokens - prefilled,
                        prefilled,
                    },
                    left,
                    keep,
                }
            }
        };
        if made > 0 && covered <= made {
            // It started from what it made on the way: all prefilled here.
            let reuse = prefilled.reuse;
            prefilled.reuse = PromptReuse {
                reused: 0,
                prefilled: reuse.reused.saturating_add(reuse.prefilled),
            };
        }
        prefilled
    }

    /// Before a chat is sent whole: the snapshot it starts from (the bytes
    /// of its prompt it covers), whether its own is kept after the run, and
    /// the bytes of a system prompt's snapshot made on the way (prefilled by
    /// this request, not reused). A plain prompt, or one with a LoRA
    /// adapter, uses none and makes none.
    fn restore(&mut self, request: &ValidRunRequest) -> (usize, Option<String>, usize) {
        let prompt = request.prompt.text.as_str();
        let system = match (request.prompt.whole_chat(), request.prompt.turns()) {
            (Some(system), _) => system,
            (None, Some(turns)) => turns
                .first()
                .filter(|t| t.role == "system")
                .map_or("", |t| t.text.as_str()),
            (None, None) => return (0, None, 0),
        };
        if !self.keeps_snapshots || request.lora.is_some() {
            return (0, None, 0);
        }
        let snapshots = &mut self.snapshots;
        let kept = snapshots.kept();
        let keeping = request.prompt.keeping();
        let mut restore = plan::restore_keeping(
            Store {
                kept: &kept,
                saves: true,
            },
            system,
            prompt,
            0,
            keeping,
        );
        drop(kept);
        let mut made = 0;
        if let Some(end) = restore.save_prefix {
            made = end;
            snapshots.keep(&prompt[..end], true, plan::Keeping::Whole);
            let kept = snapshots.kept();
            restore = plan::restore_keeping(
                Store {
                    kept: &kept,
                    saves: true,
                },
                system,
                prompt,
                0,
                keeping,
            );
        }
        let covered = match restore.load {
            Load::Snapshot(index) => {
                snapshots.hits += 1;
                snapshots.clock += 1;
                snapshots.entries[index].used = snapshots.clock;
                common_prefix(&snapshots.entries[index].prompt, prompt)
            }
            Load::Release | Load::AsItIs => {
                snapshots.misses += 1;
                0
            }
        };
        (covered, restore.save.then(|| prompt.to_owned()), made)
    }

    /// How `prompt` is cut into chunks of `size` tokens past the `covered`
    /// bytes a snapshot holds, by the mock's tokenizer.
    fn chunks(&mut self, prompt: &str, size: usize, covered: usize) -> Option<Chunks> {
        self.count(""); // loads the encoder
        let encoder = self.encoder.clone()?;
        let ids = encoder.encode(prompt).ok()?;
        if ids.len() <= size {
            return None;
        }
        let pieces = encoder.pieces(&ids).ok()?;
        Chunks::cut(prompt, &ids, &pieces, size, covered)
    }

    /// Prefills `chunks`, spreading `delay` over them by their tokens and
    /// reporting each chunk's end; a client gone is noticed at a chunk's end.
    fn prefill_chunks(
        &mut self,
        sink: &mut TokenSink<'_>,
        chunks: &Chunks,
        delay: Duration,
        keep: Option<String>,
    ) -> Prefilled {
        let total = chunks.total.max(1);
        let sizes = std::iter::once(chunks.first_tokens).chain(
            chunks
                .rest
                .iter()
                .map(|c| u32::try_from(c.len()).unwrap_or(u32::MAX)),
        );
        let mut done = 0u32;
        sink.prefill_progress(done, chunks.total);
        for (i, size) in sizes.enumerate() {
            let share = delay.mul_f64(f64::from(size) / f64::from(total));
            if !sink.is_open() || (!share.is_zero() && sink.cancel_token().wait_timeout(share)) {
                return Prefilled {
                    tokens: chunks.total,
                    reuse: PromptReuse {
                        reused: chunks.covered,
                        prefilled: chunks.total.saturating_sub(chunks.covered),
                    },
                    left: true,
                    keep: None,
                };
            }
            done = done.saturating_add(size);
            // The last chunk's run goes on to generate.
            if i < chunks.rest.len() {
                sink.prefill_progress(done, chunks.total);
            }
        }
        Prefilled {
            tokens: chunks.total,
            reuse: PromptReuse {
                reused: chunks.covered,
                prefilled: chunks.total.saturating_sub(chunks.covered),
            },
            left: false,
            keep,
        }
    }
}
