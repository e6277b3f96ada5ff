//! Chunked prefill: how a long prompt is cut into runs. The runtime does
//! not notice `rkllm_abort` while it prefills (`RKLLM_ABI.md` §3.4,
//! rknn-llm #400), so a long prompt in one run holds the NPU until its
//! prefill ends, whoever left. A long prompt the server rendered (the
//! model's own template, so the runtime adds nothing around it) is
//! therefore prefilled a chunk a run: the first run takes the prompt's
//! beginning as text (what a prompt cache or snapshot holds is matched
//! against it), each later one the next chunk's token ids from the model's
//! tokenizer (so that the edges do not change how the prompt is
//! tokenized). Every run but the last only prefills (its first callback
//! pauses it with the KV cache kept, §3.5c); the last feeds the final chunk
//! and generates. Between two runs the request's cancellation is looked
//! at, so a client that leaves is noticed within one chunk.
//!
//! That rests on three things the runtime does that Rockchip does not
//! document, each probed on the board before it is relied on
//! ([`super::probe`]): a paused run keeps its KV cache, token input
//! appends to it, and the paused token is not in it.

/// A prompt cut into chunks: the text of the first, and the token ids of
/// each later one.
#[derive(Debug, PartialEq, Eq)]
pub struct Chunks {
    /// Bytes of the prompt the first run takes as text, and its tokens.
    pub first: usize,
    pub first_tokens: u32,
    /// The ids of the later chunks, in order.
    pub rest: Vec<Vec<i32>>,
    /// The prompt's tokens in all.
    pub total: u32,
    /// Of those, the tokens at its start a loaded prompt cache (a
    /// snapshot) covers: not prefilled again.
    pub covered: u32,
}

impl Chunks {
    /// A prompt taken whole by its first run (no chunks after it).
    pub fn whole(prompt: &str) -> Self {
        Self {
            first: prompt.len(),
            first_tokens: 0,
            rest: Vec::new(),
            total: 0,
            covered: 0,
        }
    }

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
            covered: u32::try_from(covered).unwrap_or(u32::MAX),
        })
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
