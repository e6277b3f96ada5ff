//! Fill-in-the-middle: how a code model that was trained for it is given
//! the text before and after a gap, so that its reply is what goes in the
//! gap. Each family spells its FIM tokens its own way; a model has FIM
//! when its tokenizer holds one family's three tokens.

use super::prompt::{Chat, Keeping, Prompt};

/// One family's FIM tokens and the order its prompt takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Family {
    name: &'static str,
    /// Before the prefix.
    prefix: &'static str,
    /// Before the suffix.
    suffix: &'static str,
    /// After both: the model writes the middle from here.
    middle: &'static str,
    /// Tokens that end the middle, where the tokenizer has them.
    ends: &'static [&'static str],
    /// A space after `prefix` and before `suffix`'s and `middle`'s tokens
    /// (Code Llama's spelling).
    spaced: bool,
}

/// The families, by how their tokens are spelled. Qwen2.5-Coder, StarCoder
/// and StarCoder2, DeepSeek-Coder, Code Llama.
const FAMILIES: &[Family] = &[
    Family {
        name: "qwen",
        prefix: "<|fim_prefix|>",
        suffix: "<|fim_suffix|>",
        middle: "<|fim_middle|>",
        ends: &[
            "<|fim_pad|>",
            "<|endoftext|>",
            "<|file_sep|>",
            "<|repo_name|>",
            "<|im_end|>",
        ],
        spaced: false,
    },
    Family {
        name: "starcoder",
        prefix: "<fim_prefix>",
        suffix: "<fim_suffix>",
        middle: "<fim_middle>",
        ends: &["<|endoftext|>", "<file_sep>", "<fim_pad>"],
        spaced: false,
    },
    Family {
        name: "deepseek",
        prefix: "<｜fim▁begin｜>",
        suffix: "<｜fim▁hole｜>",
        middle: "<｜fim▁end｜>",
        ends: &["<｜end▁of▁sentence｜>", "<|EOT|>"],
        spaced: false,
    },
    Family {
        name: "codellama",
        prefix: "<PRE>",
        suffix: "<SUF>",
        middle: "<MID>",
        ends: &["<EOT>"],
        spaced: true,
    },
];

/// A model's way of filling in the middle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fim {
    family: Family,
    /// The family's end tokens the tokenizer has.
    ends: Vec<String>,
}

impl Fim {
    /// The FIM of a tokenizer that holds the tokens `has` says it holds
    /// (a token's text, or its text after SentencePiece's `▁`): the first
    /// family whose three tokens it has. `None`: the model has no FIM.
    pub fn find(has: impl Fn(&str) -> bool) -> Option<Self> {
        let held = |token: &str| has(token) || has(&format!("▁{token}"));
        let family = FAMILIES
            .iter()
            .find(|f| held(f.prefix) && held(f.suffix) && held(f.middle))?;
        let ends = family
            .ends
            .iter()
            .filter(|t| held(t))
            .map(|t| (*t).to_owned())
            .collect();
        Some(Self {
            family: *family,
            ends,
        })
    }

