//! Chunked prefill. The runtime does not notice `rkllm_abort` while it
//! prefills (`RKLLM_ABI.md` §3.4, rknn-llm #400), so a long prompt in one
//! run holds the NPU until its prefill ends, whoever left. A long prompt
//! the server rendered (the model's own template, so the runtime adds
//! nothing around it) is therefore prefilled a chunk a run: the first run
//! takes the prompt's beginning as text (what a prompt cache or snapshot
//! holds is matched against it), each later one the next chunk's token ids
//! from the model's tokenizer (so that the edges do not change how the
//! prompt is tokenized). Every run but the last is a logits run whose first
//! callback, the prefill's rows, pauses it with the KV cache kept (§3.5c);
//! the last feeds the final chunk and generates. Between two runs the
//! request's cancellation is looked at, so a client that leaves is noticed
//! within one chunk and the runtime is never killed for it.

use std::ffi::CString;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::abi::RunSettings;
use super::snapshots::common_prefix;
use super::{RkllmRunner, runtime_error};
use crate::backend::{BackendError, Generation, TokenSink, ValidRunRequest};
use crate::vocab::{FinishReason, Usage};

/// A prompt cut into chunks: the text of the first, and the token ids of
/// each later one.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Chunks {
    /// Bytes of the prompt the first run takes as text, and its tokens.
    pub first: usize,
    pub first_tokens: u32,
    /// The ids of the later chunks, in order.
    pub rest: Vec<Vec<i32>>,
    /// The prompt's tokens in all.
    pub total: u32,
}

impl Chunks {
    /// Cuts a prompt whose tokens have the byte `pieces` into chunks of
    /// `size` tokens, the first taking at least the `reused` bytes a loaded
    /// prompt cache covers too. Each edge but the first is moved back to
    /// the start of a word where one is near (a space, a line or a special
    /// token begins the next piece), since the runtime tokenizes the first
    /// chunk's text itself. `None`: one run takes it (it is short, or its
    /// pieces are not its text).
    pub fn cut(
        prompt: &str,
        ids: &[u32],
        pieces: &[Vec<u8>],
        size: usize,
        reused: usize,
    ) -> Option<Self> {
        let size = size.max(1);
        if ids.len() <= size || ids.len() != pieces.len() {
            return None;
        }
        // Byte offset where each token starts; the pieces must be the text.
        let mut starts = Vec::with_capacity(pieces.len() + 1);
        let mut at = 0usize;
        for piece in pieces {
            starts.push(at);
            at += piece.len();
        }
        if at != prompt.len() || pieces.concat() != prompt.as_bytes() {
            return None;
        }
        starts.push(at);
        // The first edge: past what a cache covers, then one chunk more.
        let covered = starts
            .iter()
            .take_while(|&&s| s <= reused)
            .count()
            .saturating_sub(1);
        let mut edge = (covered + size).min(ids.len());
        // A word start within a quarter chunk back, at a character edge.
        let word_start = |i: usize| {
            pieces[i]
                .first()
                .is_some_and(|b| matches!(b, b' ' | b'\n' | b'\t' | b'<'))
                && prompt.is_char_boundary(starts[i])
        };
        if edge < ids.len() {
            let floor = edge.saturating_sub(size / 4).max(covered + 1);
            if let Some(i) = (floor..=edge).rev().find(|&i| word_start(i)) {
                edge = i;
            } else if !prompt.is_char_boundary(starts[edge]) {
                // No word start near, and not a character edge either: one run.
                return None;
            }
        }
        if edge >= ids.len() {
            return None;
        }
        let ids: Vec<i32> = ids
            .iter()
            .map(|&id| i32::try_from(id).ok())
            .collect::<Option<_>>()?;
        let rest = ids[edge..].chunks(size).map(<[i32]>::to_vec).collect();
        Some(Self {
            first: starts[edge],
            first_tokens: u32::try_from(edge).unwrap_or(u32::MAX),
            rest,
            total: u32::try_from(ids.len()).unwrap_or(u32::MAX),
        })
    }
}

