//! How a model's conversations become input: the runtime's built-in
//! template, or one the server renders itself (ChatML, Llama 3, a custom
//! one, or the model's own Jinja template, [`jinja`]), for models whose
//! built-in template is wrong or missing. With one of those, the runtime's
//! own template is switched off, the whole conversation is rendered into
//! one prompt ending with the assistant's header, and the server stops the
//! generation at the template's stop strings. `super::prompt::build` is
//! where a template is applied.

mod jinja;

use serde::{Deserialize, Serialize};

pub use jinja::{
    FUEL, JinjaTemplate, MAX_RENDERED_BYTES, RenderJob, RenderOptions, TemplateCall,
    TemplateMessage,
};

use super::message::Turn;

/// A custom template: `message` is written for each message with
/// `{role}` and `{content}` replaced; `assistant` ends the prompt; the
/// generation stops at any of `stop`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CustomTemplate {
    /// One message, with `{role}` and `{content}`.
    pub message: String,
    /// What opens the assistant's reply.
    pub assistant: String,
    /// Strings that end the reply (not shown to the client).
    #[serde(default)]
    pub stop: Vec<String>,
}

/// How a model's conversations become input.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChatTemplate {
    /// The runtime's built-in template (from the model file); history reuse on.
    #[default]
    Builtin,
    /// `<|im_start|>role\ncontent<|im_end|>` (Qwen and many others).
    ChatMl,
    /// Llama 3's `<|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>`.
    Llama3,
    /// A template from the config.
    Custom(CustomTemplate),
    /// The model's own Hugging Face template (Jinja): the service renders
    /// conversations with it (`crate::service`), with their tool calls,
    /// tools and thinking switch.
    Jinja(JinjaTemplate),
}

impl ChatTemplate {
    /// A template by its name in the config: `builtin`, `chatml`, `llama3`.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "builtin" => Some(Self::Builtin),
            "chatml" => Some(Self::ChatMl),
            "llama3" => Some(Self::Llama3),
            _ => None,
        }
    }

    /// Whether the server renders it (and the runtime's template is off).
    pub fn is_server_side(&self) -> bool {
        !matches!(self, Self::Builtin)
    }

    /// The strings that end a reply.
    pub fn stop_strings(&self) -> Vec<String> {
        match self {
            Self::Builtin => Vec::new(),
            Self::ChatMl => vec!["<|im_end|>".into(), "<|im_start|>".into()],
            Self::Llama3 => vec!["<|eot_id|>".into(), "<|start_header_id|>".into()],
            Self::Custom(t) => t.stop.clone(),
            Self::Jinja(t) if t.eos_token.is_empty() => Vec::new(),
            Self::Jinja(t) => vec![t.eos_token.clone()],
        }
    }

    /// Renders a conversation whose last turn is the assistant's, as the
    /// start of the reply to continue: the earlier turns as [`Self::render`]
    /// writes them, then the assistant's opening and its text, with no end
    /// of turn (ChatML, Llama 3, custom; nothing for the others).
    pub fn render_continuing(&self, conversation: &[Turn]) -> String {
        let Some((last, earlier)) = conversation.split_last() else {
            return String::new();
        };
        let opened = self.render(earlier);
        match self {
            Self::Builtin | Self::Jinja(_) => String::new(),
            _ => format!("{opened}{}", last.text),
        }
    }

    /// Renders a conversation, ending with the assistant's header: the
    /// templates rendered here (ChatML, Llama 3, custom); nothing for the
    /// runtime's own and the model's Jinja one, which are rendered
    /// elsewhere (the runtime; the sandbox, through `prompt::build`).
    pub fn render(&self, conversation: &[Turn]) -> String {
        let mut out = String::new();
        match self {
            Self::Builtin | Self::Jinja(_) => {}
            Self::ChatMl => {
                for t in conversation {
                    out.push_str(&format!("<|im_start|>{}\n{}<|im_end|>\n", t.role, t.text));
                }
                out.push_str("<|im_start|>assistant\n");
            }
            Self::Llama3 => {
                out.push_str("<|begin_of_text|>");
                for t in conversation {
                    let role = if t.role == "tool" {
                        "ipython"
                    } else {
                        t.role.as_str()
                    };
                    out.push_str(&format!(
                        "<|start_header_id|>{role}<|end_header_id|>\n\n{}<|eot_id|>",
                        t.text
                    ));
                }
                out.push_str("<|start_header_id|>assistant<|end_header_id|>\n\n");
            }
            Self::Custom(t) => {
                for turn in conversation {
                    out.push_str(
                        &t.message
                            .replace("{role}", &turn.role)
                            .replace("{content}", &turn.text),
                    );
                }
                out.push_str(&t.assistant);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat() -> Vec<Turn> {
        vec![
            Turn {
                role: "system".into(),
                text: "be brief".into(),
            },
            Turn {
                role: "user".into(),
                text: "hi".into(),
            },
        ]
    }

    #[test]
    fn templates_render_the_whole_chat_and_open_the_reply() {
        assert_eq!(
            ChatTemplate::ChatMl.render(&chat()),
            "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            ChatTemplate::Llama3.render(&chat()),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nbe brief<|eot_id|>\
             <|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        let custom = ChatTemplate::Custom(CustomTemplate {
            message: "[{role}] {content}\n".into(),
            assistant: "[assistant] ".into(),
            stop: vec!["[user]".into()],
        });
        assert_eq!(
            custom.render(&chat()),
            "[system] be brief\n[user] hi\n[assistant] "
        );
        assert_eq!(custom.stop_strings(), vec!["[user]".to_owned()]);
        assert!(!ChatTemplate::Builtin.is_server_side() && ChatTemplate::ChatMl.is_server_side());
    }
}