    /// The family's name (`qwen`, `starcoder`, `deepseek`, `codellama`).
    pub fn family(&self) -> &'static str {
        self.family.name
    }

    /// The model's input for the gap between `prefix` and `suffix`.
    pub fn arrange(&self, prefix: &str, suffix: &str) -> String {
        let f = &self.family;
        if f.spaced {
            format!("{} {prefix} {}{suffix} {}", f.prefix, f.suffix, f.middle)
        } else {
            format!("{}{prefix}{}{suffix}{}", f.prefix, f.suffix, f.middle)
        }
    }

    /// What the model is given to fill the gap: the arrangement, sent as
    /// is (no chat template), ending at the family's end tokens. It is
    /// sent as a whole text with no system part, so that a runner that
    /// keeps snapshots of such texts starts the next one (the same file a
    /// keystroke later) from the longest prefix it holds: the file up to
    /// the first byte the keystroke changed. Each one's snapshot replaces
    /// the file's previous one, so a file has one however many keystrokes
    /// it took.
    pub fn prompt(&self, prefix: &str, suffix: &str) -> Prompt {
        Prompt {
            text: self.arrange(prefix, suffix),
            chat: Some(Chat {
                system: None,
                turns: None,
                keeping: Keeping::Replacing {
                    head: self.family.prefix.len(),
                },
            }),
            stop: self.ends.clone(),
            ..Prompt::default()
        }
    }

    /// The arrangement as an Ollama template (`/api/show`'s `template`):
    /// `.Prompt` is the prefix and `.Suffix` the suffix; a request without
    /// a suffix is its prompt, sent as is.
    pub fn ollama_template(&self) -> String {
        format!(
            "{{{{- if .Suffix }}}}{}{{{{ end }}}}{{{{ .Prompt }}}}{{{{- if .Suffix }}}}",
            self.family.prefix
        ) + &self
            .arrange("\u{0}", "\u{1}")
            .split_once('\u{0}')
            .map(|(_, rest)| rest.replace('\u{1}', "{{ .Suffix }}"))
            .unwrap_or_default()
            + "{{- end }}"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenizer(tokens: &[&str]) -> impl Fn(&str) -> bool {
        let tokens: Vec<String> = tokens.iter().map(|t| (*t).to_owned()).collect();
        move |t: &str| tokens.iter().any(|x| x == t)
    }

    #[test]
    fn each_family_is_found_by_its_tokens_and_arranges_prefix_suffix_middle() {
        let qwen = Fim::find(tokenizer(&[
            "<|fim_prefix|>",
            "<|fim_suffix|>",
            "<|fim_middle|>",
            "<|endoftext|>",
        ]))
        .unwrap();
        assert_eq!(qwen.family(), "qwen");
        assert_eq!(
            qwen.arrange("def f(", "):"),
            "<|fim_prefix|>def f(<|fim_suffix|>):<|fim_middle|>"
        );
        // Only the end tokens the tokenizer has.
        assert_eq!(qwen.prompt("a", "b").stop, ["<|endoftext|>"]);
        let deepseek = Fim::find(tokenizer(&[
            "<｜fim▁begin｜>",
            "<｜fim▁hole｜>",
            "<｜fim▁end｜>",
        ]))
        .unwrap();
        assert_eq!(
            deepseek.arrange("x", "y"),
            "<｜fim▁begin｜>x<｜fim▁hole｜>y<｜fim▁end｜>"
        );
        // Code Llama's tokens carry SentencePiece's space mark.
        let llama = Fim::find(tokenizer(&["▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>"])).unwrap();
        assert_eq!(llama.arrange("x", "y"), "<PRE> x <SUF>y <MID>");
        assert_eq!(llama.prompt("x", "y").stop, ["<EOT>"]);
        // Two of three is not FIM.
        assert!(Fim::find(tokenizer(&["<fim_prefix>", "<fim_suffix>"])).is_none());
        assert!(Fim::find(tokenizer(&["<|endoftext|>"])).is_none());
    }

    #[test]
    fn the_prompt_is_a_whole_text_without_template_and_the_ollama_template_has_suffix() {
        let fim = Fim::find(tokenizer(&["<fim_prefix>", "<fim_suffix>", "<fim_middle>"])).unwrap();
        let prompt = fim.prompt("a", "b");
        assert_eq!(prompt.whole_chat(), Some(""));
        assert!(prompt.turns().is_none());
        let template = fim.ollama_template();
        assert!(template.contains(".Suffix"), "{template}");
        assert_eq!(
            template,
            "{{- if .Suffix }}<fim_prefix>{{ end }}{{ .Prompt }}{{- if .Suffix }}\
             <fim_suffix>{{ .Suffix }}<fim_middle>{{- end }}"
        );
    }
}