impl RkllmRunner {
    /// How `prompt`, sent whole without the runtime's history, is cut into
    /// chunks; `None`: one run takes it.
    pub(super) fn chunks_for(&self, request: &ValidRunRequest, prompt: &str) -> Option<Chunks> {
        let size = usize::try_from(self.chunk_tokens).unwrap_or(usize::MAX);
        // Requests that read the runtime's rows after the prompt (a format,
        // log probabilities, a reranker's judgement) or pause for a
        // thinking budget run as they do without chunks.
        let simple = request.images.is_empty()
            && request.embed.is_none()
            && request.constraint.is_none()
            && request.sampling.logprobs.is_none()
            && request.sampling.thinking_budget.is_none();
        // A short prompt never needs the tokenizer: bytes bound tokens.
        if size == 0 || !self.raw_prompt || !simple || prompt.len() <= size {
            return None;
        }
        let source = self.tokenizer.as_ref()?;
        let encoder = match crate::backend::vocabularies::load_encoder(source) {
            Ok(encoder) => encoder,
            Err(e) => {
                tracing::debug!(model = %request.model, "prefill in one run: the tokenizer: {e}");
                return None;
            }
        };
        let ids = encoder.encode(prompt).ok()?;
        if ids.len() <= size {
            return None;
        }
        let pieces = encoder.pieces(&ids).ok()?;
        let chunks = Chunks::cut(prompt, &ids, &pieces, size, self.reused_bytes(prompt));
        if chunks.is_none() {
            tracing::debug!(
                model = %request.model,
                "prefill in one run: the tokenizer's pieces are not the prompt's text"
            );
        }
        chunks
    }

    /// Bytes at the start of `prompt` a loaded prompt cache (the system
    /// prompt's, or a snapshot) covers.
    fn reused_bytes(&self, prompt: &str) -> usize {
        let system = self
            .prompt_cache
            .as_ref()
            .and_then(super::prompt_cache::PromptCache::loaded_prompt)
            .map_or(0, |cached| common_prefix(cached, prompt));
        let snapshot = self
            .snapshots
            .as_ref()
            .map_or(0, |s| s.loaded_shared(prompt));
        system.max(snapshot)
    }

    /// Prefills all chunks but the last, one run each, then runs the last
    /// and generates; that run saves the whole prefill where
    /// `save_cache_to` says (a snapshot).
    pub(super) fn run_chunked(
        &mut self,
        request: &ValidRunRequest,
        sink: &mut TokenSink<'_>,
        prompt: &str,
        role: &str,
        chunks: &Chunks,
    ) -> Result<Generation, BackendError> {
        let text = CString::new(&prompt[..chunks.first]).map_err(|_| {
            runtime_error(
                None,
                "the prompt contains a NUL character, which the runtime cannot take",
            )
        })?;
        let role = CString::new(role).map_err(|_| runtime_error(None, "bad role"))?;
        let Some((last, middle)) = chunks.rest.split_last() else {
            return Err(runtime_error(None, "a chunked prompt without chunks"));
        };
        // What a pause leaves in the runtime is cleared before the next
        // request whatever happens here.
        self.history_dirty = true;
        let sampling = self.sampling(request);
        let lora = self.lora_name(request).map(ToOwned::to_owned);
        let run_id = self.next_run.fetch_add(1, Ordering::Relaxed);
        let abort = Arc::clone(&self.handle.abort);
        let hook_abort = Arc::clone(&abort);
        sink.cancel_token()
            .on_cancel(move || hook_abort.abort(run_id));
        let started = std::time::Instant::now();
        let mut fed: Option<&[i32]> = None;
        let mut runs = 0u32;
        let mut done = 0u32;
        sink.prefill_progress(done, chunks.total);
        for next in std::iter::once(None).chain(middle.iter().map(|c| Some(c.as_slice()))) {
            if let Some(ids) = next {
                fed = Some(ids);
            }
            abort.set_running(run_id);
            if !sink.is_open() {
                abort.set_running(0);
                self.clear_history();
                return Ok(Generation::ended(FinishReason::Abort));
            }
            let settings = RunSettings {
                prompt: &text,
                role: &role,
                enable_thinking: request.prompt.thinking,
                sampling,
                max_new_tokens: i32::try_from(request.max_tokens.saturating_add(1))
                    .unwrap_or(i32::MAX),
                keep_history: false,
                images: None,
                hidden_layer: false,
                logits: true,
                tokens: fed,
                lora: lora.as_deref(),
                save_cache: None,
            };
            let (rc, run) = self.logits_run(sink, run_id, &abort, None, &settings);
            runs += 1;
            let Some(run) = run else {
                return Err(runtime_error(Some(rc), "the run's state was lost"));
            };
            if run.panicked {
                return Err(runtime_error(
                    None,
                    "internal error while reading the runtime's output",
                ));
            }
            if !run.prefill_paused {
                if !sink.is_open() {
                    self.clear_history();
                    return Ok(Generation::ended(FinishReason::Abort));
                }
                if runs == 1 {
                    // Refused before it prefilled anything (a runtime
                    // without logits for this model): one run from now on.
                    tracing::warn!(
                        model = %request.model,
                        code = rc,
                        "the runtime refused a prefill-only run (logits mode); this model's long                          prompts are prefilled in one run until it loads again"
                    );
                    self.chunk_tokens = 0;
                    self.clear_history();
                    return self.run_once(
                        request,
                        sink,
                        prompt,
                        role.to_str().unwrap_or("user"),
                        false,
                        None,
                    );
                }
                return Err(runtime_error(
                    Some(rc),
                    format!(
                        "the runtime did not pause after prefilling part {runs} of the prompt \
                         (rkllm_run returned {rc}); set prefill_chunk_tokens = 0 for this model to \
                         prefill in one run"
                    ),
                ));
            }
            let took = fed.map_or(chunks.first_tokens, |ids| {
                u32::try_from(ids.len()).unwrap_or(u32::MAX)
            });
            done = done.saturating_add(took);
            sink.prefill_progress(done, chunks.total);
        }
        tracing::debug!(
            model = %request.model,
            runs,
            tokens = chunks.total,
            ms = started.elapsed().as_millis() as u64,
            "prompt prefilled in chunks; the last one generates"
        );
        let save_cache = self.save_cache_to.clone();
        let settings = RunSettings {
            prompt: &text,
            role: &role,
            enable_thinking: request.prompt.thinking,
            sampling,
            max_new_tokens: i32::try_from(request.max_tokens).unwrap_or(i32::MAX),
            keep_history: false,
            images: None,
            hidden_layer: false,
            logits: false,
            tokens: Some(last),
            lora: lora.as_deref(),
            save_cache: save_cache.as_deref(),
        };
        let mut generation = self.execute(request, sink, &settings)?;
        // The runtime counted the last chunk only: the prompt's tokens are
        // the tokenizer's, and the times the engine's own.
        generation.usage = generation.usage.map(|u| Usage {
            prompt_tokens: chunks.total,
            ..u
        });
        generation.runtime_timings = None;
        Ok(generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prompt, its "tokens" (each word with its leading space, and the
    /// pieces of `<x>` markers), ids counting up.
    fn tokens(prompt: &str) -> (Vec<u32>, Vec<Vec<u8>>) {
        let mut pieces: Vec<Vec<u8>> = Vec::new();
        for (i, c) in prompt.char_indices() {
            let starts = i == 0 || c == ' ' || c == '<' || c == '\n';
            let mut buf = [0u8; 4];
            let bytes = c.encode_utf8(&mut buf).as_bytes();
            match pieces.last_mut() {
                Some(last) if !starts => last.extend_from_slice(bytes),
                _ => pieces.push(bytes.to_vec()),
            }
        }
        ((0..pieces.len() as u32).collect(), pieces)
    }

    #[test]
    fn a_short_prompt_goes_in_one_run() {
        let (ids, pieces) = tokens("a b c");
        assert_eq!(Chunks::cut("a b c", &ids, &pieces, 3, 0), None);
        assert_eq!(Chunks::cut("a b c", &ids, &pieces, 8, 0), None);
    }

    #[test]
    fn chunks_cover_the_prompt_once_and_the_first_is_its_text() {
        let prompt = "one two three four five six seven eight nine ten";
        let (ids, pieces) = tokens(prompt);
        let chunks = Chunks::cut(prompt, &ids, &pieces, 3, 0).unwrap();
        assert_eq!(&prompt[..chunks.first], "one two three");
        assert_eq!(chunks.first_tokens, 3);
        assert_eq!(chunks.rest, vec![vec![3, 4, 5], vec![6, 7, 8], vec![9]]);
        assert_eq!(chunks.total, 10);
    }

    #[test]
    fn the_first_chunk_takes_what_a_cache_covers_and_one_chunk_more() {
        let prompt = "one two three four five six seven eight nine ten";
        let (ids, pieces) = tokens(prompt);
        // The cache covers "one two three four" (18 bytes).
        let chunks = Chunks::cut(prompt, &ids, &pieces, 3, 18).unwrap();
        assert_eq!(&prompt[..chunks.first], "one two three four five six seven");
        assert_eq!(chunks.rest, vec![vec![7, 8, 9]]);
        // A cache covering all but the last token: one run.
        assert_eq!(
            Chunks::cut(prompt, &ids, &pieces, 3, prompt.len() - 3),
            None
        );
    }

    #[test]
    fn an_edge_moves_back_to_a_word_start() {
        // Pieces that split words: "hel", "lo", " wor", "ld", ...
        let pieces: Vec<Vec<u8>> = ["hel", "lo", " wor", "ld", " and", " mo", "re", " te", "xt"]
            .iter()
            .map(|p| p.as_bytes().to_vec())
            .collect();
        let prompt: String = pieces.iter().map(|p| String::from_utf8_lossy(p)).collect();
        let ids: Vec<u32> = (0..pieces.len() as u32).collect();
        // Eight tokens a chunk: the edge at 8 (" te") is a word start.
        let chunks = Chunks::cut(&prompt, &ids, &pieces, 8, 0).unwrap();
        assert_eq!(&prompt[..chunks.first], "hello world and more");
        // Four: the edge at 4 (" and") is one.
        let chunks = Chunks::cut(&prompt, &ids, &pieces, 4, 0).unwrap();
        assert_eq!(&prompt[..chunks.first], "hello world");
        // Five: " mo" starts a word; the edge stays there.
        let chunks = Chunks::cut(&prompt, &ids, &pieces, 5, 0).unwrap();
        assert_eq!(&prompt[..chunks.first], "hello world and");
        // Six: "re" does not, and " mo" is within a quarter chunk (1) back.
        let chunks = Chunks::cut(&prompt, &ids, &pieces, 6, 0).unwrap();
        assert_eq!(&prompt[..chunks.first], "hello world and");
    }

    #[test]
    fn pieces_that_are_not_the_text_send_it_in_one_run() {
        let prompt = "one two three four five";
        let (ids, mut pieces) = tokens(prompt);
        pieces[2] = b" THREE".to_vec();
        assert_eq!(Chunks::cut(prompt, &ids, &pieces, 2, 0), None);
        // Fewer pieces than ids.
        let (ids, pieces) = tokens(prompt);
        assert_eq!(Chunks::cut(prompt, &ids, &pieces[1..], 2, 0), None);
    }

    #[test]
    fn a_multibyte_character_split_over_tokens_is_never_an_edge() {
        // "é" as two byte tokens, no word start near.
        let prompt = "aaé";
        let pieces = vec![b"a".to_vec(), b"a".to_vec(), vec![0xC3], vec![0xA9]];
        let ids = vec![0, 1, 2, 3];
        assert_eq!(Chunks::cut(prompt, &ids, &pieces, 3, 0), None);
        let chunks = Chunks::cut(prompt, &ids, &pieces, 2, 0).unwrap();
        assert_eq!(&prompt[..chunks.first], "aa");
    }
}
